"""A real small pack built by the task builder: its files, repos, venvs and validation."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest
from support.git_repos import git
from support.taskpacks import PACK_DIR, SMALL_PACK_PACKAGES, build_small_pack

from task_factory import build_tasks
from task_factory.models import BuildReport
from task_factory.build import STATEMENT_REJECTIONS
from task_factory.statement import leaks, reproducer_block, reveals_tests
from sandbox.models import SandboxConfig
from task_factory.validate import checkout, import_root_of, statement_problems, validate_file
from verifier import GradeCache, grade_submission
from verifier.task import TaskInstance, TaskRecord, load_tasks

N = 3


@pytest.fixture(scope="module")
def pack() -> Path:
    return build_small_pack(N)


@pytest.fixture(scope="module")
def report(pack: Path) -> BuildReport:
    return BuildReport.model_validate_json((pack.parent / "build_report.json").read_text())


def test_pack_is_swe_bench_format_with_local_paths(pack: Path) -> None:
    lines = pack.read_text().splitlines()
    assert len(lines) == N
    records = [TaskRecord.model_validate_json(line) for line in lines]
    assert len({r.instance_id for r in records}) == N and len({r.repo for r in records}) == N  # 3 packages
    for r in records:
        assert not Path(r.repo_path).is_absolute() and not Path(r.python_env).is_absolute()
        assert r.FAIL_TO_PASS and not set(r.FAIL_TO_PASS) & set(r.PASS_TO_PASS)
        assert r.patch.startswith("diff --git ") and r.test_patch == ""
        assert r.source == "synthetic-mutation"  # labelled honestly: a mutation, not a historical fix
    loaded = load_tasks(pack)  # the env server's own loader
    assert [t.instance_id for t in loaded] == [r.instance_id for r in records]
    assert {t.source for t in loaded} == {"synthetic-mutation"}


def test_base_commit_holds_the_bug_and_the_gold_patch_reverses_it(pack: Path, report: BuildReport) -> None:
    for task, prov in zip(load_tasks(pack), report.provenance, strict=True):
        repo = task.repo_path
        parent = git(repo, "rev-parse", f"{task.base_commit}^").strip()
        assert git(repo, "diff", task.base_commit, parent) == task.patch  # patch = bug commit -> clean parent
        changed = git(repo, "diff", "--name-only", task.base_commit, parent).split()
        assert changed == [prov.mutation.path]
        assert not any("test" in Path(p).name for p in changed)  # hidden tests are untouched


def test_venv_lacks_the_package_and_points_at_the_workspace(pack: Path, report: BuildReport, tmp_path: Path) -> None:
    for task, prov in zip(load_tasks(pack), report.provenance, strict=True):
        module = prov.mutation.path.removeprefix("src/").split("/")[0].removesuffix(".py")
        env = {"PATH": os.defpath, "HOME": str(tmp_path)}
        probe = subprocess.run([str(task.python_env / "bin" / "python"), "-c", f"import {module}"],
                               cwd=tmp_path, env=env, capture_output=True, text=True)
        assert probe.returncode != 0 and "ModuleNotFoundError" in probe.stderr, (module, probe.stderr)
        pytest_ok = subprocess.run([str(task.python_env / "bin" / "python"), "-m", "pytest", "--version"],
                                   cwd=tmp_path, env=env, capture_output=True, text=True)
        assert pytest_ok.returncode == 0
        (pth,) = task.python_env.glob("lib/python*/site-packages/_swe_workspace.pth")
        assert pth.read_text().strip() in ("/workspace", "/workspace/src")


@pytest.mark.usefixtures("bwrap")  # skips without bubblewrap; fails under CI
def test_a_sessions_first_pytest_compiles_nothing_of_the_venv(pack: Path) -> None:
    """The venv holds its bytecode (``task_factory/envs.py``), which the sandbox's bytecode layer links
    (``sandbox/bytecode.py``): a fresh session's first ``python -m pytest`` compiles only the workspace."""
    from sandbox import open_sandbox

    task = load_tasks(pack)[0]
    assert list(task.python_env.glob("lib/python3*/site-packages/_pytest/__pycache__/main.cpython-3*.pyc"))
    probe = ("python -m pytest --co -q >/dev/null 2>&1; python -c \"import os\n"
             "for d, _, fs in os.walk(os.environ['PYTHONPYCACHEPREFIX']):\n"
             "    for f in fs:\n"
             "        p = os.path.join(d, f)\n"
             "        print('LINK' if os.path.islink(p) else 'COMPILED', p)\"")

    async def run() -> str:
        sb = await open_sandbox(task.workspace_spec(), SandboxConfig(backend="bwrap"))
        try:
            return (await sb.run(f"cd /workspace && {probe}", 120)).output
        finally:
            await sb.close()

    lines = asyncio.run(run()).splitlines()
    compiled = [line.split()[1] for line in lines if line.startswith("COMPILED ")]
    assert any("/site-packages/_pytest/" in line for line in lines if line.startswith("LINK ")), lines[:20]
    assert compiled and all(p.startswith("/tmp/.pycache/workspace/") for p in compiled), compiled


def test_statements_do_not_leak_the_injected_change_or_the_tests(pack: Path, report: BuildReport) -> None:
    for task, prov in zip(load_tasks(pack), report.provenance, strict=True):
        changed = [line[1:] for line in task.patch.splitlines()
                   if line[:1] in "+-" and not line.startswith(("+++", "---"))]
        assert leaks(task.problem_statement, prov.mutation, changed) == []
        # a user's bug report: no test id, test name or test file; the package and version it is about
        assert reveals_tests(task.problem_statement, task.repo_path, task.tests) == []
        assert not any(t.split("::")[0] in task.problem_statement for t in task.tests)
        assert f"{task.repo.removeprefix('pypi/')} {task.version}" in task.problem_statement


def test_every_statement_names_its_entry_point_and_carries_a_script_that_fails_only_on_the_bug(
        pack: Path, report: BuildReport, tmp_path: Path) -> None:
    """What the issue promised a capable engineer: the public entry point that misbehaves, and a
    script that shows the failure on the base tree and not with the gold patch. Run here as a user
    runs it (``python reproduce.py`` from the tree), independently of the builder's own runner."""
    for task, prov in zip(load_tasks(pack), report.provenance, strict=True):
        first = task.problem_statement.splitlines()[0]
        assert prov.entry_point and f"`{prov.entry_point}`" in first, first
        assert not any(part.startswith("_") for part in prov.entry_point.split("."))
        code = reproducer_block(task.problem_statement)
        assert code is not None and code == prov.reproducer
        script = tmp_path / "reproduce.py"
        script.write_text(code + "\n")
        env = {"PATH": os.defpath, "HOME": str(tmp_path), "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
        python = str(task.python_env / "bin" / "python")
        outcomes = []
        for diff in ("", task.patch):
            with checkout(task, diff) as tree:
                env["PYTHONPATH"] = str(tree / import_root_of(task.python_env))
                outcomes.append(subprocess.run([python, str(script)], cwd=tree, env=env, capture_output=True,
                                               text=True, timeout=60))
        on_base, on_gold = outcomes
        assert on_base.returncode != 0, (task.instance_id, on_base.stdout)
        # "what came back": the statement quotes the exception the script died of on the base tree
        assert on_base.stderr.strip().splitlines()[-1][:100] in task.problem_statement, on_base.stderr
        assert on_gold.returncode == 0, (task.instance_id, on_gold.stderr[-2000:])
        assert statement_problems(task) == []  # the same check, as `task-factory validate --statements` runs it
    for p in report.packages:  # rejections are counted by reason
        assert set(p.rejected) <= {*STATEMENT_REJECTIONS, "gold_failed", "timeout", "collection_error",
                                   "no_failing_test", "too_many_failures", "flaky"}


@pytest.mark.usefixtures("bwrap")  # validate grades in bwrap: skips without bubblewrap; fails under CI
def test_validate_statements_flags_a_statement_without_a_working_reproducer(pack: Path, tmp_path: Path) -> None:
    """`task-factory validate --statements`: the built pack passes; a copy whose statement lost its
    reproducer's check, or names no entry point, fails with the reason, and exits 1."""
    import sys

    rows = [json.loads(line) for line in pack.read_text().splitlines()]
    for row in rows:
        for key in ("repo_path", "python_env"):
            row[key] = str((pack.parent / row[key]).resolve())
    bad = [dict(rows[0]), dict(rows[1])]
    code = reproducer_block(bad[0]["problem_statement"])
    assert code is not None
    kept = "\n".join(line for line in code.splitlines() if not line.startswith("assert "))
    bad[0]["problem_statement"] = bad[0]["problem_statement"].replace(code, kept)  # shows no failure any more
    lines = bad[1]["problem_statement"].splitlines()
    bad[1]["problem_statement"] = "\n".join(["Something is wrong somewhere."] + lines[1:])
    broken = tmp_path / "broken.jsonl"
    broken.write_text("".join(json.dumps(r) + "\n" for r in bad))
    exe = [sys.executable, "-m", "task_factory"]
    good = subprocess.run([*exe, "validate", str(pack), "--backend", "bwrap", "--statements"], capture_output=True,
                          text=True, timeout=600)
    assert good.returncode == 0, good.stdout + good.stderr
    out = subprocess.run([*exe, "validate", str(broken), "--backend", "bwrap", "--statements"], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "statement: its reproducer does not fail on the base tree" in out.stdout
    assert "statement: its first line names no public entry point" in out.stdout
    assert "0 passed, 2 failed" in out.stdout


def _reward(task: TaskInstance, diff: str) -> float:
    """The verifier's reward (resolved) of ``diff``, graded in a bwrap sandbox."""
    return asyncio.run(grade_submission(task, diff, SandboxConfig(backend="bwrap"), "resolved",
                                        cache=GradeCache(max_entries=0))).reward


@pytest.mark.usefixtures("bwrap")  # skips without bubblewrap; fails under CI
def test_the_verifier_rejects_a_wrong_fix(pack: Path) -> None:
    task = load_tasks(pack)[0]
    assert _reward(task, task.patch) == 1.0
    assert _reward(task, "diff --git a/nope.txt b/nope.txt\nnew file mode 100644\n--- /dev/null\n"
                         "+++ b/nope.txt\n@@ -0,0 +1 @@\n+hi\n") == 0.0


def test_rebuild_with_the_same_seed_is_identical_and_cached(pack: Path, tmp_path: Path) -> None:
    again = build_tasks(tmp_path / "again", packages=list(SMALL_PACK_PACKAGES), seed=0,
                        max_tasks=N, cache_dir=PACK_DIR / "cache")
    assert again.ok and again.pytest_runs == 0  # every verdict came from the cache
    assert (tmp_path / "again" / "tasks.jsonl").read_text() == pack.read_text()


@pytest.mark.usefixtures("bwrap")  # skips without bubblewrap; fails under CI
def test_validate_through_the_real_grading_path_with_bwrap(pack: Path) -> None:
    result = asyncio.run(validate_file(pack, backend="bwrap"))
    assert result.ok, result.table()
    # every row measures what a forgery would need: the chance a guess at its canaries scores (blind, and
    # after running the members), and whether the script check stands behind the test run
    table = result.table()
    for row in result.rows:
        assert row.guess_bound is not None and 0 < row.guess_bound <= row.guess_bound_f2p <= 1, row
        assert row.script_checked == (not (row.script_check or "").startswith("none")), row
        line = next(line for line in table.splitlines() if line.startswith(row.instance_id))
        assert " / " in line and "%" in line, line
    flagged = [r.instance_id for r in result.rows if r.guess_bound > 0.01]
    assert ("a blind guess at the canaries scores over 1%" in table) == bool(flagged), table


def test_a_package_short_of_its_quota_is_made_up_by_the_others(tmp_path: Path) -> None:
    """With one task per package asked and a goal of four, each package is asked for more in turn,
    continuing its own candidate stream: the same tasks as a quota of two each."""
    logs: list[str] = []
    topped = build_tasks(tmp_path / "topped", packages=["inflection", "idna"], max_tasks=4, tasks_per_package=1,
                         cache_dir=PACK_DIR / "cache", log=logs.append)
    assert topped.ok and topped.n_tasks == 4, topped.packages
    assert [p.tasks for p in topped.packages] == [2, 2]
    assert sum("one more task to make up the goal of 4" in line for line in logs) == 2
    plain = build_tasks(tmp_path / "plain", packages=["inflection", "idna"], max_tasks=4,
                        cache_dir=PACK_DIR / "cache")
    assert plain.ok
    ids = [json.loads(line)["instance_id"] for line in (tmp_path / "topped" / "tasks.jsonl").read_text().splitlines()]
    assert sorted(ids) == sorted(json.loads(line)["instance_id"]
                                 for line in (tmp_path / "plain" / "tasks.jsonl").read_text().splitlines())
