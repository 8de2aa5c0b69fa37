"""The factory writes only guarded tasks (task_factory/check.py `check_record`): a task whose reward would
rest on its canaries alone, with a guess that first runs the members scoring over 1%, is refused, and
`task-factory validate` names it. Real tasks from real git repositories, checked by the verifier in bwrap.

The unguarded task: its one FAIL_TO_PASS test takes a fixture holding objects of a class the test module
defines (no call the script check can write, no plain test: guarantee 8 cannot run), and its assertion
is on those objects, so it gets no canary group (only the module's synthetic canary: a guess that runs the
members scores every time). The guarded one: the same bug, tested by a call with literal arguments (the
script check stands behind it)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from task_factory.check import check_record
from task_factory.demo_task import demo_tasks_file
from task_factory.validate import validate_file
from task_factory.verdicts import VerdictCache
from verifier.task import TaskRecord

from support.git_repos import commit_files, diff_to

pytestmark = pytest.mark.usefixtures("bwrap")  # skips without bubblewrap; fails under CI

CODE = "def total(items):\n    return sum(getattr(i, 'value', i) for i in items[1:])\n"
FIXED = "def total(items):\n    return sum(getattr(i, 'value', i) for i in items)\n"
UNGUARDED = ("import pytest\n\nfrom calc import total\n\n\nclass Item:\n    def __init__(self, value):\n"
             "        self.value = value\n\n\n@pytest.fixture\ndef items():\n    return [Item(2), Item(3)]\n\n\n"
             "def test_total(items):\n    assert total(items) == 5\n\n\ndef test_empty():\n    assert total([]) == 0\n")
GUARDED = ("from calc import total\n\n\ndef test_total():\n    assert total([2, 3]) == 5\n\n\n"
           "def test_empty():\n    assert total([]) == 0\n")


def _task(root: Path, name: str, tests: str) -> TaskRecord:
    repo = root / "repos" / name
    base = commit_files(repo, {"calc.py": CODE, "test_calc.py": tests})
    gold = diff_to(repo, {"calc.py": FIXED})
    venv = demo_tasks_file().parent / "venv"  # a venv with pytest (the demo task's)
    return TaskRecord(instance_id=f"local__{name}-1", source="synthetic-mutation", repo=f"local/{name}",
                      base_commit=base, problem_statement="calc.total([2, 3]) is 3, not 5", patch=gold,
                      FAIL_TO_PASS=["test_calc.py::test_total"], PASS_TO_PASS=["test_calc.py::test_empty"],
                      version="1", environment_setup_commit=base, repo_path=f"repos/{name}", python_env=str(venv))


def test_an_unguarded_task_is_refused_and_a_guarded_one_written(tmp_path: Path) -> None:
    unguarded, guarded = _task(tmp_path, "items", UNGUARDED), _task(tmp_path, "plain", GUARDED)
    verdicts = VerdictCache(tmp_path / "cache", "synthetic-mutation", "calc")
    why = check_record(unguarded, tmp_path, "bwrap", verdicts)
    assert why is not None and why.startswith("unguarded: no script check stands behind the test run"), why
    assert "scores with 1 (over 0.01" in why, why  # its test uses the module's own objects: no group at all
    assert check_record(guarded, tmp_path, "bwrap", verdicts) is None

    # validate grades any file the same way and names the unguarded task (gold 1.0 and empty 0.0 hold)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(t.model_copy(update={"repo_path": str(tmp_path / t.repo_path)}).model_dump_json() + "\n"
                             for t in (unguarded, guarded)))
    report = asyncio.run(validate_file(tasks, backend="bwrap"))
    assert report.ok, report.table()
    rows = {r.instance_id: r for r in report.rows}
    assert rows["local__items-1"].unguarded and not rows["local__items-1"].script_checked
    assert rows["local__plain-1"].unguarded is None and rows["local__plain-1"].script_checked
    assert rows["local__items-1"].guess_bound_f2p == 1.0
    # the guarded task's canaries are weak too (a one-digit literal): the script check is what guards it
    assert rows["local__plain-1"].guess_bound_f2p > 0.01
    assert "rests on the canaries alone" in report.table() and "local__items-1" in report.table().splitlines()[-1]
