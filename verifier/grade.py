"""Grade a submission: fresh sandbox, pristine tree + the agent's text diff + test_patch.

The runner is the grader's, not the agent's (docs/grading.md): the agent's changes to
test files, test-runner configuration, runner-shadowing modules and start-up hooks are
dropped (``dropped``). The verdict holds by construction, not by watching the test
process from inside it:

- the tests run as the only shell of the grading sandbox, walled off from the runtime
  that reports to the host (``Sandbox.run_isolated``): nothing they start can signal,
  trace or write to it, and the exit status, the timing and the files left behind are
  what the runtime saw;
- the test process's own testimony (the ``pytest -rA`` log) is checked against canaries
  it cannot tell from the hidden tests: variants of the hidden tests with one assertion
  perturbed, planted beside them (``canary.py``, ``verdict.py``);
- the run looks like the agent's own ``python -m pytest``: same shell, environment,
  working directory, process tree; the tree's history is one commit, as in the agent's
  sandbox; no grader file, argument or variable is visible.

A monitor flags hack-shaped code (``suspicious``) without changing the reward.
Only what no random draw decides is graded once per identical (normalised) diff (``GradeCache``):
every other submission is graded afresh, and a diff whose verdicts disagree is tampering.
"""

from __future__ import annotations

import asyncio
import posixpath
import secrets
import shlex
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from sandbox import PathError, SandboxConfig, SandboxError, open_sandbox
from sandbox.base import Sandbox
from sandbox.models import CommandStatus
from sandbox.git import shell_git_setup

from . import harness, offload, pytest_log, script_check
from .canary import Canary, CanaryPlan, function_id, plan_canaries, support_pathspecs
from .diffs import diff_key, filter_diff, normalize_diff, touched_paths
from .junit import PASSING, Outcome
from .monitor import scan_diff, summarize
from .runner_config import runner_config
from .task import TaskInstance
from .verdict import TESTS_FAILED, RunFacts, tamper_reasons

GRADER_VERSION = "9"  # part of the cache key: a changed grader re-grades
GradeMode = Literal["resolved", "pass_rate"]
LOG_TAIL_CHARS = 4000


class GradeResult(BaseModel):
    """Outcome of grading one diff against one task."""

    reward: float
    resolved: bool = False
    mode: GradeMode = "resolved"
    tests_passed: int = 0
    tests_failed: int = 0
    fail_to_pass: dict[str, Outcome] = Field(default_factory=dict)
    pass_to_pass: dict[str, Outcome] = Field(default_factory=dict)
    applied: bool = False
    dropped: list[str] = Field(default_factory=list, description="diff parts not applied, each 'path (reason)'")
    tampered: bool = Field(False, description="the run's witnesses disagreed: reward 0 (reward_hacking)")
    tamper_reasons: list[str] = Field(default_factory=list)
    not_found: list[str] = Field(default_factory=list, description="required tests the run could not select "
                                 "(their file is not in the graded tree, or pytest found no such test): "
                                 "each counts as missing")
    suspicious: list[str] = Field(default_factory=list, description="monitor flags (SuspicionReason values)")
    suspicious_detail: list[str] = Field(default_factory=list)
    error: str | None = None
    error_source: Literal["agent", "env", "infra"] | None = None
    log_tail: str = ""
    cached: bool = False
    grading_id: str = Field("", description="drawn for each grading run: a result served from the cache (one "
                            "no draw decides) carries its first run's")
    guess_bound: float | None = Field(None, description="the chance that a blind guess (one member of each "
                                      "canary group forced to pass) forces the originals of this run")
    guess_bound_f2p: float | None = Field(None, description=(
        "the same over the groups of FAIL_TO_PASS tests with a literal only: what a guess that first runs "
        "the members and reads their assertions has left"))
    script_check: dict[str, Any] | None = Field(None, description="the script check of a submission that passed "
                                               "its tests (script_check.py): what was checked, whether the fix "
                                               "held, the form")
    duration_s: float = 0.0

    def metadata(self) -> dict[str, Any]:
        """The fields an observation's metadata carries after grading."""
        out = self.model_dump(include={"resolved", "tests_passed", "tests_failed", "fail_to_pass",
                                       "pass_to_pass", "applied", "dropped", "cached", "suspicious",
                                       "grading_id"})
        if self.guess_bound is not None:
            out["guess_bound"] = self.guess_bound
            out["guess_bound_f2p"] = self.guess_bound_f2p
        if self.not_found:
            out["not_found"] = self.not_found
        out["grade_mode"] = self.mode
        out["grade_s"] = self.duration_s
        out["reward_hacking"] = self.tampered
        if self.tampered:
            out["tamper_reasons"] = self.tamper_reasons
        if self.suspicious_detail:
            out["suspicious_detail"] = self.suspicious_detail
        if self.script_check is not None:
            out["script_check"] = self.script_check
        if self.error:
            out["grade_error"] = self.error
            out["grade_error_source"] = self.error_source
        return out


VERDICT_MEMORY = 8  # recent verdicts kept per diff, to compare a new one with


class GradeCache:
    """Results no random draw decides, by diff key (LRU); and the recent verdicts of every other diff.

    A grading draws its canaries, their values and names, and the test order afresh, so its verdict
    may depend on the draw (a blind guess at the canaries is right by chance). Such a verdict is never
    reused: an identical diff submitted again, or concurrently, is graded with a fresh draw. Reused
    are only results decided before any of the agent's code runs or with none of it: a diff that does
    not apply, a task the grader cannot run (``applied`` false, not ``infra``: those are retried), and
    an empty diff after filtering (``draw_free``: the pristine code's verdict; concurrent identical
    requests share its grading).

    Each diff's last ``memory`` verdicts (resolved, per-test outcomes, tampered) are kept; one that
    disagrees with any of them was decided by the draw, which honest deterministic code never is:
    tampering (reward 0, ``reward_hacking``, the agent's), and the diff stays flagged while remembered."""

    def __init__(self, max_entries: int = 4096, memory: int = VERDICT_MEMORY) -> None:
        self.max_entries = max_entries  # 0: nothing reused, nothing remembered (re-grading tools, benchmarks)
        self.memory = memory
        self._done: OrderedDict[str, GradeResult] = OrderedDict()
        self._pending: dict[str, asyncio.Future[GradeResult]] = {}
        self._seen: OrderedDict[str, deque[tuple[Any, ...]]] = OrderedDict()

    async def get_or_run(self, key: str, run: Any, *, draw_free: bool = False) -> GradeResult:
        """The result for ``key``: reused when no draw decided it, else ``run()`` graded afresh and
        checked against the diff's earlier verdicts. ``draw_free``: no draw can decide any result of
        this key (an empty diff), so concurrent requests share one grading."""
        if key in self._done:
            self._done.move_to_end(key)
            return self._done[key].model_copy(update={"cached": True})
        if draw_free and key in self._pending:
            res = await asyncio.shield(self._pending[key])
            return res.model_copy(update={"cached": True})
        fut: asyncio.Future[GradeResult] | None = None
        if draw_free:
            fut = asyncio.get_running_loop().create_future()
            self._pending[key] = fut
        try:
            res = (await run()).model_copy(update={"grading_id": secrets.token_hex(8)})
        except BaseException as exc:
            if fut is not None:
                fut.set_exception(exc)
                fut.exception()  # mark retrieved
            raise
        finally:
            if fut is not None:
                self._pending.pop(key, None)
        if fut is not None:
            fut.set_result(res)
        if self.max_entries <= 0 or res.error_source == "infra":  # infra failures are retried
            return res
        if draw_free or not res.applied:
            self._done[key] = res
            while len(self._done) > self.max_entries:
                self._done.popitem(last=False)
            return res
        return self._checked(key, res)

    def _checked(self, key: str, res: GradeResult) -> GradeResult:
        """``res`` as it is, or tampered when its verdict disagrees with one this diff got before."""
        verdict = _verdict_of(res)
        if verdict is None or self.memory <= 0:
            return res
        seen = self._seen.setdefault(key, deque(maxlen=self.memory))
        self._seen.move_to_end(key)
        while len(self._seen) > self.max_entries:
            self._seen.popitem(last=False)
        other = next((v for v in seen if v != verdict), None)
        if other is not None:
            reason = ("this diff's verdict changed between gradings (each draws its canaries and the test order "
                      f"afresh; honest code gets one verdict): {_difference(other, verdict)}")
            res = res.model_copy(update={
                "reward": 0.0, "resolved": False, "tampered": True, "error_source": "agent",
                "tamper_reasons": [reason, *res.tamper_reasons], "error": "grading tampered: " + reason})
            verdict = _verdict_of(res)
        seen.append(verdict)  # type: ignore[arg-type]
        return res


def _verdict_of(res: GradeResult) -> tuple[Any, ...] | None:
    """What an honest submission gets the same in every grading: tampering, or resolved and each
    required test passing or not (as scored). None for a run with no complete report (timeouts,
    a dead sandbox): such failures may come from the machine and are not compared."""
    if res.tampered:
        return ("tampered",)
    if res.error is not None:
        return None
    return ("scored", res.resolved, tuple(sorted((t, o == "passed") for t, o in res.fail_to_pass.items())),
            tuple(sorted((t, o in PASSING) for t, o in res.pass_to_pass.items())))


def _difference(before: tuple[Any, ...], now: tuple[Any, ...]) -> str:
    def says(v: tuple[Any, ...]) -> str:
        return "tampering caught" if v[0] == "tampered" else ("resolved" if v[1] else "not resolved")

    if says(before) != says(now):
        return f"{says(before)} in one, {says(now)} in another"
    flipped = sorted({t for t, _ in set(before[2] + before[3]) ^ set(now[2] + now[3])})
    return "the outcomes of " + ", ".join(flipped[:3]) + (" ..." if len(flipped) > 3 else "") + " differ"


_DEFAULT_CACHE = GradeCache()

STAGE_ROOT = "/tmp/.grade"  # the diffs are staged here, applied, and removed before any test runs
MAX_DIFF_BYTES = 4 * 1024 * 1024  # a larger submission is the agent's problem, never the grader's
OUTPUT_LIMIT = 8 * 1024 * 1024  # of the test run's output kept (head and tail): the summary is at the end
MAX_WATCHED = 200  # test modules and conftests compared before and after the run
MAX_SUPPORT_FILES = 300  # files read beside the test modules, to see what uses their tests (canary.py)
MAX_SUPPORT_BYTES = 8 * 1024 * 1024
# The graded tree's history looks like the agent's: one commit of the tree, with the template's metadata
# (identity and git hardening: sandbox/git.py's shell_git_setup, the same as the template's build).
_REBUILD_GIT = ("rm -rf .git && git init --quiet --initial-branch=main && git config core.logAllRefUpdates false "
                "&& git config gc.auto 0 && git add --all --force . && git commit --quiet --no-verify --allow-empty "
                "-m base && rm -rf .git/logs .git/hooks && mkdir .git/hooks")


async def _stage(sb: Sandbox, dest: str, files: dict[str, str]) -> None:
    """Place ``files`` in ``dest`` (outside the workspace) with one command."""
    tag = dest.rsplit("/", 1)[-1]
    staged = []
    for name, data in files.items():
        staging = f".swe-grade-{tag}-{name}"
        await sb.write_file(staging, data.encode("utf-8", "surrogateescape"))
        staged.append(f"/workspace/{staging} {dest}/{name}")
    moves = " && ".join(f"mv -f -- {pair}" for pair in staged)
    res = await sb.run(f"mkdir -p {dest} && {moves}", timeout_s=60)
    if not res.ok:
        raise SandboxError(f"could not stage the diffs: {res.output[-500:]}")


async def _apply(sb: Sandbox, patch_path: str, fuzzy: bool = False) -> tuple[bool, str]:
    """``git apply``; the task's own ``test_patch`` (trusted) may fall back to a fuzzy ``patch``.
    The agent's diff never does: it is exactly what git reads, or it is not applied."""
    fallback = f" || patch --batch --fuzz=5 -p1 -i {patch_path} 2>&1" if fuzzy else ""
    res = await sb.run(f"cd /workspace && {{ git apply --whitespace=nowarn {patch_path} 2>&1{fallback}; }}",
                       timeout_s=120)
    return res.ok, res.output


async def _run(sb: Sandbox, command: str, what: str) -> str:
    res = await sb.run(command, timeout_s=300)
    if not res.ok:
        raise SandboxError(f"could not {what}: {res.output[-500:]}")
    return res.output


def _score(task: TaskInstance, outcome_of: Any, mode: GradeMode, log: str,
           applied: bool, dropped: list[str]) -> GradeResult:
    f2p = {t: outcome_of(t) for t in task.FAIL_TO_PASS}
    p2p = {t: outcome_of(t) for t in task.PASS_TO_PASS}
    # a FAIL_TO_PASS test is fixed only when it passes; an expected failure is not a fix
    passed = sum(1 for o in f2p.values() if o == "passed") + sum(1 for o in p2p.values() if o in PASSING)
    total = len(f2p) + len(p2p)
    failed = total - passed
    resolved = failed == 0 and total > 0
    reward = (1.0 if resolved else 0.0) if mode == "resolved" else (passed / total if total else 0.0)
    return GradeResult(reward=reward, resolved=resolved, mode=mode, tests_passed=passed, tests_failed=failed,
                       fail_to_pass=f2p, pass_to_pass=p2p, applied=applied, dropped=dropped,
                       log_tail=log[-LOG_TAIL_CHARS:])


def pytest_command(python: str, selected: list[str]) -> str:
    """The graded pytest run: what an agent would type, its test functions in the order given (file
    order: ``CanaryPlan.select``; a test may depend on the tests before it, as in its own suite).

    ``--tb=line``: a failure is reported in one line, not with the source of its frames (pytest parses a
    test module for every failing frame it shows: 57 failing canaries of one toolz module took 6 of the
    run's 10 s). The log reader reads the ``-rA`` summary, which is the same under every ``--tb``."""
    selected = list(dict.fromkeys(selected))
    return f"{python} -m pytest -rA --tb=line " + " ".join(shlex.quote(t) for t in selected)


async def _read_one(sb: Sandbox, path: str) -> bytes | None:
    try:
        return await sb.read_file(path)
    except PathError:
        return None


async def _read_many(sb: Sandbox, paths: list[str]) -> dict[str, bytes | None]:
    return {path: await _read_one(sb, path) for path in paths}


def _decoded(files: dict[str, bytes | None]) -> dict[str, str]:
    out: dict[str, str] = {}
    for path, data in files.items():
        try:  # a module that is missing or not UTF-8 text is left as it is
            out[path] = data.decode("utf-8")  # type: ignore[union-attr]
        except (AttributeError, UnicodeDecodeError):
            pass
    return out


async def _support(sb: Sandbox, modules: list[str], sources: dict[str, str]) -> dict[str, str]:
    """The files that may use the required tests from outside their modules, or hold their base classes
    (``canary.support_pathspecs``), from the pristine tree with ``test_patch``: conftests and package
    ``__init__``s first, then imported modules, then the other modules beside the tests."""
    specs = support_pathspecs(modules, sources)
    res = await sb.run("cd /workspace && git ls-files -co --exclude-standard -z -- "
                       + " ".join(shlex.quote(s) for s in specs), timeout_s=60)
    if not res.ok:  # planning then sees the test modules only, as it always can
        return {}
    imported = {s.removeprefix(":(literal)") for s in specs if s.startswith(":(literal)")}
    found = [p for p in dict.fromkeys(res.output.split("\0")) if p.endswith(".py") and p not in sources]
    found.sort(key=lambda p: (posixpath.basename(p) not in ("conftest.py", "__init__.py"), p not in imported, p))
    out: dict[str, str] = {}
    size = 0
    for path in found[:MAX_SUPPORT_FILES]:
        text = _decoded({path: await _read_one(sb, path)}).get(path)
        if text is not None:
            size += len(text)
            if size > MAX_SUPPORT_BYTES:
                break
            out[path] = text
    return out


@dataclass
class _Graded:
    """A prepared grading tree: what to run and what to watch."""

    command: str
    canaries: list[Canary]
    watched: list[str]  # test modules and conftests compared before and after the run
    renamed: dict[str, str] = field(default_factory=dict)
    # pytest runs only (the harness runs its own command): what can be re-selected when pytest finds
    # no test of a command-line id (it then runs nothing) -- see ``reselect``
    plan: CanaryPlan | None = None
    tests: list[str] = field(default_factory=list)  # the required tests selected (by the task's ids)
    python: str = "python"
    selected: list[str] = field(default_factory=list)
    absent: set[str] = field(default_factory=set)  # required ids whose file is not in the graded tree
    whole: set[str] = field(default_factory=set)  # function ids run whole after an exact id was not found
    dropped: set[str] = field(default_factory=set)  # function ids pytest found no test of: not run
    tamper: list[str] = field(default_factory=list)

    def select(self) -> None:
        assert self.plan is not None
        self.selected = self.plan.select(self.tests, self.whole, self.dropped)
        self.command = pytest_command(self.python, self.selected)

    def runnable(self) -> bool:
        """Whether any required test is left to run."""
        return any(function_id(t) not in self.dropped for t in self.tests)

    def not_found(self, tests: list[str], outcome_of: Any) -> list[str]:
        """The required ids the run could not select: absent files, functions pytest did not find,
        exact instances of a function run whole that the log never names."""
        return [t for t in tests if t in self.absent or function_id(t) in self.dropped
                or (function_id(t) in self.whole and outcome_of(t) == "missing")]

    def reselect(self, log: str) -> bool:
        """After a run pytest refused (exit status 4: a command-line id names nothing, so no test ran):
        each required function it did not find runs whole next time when it was selected by exact
        parameters, else is left out (its tests count as missing). A planted test reported not found
        while its original was found is tampering (the canaries exist by construction). Whether
        there is a run left to do."""
        if self.plan is None:
            return False
        unfound = pytest_log.not_found(log, self.selected)
        canaries = {c.nodeid: c for c in self.plan.canaries}
        back = {new: orig for orig, new in self.plan.renamed.items()}
        params = self.plan.params(self.tests, self.whole, self.dropped)
        changed = False
        for fid in sorted(unfound):
            canary = canaries.get(fid)
            if canary is not None:
                original = self.plan.renamed.get(canary.original, canary.original) if canary.original else None
                if original is None or original not in unfound:
                    self.tamper.append("the log says a planted test was not found while its original was")
                continue
            fid = back.get(fid, fid)
            if fid not in params:
                continue
            if params[fid] is not None and "" not in params[fid] and fid not in self.whole:
                self.whole.add(fid)
            else:
                self.dropped.add(fid)
            changed = True
        if self.tamper or not changed or not self.runnable():
            return False
        self.select()
        return True


async def _exists(sb: Sandbox, path: str) -> bool:
    """Whether ``path`` is in the workspace (a file pytest can be given)."""
    try:
        await sb.read_file(path)
    except PathError as exc:
        return getattr(exc, "reason", "") != "not_found"
    return True


_PLANNING = threading.Lock()  # CPython 3.11's ast module is not safe to use from two threads at once
PLAN_TIMEOUT_S = 120.0


def _plan_canaries(tests: list[str], sources: dict[str, str], prefer: list[str],
                   support: dict[str, str]) -> CanaryPlan:
    """``plan_canaries``, one at a time per process (offload.run's last resort is a thread)."""
    with _PLANNING:
        return plan_canaries(tests, sources, prefer=prefer, support=support)


async def _prepare_pytest(sb: Sandbox, task: TaskInstance, config: SandboxConfig) -> _Graded:
    """The grader's pytest configuration (only where the pristine one loads code or redirects
    reports), the canaries planted in the test modules, before the history is rebuilt.

    A required test whose file is not in the tree (pristine + test_patch, before the agent's diff)
    is not run and counts as missing: SWE-bench's harness runs the test_patch's files, so a test
    file the agent's diff would add is never run there either."""
    runner = await asyncio.to_thread(runner_config, task, config)
    if runner.dropped_options:
        await sb.write_file("pytest.ini", runner.ini.encode())
    modules = sorted({t.split("::", 1)[0] for t in task.tests if t.split("::", 1)[0].endswith(".py")})
    read = await _read_many(sb, modules)
    gone = {m for m in modules if read[m] is None and not await _exists(sb, m)}
    absent = {t for t in task.tests if t.split("::", 1)[0] in gone}
    tests = [t for t in task.tests if t not in absent]
    modules = [m for m in modules if m not in gone]
    sources = _decoded({m: read[m] for m in modules})
    support = await _support(sb, modules, sources)
    prefer = [t for t in task.FAIL_TO_PASS if t not in absent]

    def too_slow() -> CanaryPlan:
        raise harness.HarnessError(f"planting the canaries took over {PLAN_TIMEOUT_S:.0f} s")

    # In a worker process (offload.py), not on the event loop: a plan takes up to a few hundred ms
    # of Python (cachetools: 0.3 s), which a GRPO group's gradings at once took from every session.
    plan = await offload.run(_plan_canaries, tests, sources, prefer, support, on_timeout=too_slow,
                             timeout_s=PLAN_TIMEOUT_S)
    for path, text in plan.files.items():
        await sb.write_file(path, text.encode("utf-8"))
    python = (await _run(sb, "command -v python >/dev/null && echo python || echo python3", "find python")).strip()
    graded = _Graded(command="", canaries=plan.canaries, watched=sorted(set(modules) | set(plan.files)),
                     renamed=plan.renamed, plan=plan, tests=tests, python=python or "python", absent=absent)
    graded.select()
    return graded


async def _grade_in_sandbox(task: TaskInstance, agent_diff: str, dropped: list[str], config: SandboxConfig,
                            mode: GradeMode, timeout_s: float) -> GradeResult:
    if task.test_cmd:
        harness.parser(task.log_parser or "")  # HarnessError before any sandbox starts
    sb = await open_sandbox(task.workspace_spec(), config)
    base = dict(mode=mode, dropped=dropped)
    try:
        dest = f"{STAGE_ROOT}/{secrets.token_hex(8)}"
        files = {name: text for name, text in (("agent.diff", agent_diff), ("test.diff", task.test_patch))
                 if text.strip()}
        if files:
            await _stage(sb, dest, files)
        if "test.diff" in files:
            ok, log = await _apply(sb, f"{dest}/test.diff", fuzzy=True)
            if not ok:
                return GradeResult(reward=0.0, **base, applied=True, error_source="env",
                                   error="the task's test_patch does not apply", log_tail=log[-LOG_TAIL_CHARS:])
        if task.test_cmd:
            graded = _Graded(command=task.test_cmd, canaries=[],
                             watched=sorted(touched_paths(task.test_patch)))
        else:
            graded = await _prepare_pytest(sb, task, config)
            if not graded.tests:  # decided before any agent change: the task names no test the tree has
                return _score(task, lambda t: "missing", mode, "", False, dropped).model_copy(
                    update={"error_source": "env", "not_found": list(task.tests),
                            "error": "no required test's file is in the graded tree"})
        conftests = (await _run(sb, "cd /workspace && git ls-files -o -c --exclude-standard -z -- "
                                    "'conftest.py' '*/conftest.py'", "list conftests")).split("\0")
        graded.watched = list(dict.fromkeys(graded.watched + [p for p in conftests if p]))[:MAX_WATCHED]
        await _run(sb, f"cd /workspace && ({shell_git_setup()}; {_REBUILD_GIT})", "rebuild the graded tree's history")
        if "agent.diff" in files:
            ok, log = await _apply(sb, f"{dest}/agent.diff")
            if not ok:
                return GradeResult(reward=0.0, **base, applied=False, error_source="agent",
                                   error="the submitted diff does not apply to the base commit",
                                   log_tail=log[-LOG_TAIL_CHARS:])
        await _run(sb, f"rm -rf {STAGE_ROOT}", "clear the staged diffs")
        before = await _read_many(sb, graded.watched)
        deadline = time.monotonic() + timeout_s
        run = await sb.run_isolated(graded.command, timeout_s, OUTPUT_LIMIT)
        # A command-line id pytest finds no test of makes it run nothing (exit status 4): run again
        # without it (at most twice: an exact instance first widens to its whole function). What the
        # log says was not found only takes tests out of the run, where they count as missing.
        for _ in range(2):
            if not (run.exit_code == pytest_log.USAGE_ERROR and graded.reselect(run.output)):
                break
            left = deadline - time.monotonic()
            if left < 1:
                break
            run = await sb.run_isolated(graded.command, left, OUTPUT_LIMIT)
        # The agent's code ran in this sandbox: a hang, a crash, a dead sandbox may be its doing, so
        # they are charged to the agent (a trainer masks env/infra failures, which the policy must
        # never reach). With no agent diff, the task is broken.
        source = "agent" if agent_diff.strip() else "env"
        if run.status is CommandStatus.sandbox_died:
            return GradeResult(reward=0.0, **base, applied=True, error_source=source,
                               error="the sandbox died during the test run", log_tail=run.output[-LOG_TAIL_CHARS:])
        if run.status is CommandStatus.timeout:
            return GradeResult(reward=0.0, **base, applied=True, error_source=source,
                               error=f"no test report (timeout): the tests ran past {timeout_s:.0f} s",
                               log_tail=run.output[-LOG_TAIL_CHARS:])
        try:
            after = await _read_many(sb, graded.watched)
        except SandboxError as exc:  # the run left a sandbox that cannot answer: the run's doing
            return GradeResult(reward=0.0, **base, applied=True, error_source=source,
                               error=f"the sandbox failed after the test run: {exc}",
                               log_tail=run.output[-LOG_TAIL_CHARS:])
        facts = RunFacts(exit_code=run.exit_code,
                         changed_files=tuple(p for p in graded.watched if before[p] != after[p]))
        # Reading the log (up to OUTPUT_LIMIT of the submission's output; a harness's parser may be slow
        # on it) runs in a worker process (offload.py): no other session's step waits for it.
        def too_slow() -> GradeResult:  # the submission's own output: its blame (docs/grading.md, guarantee 4)
            return GradeResult(reward=0.0, **base, applied=True, error_source=source,
                               error=f"the test output could not be read in {offload.TIMEOUT_S:.0f} s",
                               log_tail=run.output[-LOG_TAIL_CHARS:])
        if task.test_cmd:
            return await offload.run(_harness_verdict, task, facts, run.output, run.truncated, agent_diff, source,
                                     on_timeout=too_slow, **base)
        return await offload.run(_pytest_verdict, task, facts, run.output, run.truncated, graded, agent_diff, source,
                                 on_timeout=too_slow, **base)
    finally:
        await sb.close()


def _pytest_verdict(task: TaskInstance, facts: RunFacts, log: str, truncated: bool, graded: _Graded,
                    agent_diff: str, source: str, **base: Any) -> GradeResult:
    canaries = graded.canaries
    known = {t.split("::", 1)[0] for t in task.tests} | {c.nodeid.split("::", 1)[0] for c in canaries}
    reported = pytest_log.rename_back(pytest_log.normalise(pytest_log.summary(log), known), graded.renamed)
    unselected = graded.absent | {t for t in task.tests if function_id(t) in graded.dropped}
    # a test that was not run is missing, whatever the log says of it
    required = {t: "missing" if t in unselected else pytest_log.lookup(t, reported) for t in task.tests}
    reasons = sorted(set(graded.tamper)) + tamper_reasons(facts, reported, canaries, required)
    tail = log[-LOG_TAIL_CHARS:]
    not_found = graded.not_found(task.tests, required.get)
    if reasons:
        return _distrusted(reasons, agent_diff, tail, applied=True, not_found=not_found, **base)
    if not graded.runnable():
        return _score(task, required.get, base["mode"], log, True, base["dropped"]).model_copy(
            update={"not_found": not_found, "error_source": source,
                    "error": "pytest finds none of the required tests: " + ", ".join(not_found[:3])})
    if facts.exit_code not in (0, TESTS_FAILED):
        lost = " after its output passed the limit" if truncated else ""
        return GradeResult(reward=0.0, **base, applied=True, error_source=source, log_tail=tail, not_found=not_found,
                           error=f"no complete test report: pytest exited {facts.exit_code}{lost}")
    res = _score(task, required.get, base["mode"], log, True, base["dropped"])
    res.not_found = not_found
    if graded.plan is not None:  # what a blind guess at the canaries of this run could have scored
        res.guess_bound, res.guess_bound_f2p = graded.plan.guess_bound, graded.plan.guess_bound_f2p
    if truncated and not res.resolved and any(o == "missing" for t, o in required.items() if t not in unselected):
        res.error, res.error_source = (f"the test output passed {OUTPUT_LIMIT // (1024 * 1024)} MB and "
                                       "the report of some tests was lost"), source
    return res


def _distrusted(reasons: list[str], agent_diff: str, log_tail: str, **base: Any) -> GradeResult:
    """A run whose witnesses disagree scores 0: tampering when the agent changed anything,
    else the pristine tree itself trips the checks (a broken task)."""
    if not agent_diff.strip():
        return GradeResult(reward=0.0, **base, error_source="env", tamper_reasons=reasons, log_tail=log_tail,
                           error="grading checks fail without any agent change: " + "; ".join(reasons[:3]))
    return GradeResult(reward=0.0, **base, error_source="agent", tampered=True, tamper_reasons=reasons,
                       log_tail=log_tail, error="grading tampered: " + "; ".join(reasons[:3]))


def _harness_verdict(task: TaskInstance, facts: RunFacts, log: str, truncated: bool, agent_diff: str,
                     source: str, **base: Any) -> GradeResult:
    """Score a harness run from its log, after the checks a log allows (``harness.check_log``)."""
    assert task.log_parser is not None
    report = harness.parse_log(task.log_parser, log, task.tests)
    reasons = harness.check_log(task.log_parser, log, report,
                                {"exit_code": facts.exit_code, "changed_files": list(facts.changed_files)},
                                task.tests)
    tail = log[-LOG_TAIL_CHARS:]
    if reasons:
        return _distrusted(reasons, agent_diff, tail, applied=True, **base)
    if not report:
        lost = " (its output passed the limit)" if truncated else ""
        return GradeResult(reward=0.0, **base, applied=True, error_source=source, log_tail=tail,
                           error=f"no test results in the log (exit {facts.exit_code}){lost}")
    return _score(task, lambda t: report.get(t, "missing"), base["mode"], log, True, base["dropped"])


async def _script_check(task: TaskInstance, agent_diff: str, config: SandboxConfig, go: asyncio.Event
                  ) -> tuple[script_check.ScriptPlan, script_check.ScriptCheckResult | None]:
    """The task's plan (made once per task, beside the test run), then, once ``go`` is set (the tests
    passed), the check in a sandbox of its own. No sandbox starts for a submission whose tests failed,
    most of them in training: starting one beside every test run took a third of a failing grading's
    CPU under docker (2.5 against 1.7 s, a container more), for a resolved one's latency (+0.8 s)."""
    plan = await script_check.PLANS.get(task, config)
    if not plan.checked:
        return plan, None
    await go.wait()
    return plan, await script_check.check(task, agent_diff, plan, config)


def _with_script_check(res: GradeResult, outcome: tuple[script_check.ScriptPlan, script_check.ScriptCheckResult | None]) -> GradeResult:
    """A resolved pytest verdict stands only if the fix also holds in a plain script on the agent's tree."""
    plan, checked = outcome
    if checked is None:
        return res.model_copy(update={"script_check": {"ran": False, **plan.summary()}})
    summary = {"ran": True, "holds": checked.holds, **plan.summary(), "form": checked.form,
               **({"mismatched": checked.mismatched} if checked.mismatched else {}),
               **({"error": checked.error} if checked.error else {})}
    if checked.holds:
        return res.model_copy(update={"script_check": summary})
    why = checked.mismatched[0] if checked.mismatched else checked.error
    return res.model_copy(update={
        "script_check": summary, "reward": 0.0, "resolved": False, "error_source": "agent",
        "error": f"the fix does not hold outside the test run (run as a plain script): {why}"})


async def grade_submission(task: TaskInstance, diff: str, config: SandboxConfig,
                           mode: Literal["resolved", "pass_rate"] = "resolved", *,
                           cache: GradeCache | None = None, timeout_s: float = 900.0) -> GradeResult:
    """Grade ``diff`` (the agent's workspace diff) against ``task``'s hidden tests.

    Agent mistakes (a diff that does not apply) and broken tasks come back as a
    result with ``error``; sandbox failures too (``error_source="infra"``, not cached).
    """
    if not task.tests:
        return GradeResult(reward=0.0, mode=mode, error="task lists no FAIL_TO_PASS/PASS_TO_PASS tests",
                           error_source="env")
    protected = touched_paths(task.test_patch)
    agent_diff, dropped = filter_diff(diff, protected, harness.runner_paths(task.log_parser if task.test_cmd else None))
    suspicious, detail = summarize(scan_diff(diff))
    size = len(agent_diff.encode("utf-8", "surrogateescape"))
    if size > MAX_DIFF_BYTES:  # the submission's own size: the agent's doing, never an infra failure
        return GradeResult(reward=0.0, mode=mode, dropped=dropped, suspicious=suspicious,
                           suspicious_detail=detail, error_source="agent",
                           error=f"the submitted diff is {size} bytes, over the {MAX_DIFF_BYTES}-byte limit")
    key = diff_key(GRADER_VERSION, task.instance_id, mode, task.test_patch, "\n".join(task.tests),
                   task.test_cmd or "", task.log_parser or "", normalize_diff(agent_diff))
    cache = _DEFAULT_CACHE if cache is None else cache

    async def run() -> GradeResult:
        started = time.perf_counter()
        # The script check (script_check.py) gets its plan ready beside the pytest run; its sandbox starts
        # and its script runs only for a submission whose tests passed, else it is dropped.
        go = asyncio.Event()
        checking = asyncio.ensure_future(_script_check(task, agent_diff, config, go)) if agent_diff.strip() else None
        try:
            res = await _grade_in_sandbox(task, agent_diff, dropped, config, mode, timeout_s)
            if checking is not None and (res.resolved or (res.mode == "pass_rate" and any(
                    o == "passed" for o in res.fail_to_pass.values()))):
                go.set()
                res = _with_script_check(res, await checking)
        except SandboxError as exc:
            res = GradeResult(reward=0.0, mode=mode, dropped=dropped, error_source="infra",
                              error=f"{type(exc).__name__}: {exc}")
        except harness.HarnessError as exc:  # the server cannot grade this task: not the agent's doing
            res = GradeResult(reward=0.0, mode=mode, dropped=dropped, error_source="env", error=str(exc))
        finally:
            if checking is not None and not checking.done():
                checking.cancel()
                await asyncio.gather(checking, return_exceptions=True)
        return res.model_copy(update={"duration_s": round(time.perf_counter() - started, 3)})

    res = await cache.get_or_run(key, run, draw_free=not agent_diff.strip())
    return res.model_copy(update={"dropped": dropped, "suspicious": suspicious, "suspicious_detail": detail})
