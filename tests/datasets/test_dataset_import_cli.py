"""``tasks import`` command: arguments, table, exit codes 0 / 1 / 2."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from task_factory.cli import main
from task_factory.datasets.cli import add_import_command

FIXTURES = Path(__file__).parent / "fixtures"


def test_import_registers_on_a_tasks_subparser() -> None:
    parser = argparse.ArgumentParser()
    add_import_command(parser.add_subparsers(dest="tasks_command", required=True))
    args = parser.parse_args(["import", "a.jsonl", "b.parquet", "--out", "o", "--format", "swe-smith",
                              "--image-namespace", "jyangballin", "--arch", "arm64"])
    assert (args.files, args.out, args.format, args.image_namespace, args.arch, args.func.__name__) == (
        [Path("a.jsonl"), Path("b.parquet")], Path("o"), "swe-smith", "jyangballin", "arm64", "_import")
    with pytest.raises(SystemExit):
        parser.parse_args(["import", "a.jsonl", "--out", "o", "--format", "multi-swe-bench"])


def test_exit_0_when_every_row_imports(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["import", str(FIXTURES / "swebench_4x.jsonl"), str(FIXTURES / "swe_gym.jsonl"),
                 "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "django__django-11099" in out and "4 row(s): 4 imported, 0 rejected" in out


def test_exit_1_when_some_rows_are_rejected_and_good_ones_are_written(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture) -> None:
    assert main(["import", str(FIXTURES / "swe_rebench.jsonl"), "--out", str(tmp_path), "--quiet"]) == 1
    assert capsys.readouterr().out.strip().startswith("2 row(s): 1 imported, 1 rejected")
    assert len((tmp_path / "tasks.jsonl").read_text().splitlines()) == 1


def test_exit_2_on_unreadable_input(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["import", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "out")]) == 2
    assert "nope.jsonl: no such file" in capsys.readouterr().err


def test_module_entry_point(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "task_factory", "import", str(FIXTURES / "r2e_gym.jsonl"),
                           "--out", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    assert "r2e_gym.jsonl:2" in proc.stdout and "error: test_cmd:" in proc.stdout
