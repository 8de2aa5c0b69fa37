"""``task-factory build|mine|validate`` and ``python -m task_factory``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.taskpacks import PACK_DIR, build_mined_pack, build_small_pack

from task_factory.cli import build_parser, main


def test_env_server_cli_has_tasks_build_and_validate() -> None:
    parser = build_parser()
    args = parser.parse_args(["build", "--out", "x", "--packages", "toolz,six", "--seed", "7"])
    assert (args.out, args.packages, args.seed, args.func.__name__) == (Path("x"), ["toolz,six"], 7, "_build")
    args = parser.parse_args(["validate", "t.jsonl", "--backend", "docker"])
    assert (args.file, args.backend, args.func.__name__) == (Path("t.jsonl"), "docker", "_validate")
    with pytest.raises(SystemExit):
        parser.parse_args(["validate", "t.jsonl", "--backend", "vm"])
    args = parser.parse_args(["build", "--out", "x", "--statement", "verbose"])
    assert args.statement == "verbose" and parser.parse_args(["build", "--out", "x"]).statement == "report"
    args = parser.parse_args(["mine", "--out", "m", "--packages", "six,idna", "--check", "bwrap",
                              "--max-patch-lines", "20", "--max-tasks", "3"])
    assert (args.packages, args.check, args.max_patch_lines, args.max_tasks, args.func.__name__) == \
        (["six,idna"], "bwrap", 20, 3, "_mine")


@pytest.mark.parametrize("argv", [["validate", "t.jsonl", "--backend", "host"], ["mine", "--out", "m", "--check", "host"],
                                  ["build", "--out", "b", "--check", "host"],
                                  ["reverify", "--traces", "d", "--tasks", "t", "--backend", "host"]])
def test_there_is_no_host_grader_to_choose(argv: list[str], capsys: pytest.CaptureFixture) -> None:
    """Tasks are checked by the verifier in a sandbox only: 'host' is one line naming the choices."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"task-factory {argv[0]}: {argv[-2]} host: not one of bwrap, docker"), err
    assert "no host grader" in err and ("none" in err) == (argv[0] in ("build", "mine"))


def test_build_and_mine_check_with_the_verifier_in_bwrap_by_default() -> None:
    parser = build_parser()
    assert parser.parse_args(["build", "--out", "x"]).check == "bwrap" == parser.parse_args(["mine", "--out", "m"]).check
    assert parser.parse_args(["build", "--out", "x", "--check", "none"]).check == "none"
    assert parser.parse_args(["mine", "--out", "x", "--check", "docker"]).check == "docker"


def test_mine_command_prints_the_yield_table(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    build_mined_pack(("six",))  # warms the cache this run reuses
    rc = main(["mine", "--out", str(tmp_path / "m"), "--packages", "six", "--min-tasks", "1",
               "--cache-dir", str(PACK_DIR / "cache"), "--quiet"])
    out = capsys.readouterr().out
    assert rc == 0, out
    row = next(line.split() for line in out.splitlines() if line.startswith("six "))
    assert row[1:3] == ["5", "2"] and "flaky=1" in out and "no_test_change=2" in out
    assert "2 release-diff task(s) from 5 pair(s)" in out and "0 pytest run(s)" in out and "ok" in out
    assert main(["mine", "--out", str(tmp_path / "n"), "--packages", "nope", "--quiet"]) == 2
    assert "unknown package" in capsys.readouterr().err


def test_module_entry_point_runs_standalone() -> None:
    proc = subprocess.run([sys.executable, "-m", "task_factory", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "build" in proc.stdout and "validate" in proc.stdout


def test_build_command_writes_tasks_and_a_table(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    build_small_pack(3)  # warms the cache this build reuses
    rc = main(["build", "--out", str(tmp_path / "out"), "--packages", "inflection", "--max-tasks", "1",
               "--cache-dir", str(PACK_DIR / "cache"), "--quiet"])
    out = capsys.readouterr().out
    assert rc == 0, out
    lines = (tmp_path / "out" / "tasks.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["instance_id"].startswith("inflection__0.5.1-")
    assert "inflection-0.5.1" in out and "1 task(s)" in out and "ok" in out


def test_build_command_reports_bad_input_and_unmet_minimum(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["build", "--out", str(tmp_path / "a"), "--packages", "no-such-pkg", "--quiet"]) == 2
    assert "unknown package" in capsys.readouterr().err
    rc = main(["build", "--out", str(tmp_path / "b"), "--packages", "inflection", "--max-tasks", "1",
               "--min-tasks", "2", "--cache-dir", str(PACK_DIR / "cache"), "--quiet"])
    assert rc == 1 and "NOT MET" in capsys.readouterr().out


@pytest.mark.usefixtures("bwrap")  # skips without bubblewrap; fails under CI
def test_validate_command_passes_a_good_pack(capsys: pytest.CaptureFixture) -> None:
    assert main(["validate", str(build_small_pack(3)), "--backend", "bwrap"]) == 0
    out = capsys.readouterr().out
    assert "validate (bwrap): 3 passed, 0 failed" in out
    rows = [line.split() for line in out.splitlines() if "__" in line]
    assert len(rows) == 3 and all(r[1:4] == ["1.00", "0.00", "yes"] for r in rows)


@pytest.mark.usefixtures("bwrap")  # skips without bubblewrap; fails under CI
def test_validate_command_fails_on_an_inconsistent_task(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    pack = build_small_pack(3)
    tasks = [json.loads(line) for line in pack.read_text().splitlines()]
    broken = tasks[0]
    for key in ("repo_path", "python_env"):
        broken[key] = str((pack.parent / broken[key]).resolve())
    broken["patch"] = ""  # the "gold" fix now fixes nothing
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(broken) + "\n")
    assert main(["validate", str(bad), "--backend", "bwrap"]) == 1
    out = capsys.readouterr().out
    assert "NO" in out and "gold patch does not resolve" in out and "0 passed, 1 failed" in out


def test_validate_command_reports_an_unreadable_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["validate", str(tmp_path / "missing.jsonl")]) == 2
    assert "cannot read task file" in capsys.readouterr().err
