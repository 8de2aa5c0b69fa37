"""A task source is one registry entry (task_factory/task_sources.py): a throwaway source added in this
test (a class and one `register_source` call) reaches every surface generated from the registry: the
registry itself, `task-factory --help` and `task-factory make`'s choices, its settings (`--set`, their
listing, a mistyped key's one line), and its tasks go through the one id rule and the one check (the
verifier grades gold 1.0 and empty 0.0 in a real bwrap sandbox), cached in the one verdict cache."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from pydantic import Field

from task_factory import check as check_module
from task_factory.cli import build_parser, main
from task_factory.demo_task import demo_tasks_file
from task_factory.task_sources import (SOURCES, CheckedOptions, Log, TaskSource, is_task_id, register_source,
                                       source_class, source_names, task_id)
from verifier.task import TaskRecord

from support.git_repos import commit_files, diff_to

FIXTURES = Path(__file__).resolve().parents[1] / "datasets" / "fixtures"

CALC = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
TESTS = ("from calc import add, sub\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
         "def test_sub():\n    assert sub(5, 3) == 2\n")


class TinyOptions(CheckedOptions):
    python_env: Path = Field(description="a venv with pytest that the task's tests run in")
    broken: bool = Field(False, description="also yield a task whose gold patch fixes nothing, and a repeated id")


class TinySource(TaskSource):
    """Throwaway: one hand-made task (calc.add subtracts) from a git repository it writes under the output."""

    name: ClassVar[str] = "tiny"
    label: ClassVar[str] = "synthetic-mutation"
    summary: ClassVar[str] = "one hand-made task from a tiny git repository"
    options_class = TinyOptions

    def tasks(self, out: Path, log: Log) -> Iterator[TaskRecord]:
        repo = out / "repos" / "calc"
        base = commit_files(repo, {"calc.py": CALC, "test_calc.py": TESTS})

        def task(fixed: str, *parts: str) -> TaskRecord:
            gold = diff_to(repo, {"calc.py": fixed})
            return TaskRecord(instance_id=task_id("local/calc", *parts), source="synthetic-mutation",
                              repo="local/calc", base_commit=base, problem_statement="calc.add(2, 3) is -1, not 5",
                              patch=gold, FAIL_TO_PASS=["test_calc.py::test_add"],
                              PASS_TO_PASS=["test_calc.py::test_sub"], version="1", environment_setup_commit=base,
                              repo_path="repos/calc", python_env=str(self.options.python_env))

        log("one task")
        yield task(CALC.replace("return a - b", "return a + b", 1), "1", "add")
        if self.options.broken:
            yield task(CALC.replace("def add(a, b):", "def add(a, b):  # fixed?"), "1", "comment")
            yield task(CALC.replace("return a - b", "return b + a", 1), "1", "add")


@pytest.fixture
def tiny() -> Iterator[type[TinySource]]:
    register_source(TinySource)
    try:
        yield TinySource
    finally:
        SOURCES.pop("tiny", None)


def test_the_registry_carries_it_and_refuses_a_clash(tiny: type[TinySource]) -> None:
    assert "tiny" in source_names() and source_class("tiny") is tiny
    assert register_source(tiny) is tiny  # the same class again: no clash

    class Other(TinySource):
        pass

    with pytest.raises(ValueError, match="already registered"):
        register_source(Other)

    class Unlabelled(TinySource):
        name = "unlabelled"
        label = "hand-made"

    with pytest.raises(ValueError, match="not a record's source"):
        register_source(Unlabelled)
    assert "unlabelled" not in SOURCES
    with pytest.raises(ValueError, match="unknown task source 'nope'; registered: release-diff, synthetic-mutation, "
                                         "swe-bench, tiny"):
        source_class("nope")


def test_the_cli_lists_it_with_its_settings(tiny: type[TinySource], capsys: pytest.CaptureFixture) -> None:
    parser = build_parser()
    assert "tiny" in parser.format_help()
    with pytest.raises(SystemExit):
        parser.parse_args(["make", "--help"])
    listing = capsys.readouterr().out
    assert "tiny" in listing and tiny.summary in listing
    with pytest.raises(SystemExit):
        parser.parse_args(["make", "tiny", "--help"])
    page = capsys.readouterr().out
    assert "python_env (path, required): a venv with pytest" in page
    assert "broken (bool, default False): also yield" in page and "check (str, default bwrap)" in page
    args = parser.parse_args(["make", "tiny", "--out", "o", "--set", "broken=true"])
    assert (args.source, args.set, args.func.__name__) == ("tiny", ["broken=true"], "_make")
    assert build_parser().parse_args(["make", "swe-bench", "--out", "o"]).source == "swe-bench"
    with pytest.raises(SystemExit):  # unregistered: not a choice
        parser.parse_args(["make", "tiny2", "--out", "o"])


@pytest.mark.parametrize(("setting", "line"), [
    ("brokn=true", "brokn: not a setting (did you mean broken?)"),
    ("broken=maybe", "broken: Input should be a valid boolean, unable to interpret input"),
    ("check=host", "check: host: not one of bwrap, docker, none (there is no host grader"),
    ("broken", "override 'broken' is not key=value"),
])
def test_a_bad_setting_is_one_line(tiny: type[TinySource], tmp_path: Path, capsys: pytest.CaptureFixture,
                                   setting: str, line: str) -> None:
    rc = main(["make", "tiny", "--out", str(tmp_path / "o"), "--set", "python_env=/v", "--set", setting])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"task-factory make tiny: {line}"), err
    assert not (tmp_path / "o").exists()


def test_the_one_id_rule() -> None:
    assert task_id("six", "1.16.0", "1.17.0") == "six__1.16.0-1.17.0"
    assert task_id("local/calc", "1", "add") == "local__calc__1-add"
    assert all(is_task_id(i) for i in ("six__1.16.0-1.17.0", "django__django-11099", "pandas__bbd4e1c7f2a9"))
    assert not any(is_task_id(i) for i in ("six-1.16.0", "six__", "a b__c", "a/b__c"))
    for bad in (("six",), ("", "1"), ("six", "1 2"), ("six", "a/b"), ("six", "")):
        with pytest.raises(ValueError):
            task_id(*bad)


@pytest.mark.usefixtures("bwrap")  # skips without bubblewrap; fails under CI
def test_its_tasks_go_through_the_one_check(tiny: type[TinySource], tmp_path: Path, capsys: pytest.CaptureFixture,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    venv = demo_tasks_file().parent / "venv"  # a venv with pytest (the demo task's)
    argv = ["make", "tiny", "--out", str(tmp_path / "out"), "--set", f"python_env={venv}", "--set", "broken=true",
            "--set", f"cache_dir={tmp_path / 'cache'}", "--quiet"]
    assert main(argv) == 1  # some tasks dropped
    out = capsys.readouterr().out
    assert "gold patch does not resolve" in out and "duplicate_id" in out, out
    assert "1 tiny task(s)" in out and "check: bwrap" in out, out
    tasks = [json.loads(line) for line in (tmp_path / "out" / "tasks.jsonl").read_text().splitlines()]
    assert [t["instance_id"] for t in tasks] == ["local__calc__1-add"]
    report = json.loads((tmp_path / "out" / "source_report.json").read_text())
    assert report["rejected"] == {"check_failed": 1, "duplicate_id": 1} and report["n_tasks"] == 1
    assert list((tmp_path / "cache" / "verdicts" / "tiny").rglob("check-bwrap-*.json"))

    # the task file it wrote passes the same check through `task-factory validate`
    assert main(["validate", str(tmp_path / "out" / "tasks.jsonl"), "--backend", "bwrap"]) == 0
    assert "validate (bwrap): 1 passed, 0 failed" in capsys.readouterr().out

    # a rerun grades nothing: both checks come from the verdict cache
    def no_grading(*_args, **_kwargs):
        raise AssertionError("graded again: the verdict cache was not used")

    monkeypatch.setattr(check_module, "check_task", no_grading)
    assert main([*argv[:2], "--out", str(tmp_path / "again"), *argv[4:]]) == 1
    assert (tmp_path / "again" / "tasks.jsonl").read_text() == (tmp_path / "out" / "tasks.jsonl").read_text()


def test_the_built_in_sources_are_entries_their_commands_delegate_to(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture) -> None:
    assert source_names()[:3] == ("release-diff", "synthetic-mutation", "swe-bench")
    assert {n: (source_class(n).command, source_class(n).label) for n in source_names()[:3]} == {
        "release-diff": ("mine", "release-diff"), "synthetic-mutation": ("build", "synthetic-mutation"),
        "swe-bench": ("import", "swe-bench")}
    # `import FILE` and `make swe-bench --set files=[FILE]` are one source: the same tasks, the same table
    rows = str(FIXTURES / "swebench_4x.jsonl")
    assert main(["import", rows, "--out", str(tmp_path / "a")]) == 0
    table = capsys.readouterr().out
    assert main(["make", "swe-bench", "--out", str(tmp_path / "b"), "--set", f"files=[{rows}]"]) == 0
    assert capsys.readouterr().out == table.replace(str(tmp_path / "a"), str(tmp_path / "b"))
    assert (tmp_path / "a" / "tasks.jsonl").read_text() == (tmp_path / "b" / "tasks.jsonl").read_text()
    # its tasks(), as any source's: the records its pipeline wrote
    dataset = source_class("swe-bench").configure([f"files=[{rows}]"])
    records = list(dataset.tasks(tmp_path / "c", print))
    assert [r.model_dump(mode="json") for r in records] == [
        json.loads(line) for line in (tmp_path / "a" / "tasks.jsonl").read_text().splitlines()]
    assert len(records) == 3 and all(r.source == "swe-bench" for r in records)
    capsys.readouterr()
    # a built-in source's bad input is its command's one line, under either name
    assert main(["make", "release-diff", "--out", str(tmp_path / "m"), "--set", "packages=[nope]"]) == 2
    assert "task-factory make release-diff: " in capsys.readouterr().err
    assert main(["mine", "--out", str(tmp_path / "m"), "--packages", "nope"]) == 2
    assert capsys.readouterr().err.startswith("task-factory mine: ")
    assert main(["make", "synthetic-mutation", "--out", str(tmp_path / "s"), "--set", "max_tsks=3"]) == 2
    assert "max_tsks: not a setting (did you mean max_tasks?)" in capsys.readouterr().err
