"""``task-factory validate``: every task graded twice, gold patch -> 1.0, empty diff -> 0.0.

The sandbox backends go through the env server's real grading path
(``verifier.grade_submission``). ``host`` is a sandbox-free check for
machines without one: the same two diffs, run with the task's venv and the
grader's pytest configuration on a checkout of ``base_commit`` (plus the
task's ``test_patch``) in a temporary directory.
"""

from __future__ import annotations

import asyncio
import re
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, Field

from sandbox.git import run_git

from . import gitrepo, reproducer
from .envs import PTH_NAME, WORKSPACE
from .runner import PytestRunner
from .sources import TaskgenError
from .statement import reproducer_block

Backend = str  # a sandbox backend of the registry, or "host" (no sandbox)


class ValidationRow(BaseModel):
    """Both gradings of one task."""

    instance_id: str
    gold_reward: float | None = None
    empty_reward: float | None = None
    error: str | None = Field(None, description="why a grading gave no usable reward")
    statement_error: str | None = Field(None, description="why the statement fails its check (--statements)")
    script_check: str | None = Field(None, description="the script check of the gold patch (docs/grading.md, guarantee 8): "
                               "calls checked and FAIL_TO_PASS tests covered, or why none")
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return (self.error is None and self.statement_error is None and self.gold_reward == 1.0
                and self.empty_reward == 0.0)


class ValidationReport(BaseModel):
    backend: str
    rows: list[ValidationRow]
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return bool(self.rows) and all(r.ok for r in self.rows)

    def table(self) -> str:
        """A fixed-width table, one line per task, and a closing 'N passed, N failed' line."""
        width = max([len("instance_id")] + [len(r.instance_id) for r in self.rows])
        head = f"{'instance_id':<{width}}  gold  empty  ok   secs  script check            error"
        lines = [head, "-" * len(head)]
        for r in self.rows:
            g = "-" if r.gold_reward is None else f"{r.gold_reward:.2f}"
            e = "-" if r.empty_reward is None else f"{r.empty_reward:.2f}"
            why = "; ".join(filter(None, [r.error, r.statement_error and f"statement: {r.statement_error}"]))
            lines.append(f"{r.instance_id:<{width}}  {g:>4}  {e:>5}  {'yes' if r.ok else 'NO':<3} "
                         f"{r.duration_s:5.1f}  {(r.script_check or '-')[:22]:<22}  {why}".rstrip())
        good = sum(r.ok for r in self.rows)
        lines.append(f"validate ({self.backend}): {good} passed, {len(self.rows) - good} failed")
        return "\n".join(lines)


async def validate_file(path: str | Path, backend: Backend = "bwrap", concurrency: int = 2,
                        sandbox_config=None, statements: bool = False) -> ValidationReport:
    """Grade every task of ``path`` with its gold patch and with an empty diff; with
    ``statements``, also check each synthetic-mutation task's statement (``statement_problems``).

    Raises ``verifier.task.TaskFileError`` when the file cannot be loaded.
    """
    from verifier.task import load_tasks

    tasks = load_tasks(path)
    start = time.monotonic()
    sem = asyncio.Semaphore(max(1, concurrency))

    async def one(task) -> ValidationRow:
        async with sem:
            t0 = time.monotonic()
            checked = None
            try:
                if backend == "host":
                    gold, empty, err = await asyncio.to_thread(_host_pair, task)
                else:
                    gold, empty, err, checked = await _grading_pair(task, backend, sandbox_config)
            except Exception as exc:  # one broken task must not hide the others' results
                gold, empty, err = None, None, f"{type(exc).__name__}: {exc}"
            statement_error = None
            if statements and task.source == "synthetic-mutation":
                try:
                    statement_error = "; ".join(await asyncio.to_thread(statement_problems, task)) or None
                except Exception as exc:
                    statement_error = f"{type(exc).__name__}: {exc}"
            return ValidationRow(instance_id=task.instance_id, gold_reward=gold, empty_reward=empty, error=err,
                                 statement_error=statement_error, script_check=checked,
                                 duration_s=round(time.monotonic() - t0, 2))

    rows = await asyncio.gather(*(one(t) for t in tasks))
    return ValidationReport(backend=backend, rows=list(rows), duration_s=round(time.monotonic() - start, 2))


async def _grading_pair(task, backend: str, sandbox_config
                        ) -> tuple[float | None, float | None, str | None, str | None]:
    from sandbox.models import SandboxConfig
    from verifier import GradeCache, grade_submission

    config = sandbox_config or SandboxConfig(backend=backend)
    gold = await grade_submission(task, task.patch, config, "resolved", cache=GradeCache())
    empty = await grade_submission(task, "", config, "resolved", cache=GradeCache())
    errors = []
    if gold.tampered:  # the gold patch is not an attack: the task trips the grader's checks (env)
        errors.append("broken task: the grader's tamper checks fail with the gold patch: "
                      + "; ".join(gold.tamper_reasons[:3]))
    elif gold.reward != 1.0:
        errors.append("gold: " + "; ".join(filter(None, [gold.error, _failing(gold)])))
    if empty.reward != 0.0:
        errors.append(f"empty diff passes: its {len(empty.fail_to_pass)} FAIL_TO_PASS test(s) pass without a fix")
    if empty.error_source == "infra":
        errors.append(f"empty: {empty.error}")
    return gold.reward, empty.reward, "; ".join(errors) or None, script_check_summary(gold.script_check)


def script_check_summary(check: dict | None) -> str | None:
    """``"4 calls, 3 tests"`` (checked calls, FAIL_TO_PASS tests with one), or ``"none: why"``."""
    if not check:
        return None
    if check.get("ran"):
        return (f"{check.get('checked_calls', 0)} calls, {check.get('tests_checked', 0)} tests"
                + ("" if check.get("holds") else " FAILS"))
    return f"none: {check.get('reason', '')}"


_WHY = {"missing": "missing (the log never names it)", "failed": "failed", "error": "error",
        "skipped": "skipped", "xfailed": "xfailed (not a fix)"}


def _failing(result) -> str:
    """Which tests keep ``result`` from 1.0, and why: an id the run cannot select (no such test in the
    graded tree), one the log never names, a failure."""
    from verifier.junit import PASSING

    tests = {**result.fail_to_pass, **result.pass_to_pass}
    not_found = set(getattr(result, "not_found", []) or [])
    bad = [(t, o) for t, o in tests.items()
           if o not in PASSING or (t in result.fail_to_pass and o != "passed")]
    if not bad:
        return "" if result.error else "reward below 1"
    why = [f"{t} {'not found (names no test of the graded tree)' if t in not_found else _WHY.get(o, o)}"
           for t, o in bad]
    more = f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""
    return f"{len(bad)} of {len(tests)} test(s) not passing: " + ", ".join(why[:3]) + more


# -- host-side check -----------------------------------------------------------------------

def import_root_of(python_env: Path) -> str:
    """The repo-relative import root a task venv's ``_swe_workspace.pth`` names ('.' if none)."""
    for pth in python_env.glob(f"lib/python*/site-packages/{PTH_NAME}"):
        root = pth.read_text().strip().splitlines()[0]
        rel = root[len(WORKSPACE):].strip("/") if root.startswith(WORKSPACE) else ""
        return rel or "."
    return "."


class DiffDoesNotApply(TaskgenError):
    """``git apply`` refused the diff."""


@contextmanager
def checkout(task, diff: str = "", *, with_tests: bool = False) -> Iterator[Path]:
    """A temporary tree of ``task.base_commit`` with ``diff`` applied (and, ``with_tests``, the
    task's ``test_patch``). Raises TaskgenError when the tree cannot be made or ``diff`` does not apply."""
    with tempfile.TemporaryDirectory(prefix="taskgen-host-") as tmp:
        tree = Path(tmp) / "workspace"
        tree.mkdir()
        archive = run_git(["archive", "--format=tar", task.base_commit or "HEAD"], task.repo_path, timeout=300,
                          check=False)
        if archive.returncode != 0:
            raise TaskgenError(f"git archive failed: {archive.stderr.decode(errors='replace')[-400:]}")
        tar_path = Path(tmp) / "tree.tar"
        tar_path.write_bytes(archive.stdout)
        with tarfile.open(tar_path) as tf:
            tf.extractall(tree, filter="data")
        tar_path.unlink()
        gitrepo.git(tree, "init", "-q")
        if diff.strip():
            try:
                gitrepo.git(tree, "apply", "--whitespace=nowarn", "-", input=diff)
            except TaskgenError as exc:
                raise DiffDoesNotApply(str(exc)) from exc
        if with_tests and task.test_patch.strip():
            gitrepo.git(tree, "apply", "--whitespace=nowarn", "-", input=task.test_patch)
        yield tree


def host_grade(task, diff: str, plugin_dir: Path | None = None) -> float:
    """Reward (resolved: 1.0 or 0.0) of ``diff`` on the host: checkout, ``git apply``, run the tests."""
    if task.python_env is None:
        raise TaskgenError("host validation needs the task's python_env")
    try:
        with checkout(task, diff, with_tests=True) as tree:
            runner = PytestRunner(task.python_env, plugin_dir or tree.parent / "plugin",
                                  import_root_of(task.python_env), grader_ini=True)
            result = runner.run(tree, task.tests, timeout_s=900)
    except DiffDoesNotApply:
        return 0.0
    ok = all(result.tests.get(t) is not None and result.tests[t].outcome == "passed" for t in task.tests)
    return 1.0 if ok else 0.0


def statement_problems(task) -> list[str]:
    """Why ``task``'s statement would not let an engineer find the bug without the tests (empty: none).

    The statement must carry a reproducer (``To reproduce:`` and a python block) that fails on
    the base tree and passes with the gold patch, and its first line must name, in backticks, a
    public callable of the patched package that the reproducer calls (resolved at run time).
    Runs on the host with the task's venv, without network where the host allows it.
    """
    if task.python_env is None:
        return ["the statement check needs the task's python_env"]
    code = reproducer_block(task.problem_statement)
    if code is None:
        return ["carries no reproducer (no 'To reproduce:' python block)"]
    root = import_root_of(task.python_env)
    patched = re.findall(r"^diff --git a/(\S+) ", task.patch, re.M)
    packages = reproducer.package_names([p for p in patched if p.endswith(".py")], root)
    callees = reproducer.script_callees(code)
    python = task.python_env / "bin" / "python"
    problems = []
    with checkout(task) as base:
        on_base = reproducer.run(code, python, base, import_root=root, callees=callees, packages=packages)
    with checkout(task, task.patch) as fixed:
        on_gold = reproducer.run(code, python, fixed, import_root=root, callees=callees, packages=packages)
    if not on_base.failed:
        problems.append("its reproducer does not fail on the base tree"
                        + (" (timed out)" if on_base.exit_code is None else ""))
    if not on_gold.passed:
        problems.append(f"its reproducer fails with the gold patch: {on_gold.output.splitlines()[-1:]}")
    first = task.problem_statement.strip().splitlines()[0] if task.problem_statement.strip() else ""
    named = set(re.findall(r"`([\w.]+)`", first))
    if not any(c.name in named and reproducer.is_public(c.name, packages) for c in on_gold.callees if c.name):
        problems.append(f"its first line names no public entry point of {', '.join(packages) or 'the package'} "
                        f"that the reproducer calls (named: {sorted(named) or 'nothing'})")
    return problems


def _host_pair(task) -> tuple[float, float, str | None]:
    gold = host_grade(task, task.patch)
    empty = host_grade(task, "")
    errors = [m for m, bad in (("gold patch does not resolve", gold != 1.0), ("empty diff passes", empty != 0.0)) if bad]
    return gold, empty, "; ".join(errors) or None
