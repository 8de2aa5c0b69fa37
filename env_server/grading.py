"""Grade a submission: fresh sandbox, pristine tree + the agent's text diff + test_patch.

Results come from a JUnit XML written under /tmp in the grading sandbox (outside
the workspace), never from stdout. Identical (normalised) diffs are graded once.
"""

from __future__ import annotations

import asyncio
import secrets
import shlex
import time
from collections import OrderedDict
from typing import Any, Literal

from pydantic import BaseModel, Field

from sandbox import SandboxConfig, SandboxError, open_sandbox
from sandbox.base import Sandbox

from .diffs import diff_key, filter_diff, normalize_diff, touched_paths
from .junit import PASSING, JUnitError, Outcome, outcomes_for, parse_junit
from .task import TaskInstance

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
    dropped: list[str] = Field(default_factory=list, description="diff parts not applied (binary, bytecode, tests)")
    error: str | None = None
    error_source: Literal["agent", "env", "infra"] | None = None
    log_tail: str = ""
    cached: bool = False
    duration_s: float = 0.0

    def metadata(self) -> dict[str, Any]:
        """The fields an observation's metadata carries after grading."""
        out = self.model_dump(include={"resolved", "tests_passed", "tests_failed", "fail_to_pass",
                                       "pass_to_pass", "applied", "dropped", "cached"})
        out["grade_mode"] = self.mode
        if self.error:
            out["grade_error"] = self.error
            out["grade_error_source"] = self.error_source
        return out


class GradeCache:
    """LRU of results by diff hash; concurrent identical requests share one grading."""

    def __init__(self, max_entries: int = 4096) -> None:
        self.max_entries = max_entries
        self._done: OrderedDict[str, GradeResult] = OrderedDict()
        self._pending: dict[str, asyncio.Future[GradeResult]] = {}

    async def get_or_run(self, key: str, run: Any) -> GradeResult:
        if key in self._done:
            self._done.move_to_end(key)
            return self._done[key].model_copy(update={"cached": True})
        if key in self._pending:
            res = await asyncio.shield(self._pending[key])
            return res.model_copy(update={"cached": True})
        fut: asyncio.Future[GradeResult] = asyncio.get_running_loop().create_future()
        self._pending[key] = fut
        try:
            res = await run()
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # mark retrieved
            raise
        finally:
            self._pending.pop(key, None)
        fut.set_result(res)
        if res.error_source != "infra" and self.max_entries > 0:  # infra failures are retried
            self._done[key] = res
            while len(self._done) > self.max_entries:
                self._done.popitem(last=False)
        return res


_DEFAULT_CACHE = GradeCache()


async def _put(sb: Sandbox, tag: str, name: str, data: str) -> str:
    """Place ``data`` under /tmp/.grade/<tag>/ (outside the workspace); return its path."""
    staging = f".swe-grade-{tag}-{name}"
    await sb.write_file(staging, data.encode("utf-8", "surrogateescape"))
    dest = f"/tmp/.grade/{tag}/{name}"
    res = await sb.run(f"mkdir -p /tmp/.grade/{tag} && mv -f -- /workspace/{staging} {dest}", timeout_s=60)
    if not res.ok:
        raise SandboxError(f"could not stage {name}: {res.output[-500:]}")
    return dest


async def _apply(sb: Sandbox, patch_path: str) -> tuple[bool, str]:
    res = await sb.run(f"git apply --whitespace=nowarn {patch_path} 2>&1 || "
                       f"patch --batch --fuzz=5 -p1 -i {patch_path} 2>&1", timeout_s=120)
    return res.ok, res.output


def _score(task: TaskInstance, report: dict[str, Outcome], mode: GradeMode, log: str,
           applied: bool, dropped: list[str]) -> GradeResult:
    f2p = outcomes_for(task.FAIL_TO_PASS, report)
    p2p = outcomes_for(task.PASS_TO_PASS, report)
    every = {**f2p, **p2p}
    passed = sum(1 for o in every.values() if o in PASSING)
    failed = len(every) - passed
    resolved = failed == 0 and len(every) > 0
    reward = (1.0 if resolved else 0.0) if mode == "resolved" else (passed / len(every) if every else 0.0)
    return GradeResult(reward=reward, resolved=resolved, mode=mode, tests_passed=passed, tests_failed=failed,
                       fail_to_pass=f2p, pass_to_pass=p2p, applied=applied, dropped=dropped,
                       log_tail=log[-LOG_TAIL_CHARS:])


async def _grade_in_sandbox(task: TaskInstance, agent_diff: str, dropped: list[str], config: SandboxConfig,
                            mode: GradeMode, timeout_s: float) -> GradeResult:
    tag = secrets.token_hex(8)
    sb = await open_sandbox(task.workspace_spec(), config)
    try:
        applied = True
        if agent_diff.strip():
            ok, log = await _apply(sb, await _put(sb, tag, "agent.diff", agent_diff))
            if not ok:
                return GradeResult(reward=0.0, mode=mode, applied=False, dropped=dropped, error_source="agent",
                                   error="the submitted diff does not apply to the base commit",
                                   log_tail=log[-LOG_TAIL_CHARS:])
        if task.test_patch.strip():
            ok, log = await _apply(sb, await _put(sb, tag, "test.diff", task.test_patch))
            if not ok:
                return GradeResult(reward=0.0, mode=mode, applied=applied, dropped=dropped, error_source="env",
                                   error="the task's test_patch does not apply", log_tail=log[-LOG_TAIL_CHARS:])
        junit = f"/tmp/.grade/{tag}/junit.xml"
        tests = " ".join(shlex.quote(t) for t in task.tests)
        run = await sb.run(
            f"cd /workspace && PYTHONPYCACHEPREFIX=/tmp/.grade/{tag}/pyc PYTHONDONTWRITEBYTECODE=1 "
            f"python -m pytest -p no:cacheprovider -q -rA --junitxml={junit} {tests}; "
            f"cp -f {junit} /workspace/.swe-grade-{tag}.xml", timeout_s=timeout_s)
        try:
            report = parse_junit(await sb.read_file(f".swe-grade-{tag}.xml"))
        except (JUnitError, SandboxError) as exc:
            # The agent's code ran in this sandbox: a hang, a crash of pytest or of the sandbox itself
            # may be its doing, so it is charged to the agent (a trainer masks env/infra failures,
            # which must never be reachable by the policy). With no agent diff, the task is broken.
            source = "agent" if agent_diff.strip() else "env"
            return GradeResult(reward=0.0, mode=mode, applied=applied, dropped=dropped, error_source=source,
                               error=f"no test report ({run.status.value}): {exc}",
                               log_tail=run.output[-LOG_TAIL_CHARS:])
        return _score(task, report, mode, run.output, applied, dropped)
    finally:
        await sb.close()


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
    agent_diff, dropped = filter_diff(diff, protected)
    key = diff_key(task.instance_id, mode, task.test_patch, "\n".join(task.tests), normalize_diff(agent_diff))
    cache = _DEFAULT_CACHE if cache is None else cache

    async def run() -> GradeResult:
        started = time.perf_counter()
        try:
            res = await _grade_in_sandbox(task, agent_diff, dropped, config, mode, timeout_s)
        except SandboxError as exc:
            res = GradeResult(reward=0.0, mode=mode, dropped=dropped, error_source="infra",
                              error=f"{type(exc).__name__}: {exc}")
        return res.model_copy(update={"duration_s": round(time.perf_counter() - started, 3)})

    res = await cache.get_or_run(key, run)
    return res.model_copy(update={"dropped": dropped}) if res.cached else res
