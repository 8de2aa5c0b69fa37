"""Real release-diff tasks mined from PyPI (six's consecutive releases), end to end.

The pack is mined once (download, diff split, changelog, F2P/P2P over repeated runs,
the verifier's check in bwrap) into .cache/taskpack/ and then graded through the env
server's own grading path in the bwrap sandbox: gold patch 1.0, empty diff 0.0.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from support.git_repos import git
from support.taskpacks import PACK_DIR, mined_pack_or_missing

from task_factory.changelog import find_section
from task_factory.models import MineReport
from sandbox.models import SandboxConfig
from task_factory.validate import validate_file
from verifier import GradeCache, grade_submission
from verifier.task import TaskInstance, load_tasks


@pytest.fixture(scope="module")
def pack() -> Path:
    return mined_pack_or_missing(("six",))


@pytest.fixture(scope="module")
def report(pack: Path) -> MineReport:
    return MineReport.model_validate_json((pack.parent / "build_report.json").read_text())


def test_six_yields_real_fixes_and_says_why_it_rejects_the_rest(report: MineReport) -> None:
    reasons = {(p.from_version, p.to_version): p.reason for p in report.pairs}
    assert reasons == {("1.12.0", "1.13.0"): None, ("1.13.0", "1.14.0"): None,
                       ("1.14.0", "1.15.0"): "no_test_change", ("1.15.0", "1.16.0"): "no_test_change",
                       ("1.16.0", "1.17.0"): "flaky"}, [p.model_dump() for p in report.pairs]
    (pkg,) = report.packages
    assert (pkg.pairs_tried, pkg.tasks, pkg.rejected) == (5, 2, {"no_test_change": 2, "flaky": 1})


def test_records_are_release_diffs_with_hidden_tests(pack: Path, report: MineReport) -> None:
    records = [json.loads(line) for line in pack.read_text().splitlines()]
    assert [r["instance_id"] for r in records] == ["six__1.12.0-1.13.0", "six__1.13.0-1.14.0"]
    for r, prov in zip(records, report.provenance, strict=True):
        assert r["source"] == "release-diff" and r["FAIL_TO_PASS"] and r["PASS_TO_PASS"]
        assert not set(r["FAIL_TO_PASS"]) & set(r["PASS_TO_PASS"])
        assert prov.patch_files == ["six.py"] and prov.test_files == ["test_six.py"]
        assert r["patch"].startswith("diff --git a/six.py b/six.py") and "test_six.py" not in r["patch"]
        assert r["test_patch"].startswith("diff --git a/test_six.py b/test_six.py")
        repo = pack.parent / r["repo_path"]
        assert git(repo, "rev-list", "--all").split() == [r["base_commit"]]  # the later release is not stored
        base_tests = git(repo, "show", f"{r['base_commit']}:test_six.py")
        added = [ln[1:] for ln in r["test_patch"].splitlines() if ln.startswith("+") and not ln.startswith("+++")
                 and len(ln.strip()) > 25]
        assert added and not all(a in base_tests for a in added)  # the workspace lacks the new tests
        for t in r["FAIL_TO_PASS"]:
            assert t.split("::")[-1].split("[")[0] not in r["problem_statement"]


def test_statement_is_the_maintainers_changelog_entry(pack: Path, report: MineReport) -> None:
    cache_src = PACK_DIR / "cache" / "src"
    for task, prov in zip(load_tasks(pack), report.provenance, strict=True):
        section = find_section(cache_src / f"six-{prov.to_version}", prov.to_version)
        assert section is not None and prov.changelog_file == "CHANGES" and prov.changelog_heading == prov.to_version
        assert section.text in task.problem_statement and task.problem_statement.startswith(
            f"This is six {prov.from_version}.")
        assert "def test_" not in task.problem_statement and "test_six" not in task.problem_statement


def _rewards(graded: list[tuple[TaskInstance, str]]) -> list[float]:
    """The verifier's reward (resolved) of each (task, diff), graded at once in bwrap sandboxes."""
    async def all_of() -> list[float]:
        results = await asyncio.gather(*(grade_submission(task, diff, SandboxConfig(backend="bwrap"), "resolved",
                                                          cache=GradeCache(max_entries=0)) for task, diff in graded))
        return [r.reward for r in results]

    return asyncio.run(all_of())


@pytest.mark.usefixtures("bwrap")  # skips without bubblewrap; fails under CI
def test_the_verifier_grades_gold_resolved_and_empty_not(pack: Path) -> None:
    for task in load_tasks(pack):
        gold, empty = _rewards([(task, task.patch), (task, "")])
        assert gold == 1.0
        assert empty == 0.0


def test_a_rebuild_is_cached(pack: Path, tmp_path: Path) -> None:
    from task_factory.mine import mine_tasks

    again = mine_tasks(tmp_path / "again", ["six"], min_tasks=1, cache_dir=PACK_DIR / "cache")
    assert again.pytest_runs == 0 and again.duration_s < 30
    assert (tmp_path / "again" / "tasks.jsonl").read_text() == pack.read_text()


@pytest.mark.usefixtures("bwrap")  # skips without bubblewrap; fails under CI
def test_validate_through_the_real_grading_path_with_bwrap(pack: Path) -> None:
    result = asyncio.run(validate_file(pack, backend="bwrap"))
    assert result.ok, result.table()
