"""``task-factory validate``: every task checked, gold patch -> 1.0, empty diff -> 0.0.

The check is ``check.check_task``: the verifier (``verifier.grade_submission``, the env server's
own grader) grades both diffs in a sandbox of the chosen backend. ``--statements`` adds the
statement check of synthetic-mutation tasks (``statement_problems``): each statement's reproducer,
run as a user runs it, on the base tree and with the gold patch.
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

from sandbox import DEFAULT_BACKEND
from sandbox.git import run_git
from sandbox.models import SandboxConfig
from verifier.canary import TARGET_BOUND
from verifier.task import load_tasks

from . import gitrepo, reproducer
from .check import TaskCheck, check_task
from .envs import PTH_NAME, WORKSPACE
from .sources import TaskgenError
from .statement import reproducer_block


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
    guess_bound: float | None = Field(None, description="a blind guess at the canaries scores with this chance "
                                      "(the gold grading's plan; docs/grading.md, guarantee 2)")
    guess_bound_f2p: float | None = Field(None, description="a guess that first runs the members honestly and reads their assertions")
    script_checked: bool = Field(False, description="the script check covers the task (guarantee 8)")
    unguarded: str | None = Field(None, description="why the task's reward rests on its canaries alone "
                                  "(``TaskCheck.unguarded``; the factory writes no such task)")

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
        head = (f"{'instance_id':<{width}}  gold  empty  ok   secs  script check            "
                "guess: blind / f2p  error")
        lines = [head, "-" * len(head)]
        for r in self.rows:
            g = "-" if r.gold_reward is None else f"{r.gold_reward:.2f}"
            e = "-" if r.empty_reward is None else f"{r.empty_reward:.2f}"
            why = "; ".join(filter(None, [r.error, r.statement_error and f"statement: {r.statement_error}"]))
            guess = "-" if r.guess_bound is None else f"{_percent(r.guess_bound)} / {_percent(r.guess_bound_f2p)}"
            lines.append(f"{r.instance_id:<{width}}  {g:>4}  {e:>5}  {'yes' if r.ok else 'NO':<3} "
                         f"{r.duration_s:5.1f}  {(r.script_check or '-')[:22]:<22}  {guess:<18} {why}".rstrip())
        good = sum(r.ok for r in self.rows)
        lines.append(f"validate ({self.backend}): {good} passed, {len(self.rows) - good} failed")
        blind = [r.instance_id for r in self.rows if (r.guess_bound or 0.0) > TARGET_BOUND]
        if blind:
            lines.append(f"a blind guess at the canaries scores over {_percent(TARGET_BOUND)} on {len(blind)}: "
                         + ", ".join(blind))
        unguarded = [r.instance_id for r in self.rows if r.ok and r.unguarded]
        if unguarded:
            lines.append(f"rests on the canaries alone (no script check; a guess that runs and reads the members "
                         f"first scores over {_percent(TARGET_BOUND)}) on {len(unguarded)}: " + ", ".join(unguarded))
        return "\n".join(lines)


async def validate_file(path: str | Path, backend: str = DEFAULT_BACKEND, concurrency: int = 2,
                        sandbox_config: SandboxConfig | None = None, statements: bool = False) -> ValidationReport:
    """Check every task of ``path`` (``check.check_task``: the verifier grades its gold patch and an
    empty diff, in a ``backend`` sandbox); with ``statements``, also check each synthetic-mutation
    task's statement (``statement_problems``).

    Raises ``verifier.task.TaskFileError`` when the file cannot be loaded.
    """
    tasks = load_tasks(path)
    config = sandbox_config or SandboxConfig(backend=backend)
    start = time.monotonic()
    sem = asyncio.Semaphore(max(1, concurrency))

    async def check(task) -> TaskCheck:
        try:
            return await check_task(task, config)
        except Exception as exc:  # one broken task must not hide the others' results
            return TaskCheck(error=f"{type(exc).__name__}: {exc}")

    async def statement_error(task) -> str | None:
        if not (statements and task.source == "synthetic-mutation"):
            return None
        try:
            return "; ".join(await asyncio.to_thread(statement_problems, task)) or None
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"

    async def one(task) -> ValidationRow:
        async with sem:
            t0 = time.monotonic()
            checked, statement = await asyncio.gather(check(task), statement_error(task))  # both at once
            return ValidationRow(instance_id=task.instance_id, gold_reward=checked.gold_reward,
                                 empty_reward=checked.empty_reward, error=checked.error,
                                 statement_error=statement, script_check=checked.script_check,
                                 duration_s=round(time.monotonic() - t0, 2), guess_bound=checked.guess_bound,
                                 guess_bound_f2p=checked.guess_bound_f2p, script_checked=checked.script_checked,
                                 unguarded=checked.unguarded)

    rows = await asyncio.gather(*(one(t) for t in tasks))
    return ValidationReport(backend=config.backend_name, rows=list(rows), duration_s=round(time.monotonic() - start, 2))


def _percent(p: float | None) -> str:
    """0.0123 -> "1.2%", 1e-5 -> "0.001%" (two significant digits)."""
    if p is None:
        return "-"
    v = p * 100
    return f"{v:.0f}%" if v >= 10 else f"{v:.2g}%"


# -- the statement check (host-side: a user's script run with the task's venv) ----------------

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
def checkout(task, diff: str = "") -> Iterator[Path]:
    """A temporary tree of ``task.base_commit`` with ``diff`` applied (the statement check's trees).
    Raises TaskgenError when the tree cannot be made or ``diff`` does not apply."""
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
        yield tree


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
