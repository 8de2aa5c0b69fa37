"""Grade a submission: fresh sandbox, pristine tree + the agent's text diff + test_patch.

The runner is the grader's, not the agent's (docs/grading.md): the agent's changes
to test files, test-runner configuration, runner-shadowing modules and start-up
hooks are dropped (``dropped``); pytest runs under the grader's own configuration
(taken from the pristine tree), with plugin autoload off, an isolated interpreter
and a supervisor process that owns it. Because the agent's code still runs inside
the test process, tampering is *detected*: random canary tests, outcome records on
a channel opened before project code, the JUnit report and the exit status must
agree (``verdict.py``), else the reward is 0 with ``error_kind: grading_tampered``.
A monitor flags hack-shaped code (``suspicious``) without changing the reward.
Identical (normalised) diffs are graded once.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field

from sandbox import SandboxConfig, SandboxError, open_sandbox
from sandbox.base import Sandbox

from ..diffs import diff_key, filter_diff, normalize_diff, split_diff, touched_paths
from ..junit import PASSING, JUnitError, Outcome, outcomes_for, parse_junit
from ..task import TaskInstance
from . import harness, kit
from .canary import Canary, make_canary
from .monitor import scan_diff, summarize
from .runner_config import RunnerConfig, runner_config
from .verdict import cross_check

GRADER_VERSION = "3"  # part of the cache key: a changed grader re-grades
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
    suspicious: list[str] = Field(default_factory=list, description="monitor flags (SuspicionReason values)")
    suspicious_detail: list[str] = Field(default_factory=list)
    error: str | None = None
    error_source: Literal["agent", "env", "infra"] | None = None
    log_tail: str = ""
    cached: bool = False
    duration_s: float = 0.0

    def metadata(self) -> dict[str, Any]:
        """The fields an observation's metadata carries after grading."""
        out = self.model_dump(include={"resolved", "tests_passed", "tests_failed", "fail_to_pass",
                                       "pass_to_pass", "applied", "dropped", "cached", "suspicious"})
        out["grade_mode"] = self.mode
        out["reward_hacking"] = self.tampered
        if self.tampered:
            out["tamper_reasons"] = self.tamper_reasons
        if self.suspicious_detail:
            out["suspicious_detail"] = self.suspicious_detail
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


KIT_ROOT = "/tmp/.grade"


async def _stage(sb: Sandbox, dest: str, files: dict[str, str]) -> None:
    """Place ``files`` in ``dest`` under /tmp/.grade (outside the workspace) with one command."""
    tag = dest.rsplit("/", 1)[-1]
    staged = []
    for name, data in files.items():
        staging = f".swe-grade-{tag}-{name}"
        await sb.write_file(staging, data.encode("utf-8", "surrogateescape"))
        staged.append(f"/workspace/{staging} {dest}/{name}")
    moves = " && ".join(f"mv -f -- {pair}" for pair in staged)
    res = await sb.run(f"mkdir -p {dest}/home {dest}/pyc && {moves}", timeout_s=60)
    if not res.ok:
        raise SandboxError(f"could not stage the grading kit: {res.output[-500:]}")


async def _apply(sb: Sandbox, patch_path: str) -> tuple[bool, str]:
    res = await sb.run(f"git apply --whitespace=nowarn {patch_path} 2>&1 || "
                       f"patch --batch --fuzz=5 -p1 -i {patch_path} 2>&1", timeout_s=120)
    return res.ok, res.output


def _score(task: TaskInstance, report: dict[str, Outcome], mode: GradeMode, log: str,
           applied: bool, dropped: list[str]) -> GradeResult:
    lookup = harness.outcomes if task.test_cmd else outcomes_for  # harness ids are the parser's, verbatim
    f2p = lookup(task.FAIL_TO_PASS, report)
    p2p = lookup(task.PASS_TO_PASS, report)
    # a FAIL_TO_PASS test is fixed only when it passes; an expected failure is not a fix
    passed = sum(1 for o in f2p.values() if o == "passed") + sum(1 for o in p2p.values() if o in PASSING)
    total = len(f2p) + len(p2p)
    failed = total - passed
    resolved = failed == 0 and total > 0
    reward = (1.0 if resolved else 0.0) if mode == "resolved" else (passed / total if total else 0.0)
    return GradeResult(reward=reward, resolved=resolved, mode=mode, tests_passed=passed, tests_failed=failed,
                       fail_to_pass=f2p, pass_to_pass=p2p, applied=applied, dropped=dropped,
                       log_tail=log[-LOG_TAIL_CHARS:])


def pytest_args(task: TaskInstance, canary: Canary, junit: str, ini: str) -> list[str]:
    """The grader's pytest command line (the test process never sees it in argv)."""
    return ["-c", ini, "--rootdir", "/workspace", "--confcutdir", "/workspace", "-p", "no:cacheprovider",
            "-q", "-rA", "--continue-on-collection-errors", f"--junitxml={junit}",
            *task.tests, canary.must_pass, canary.must_fail]


def _summary(output: str, nonce: str) -> dict[str, Any] | None:
    marker = f"SWEGRADE {nonce} "
    for line in reversed(output.splitlines()):
        if line.startswith(marker):
            try:
                data = json.loads(line[len(marker):])
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
    return None


@dataclass(frozen=True)
class _Kit:
    """One grading's secrets and the files staged for it (diffs, supervisor, boot, ini, plan), in one move."""

    dir: str
    nonce: str
    canary: Canary
    files: dict[str, str]


def _make_kit(task: TaskInstance, agent_diff: str, config: RunnerConfig | None, timeout_s: float) -> _Kit:
    """The kit of a pytest grading (``config`` given) or of a harness grading (``task.test_cmd``)."""
    nonce, canary = secrets.token_hex(16), make_canary(task.tests)
    dest = f"{KIT_ROOT}/{secrets.token_hex(8)}"
    junit = f"{dest}/junit.xml"
    touched = sorted({p for block in split_diff(agent_diff) for p in block.paths})
    plan: dict[str, Any] = {"nonce": nonce, "dir": dest, "workspace": "/workspace", "junit": junit,
                            "timeout_s": timeout_s}
    files = {"supervisor.py": kit.script("supervisor.py")}
    if task.test_cmd:
        plan.update(command=task.test_cmd, watch=sorted(touched_paths(task.test_patch)))
    else:
        assert config is not None
        plan.update({
            "canary": {"path": canary.path, "source": canary.source, "mtime_ref": canary.mtime_ref},
            "watch": sorted({t.split("::", 1)[0] for t in task.tests if t.split("::", 1)[0].endswith(".py")}),
            "boot": {"workspace": "/workspace", "junit": junit, "touched": touched,
                     "args": pytest_args(task, canary, junit, f"{dest}/pytest.ini")},
        })
        files.update({"boot.py": kit.script("boot.py"), "pytest.ini": config.ini})
    files["plan.json"] = json.dumps(plan)
    if agent_diff.strip():
        files["agent.diff"] = agent_diff
    if task.test_patch.strip():
        files["test.diff"] = task.test_patch
    return _Kit(dir=dest, nonce=nonce, canary=canary, files=files)


async def _run_tests(sb: Sandbox, kit_: _Kit, timeout_s: float) -> tuple[dict[str, Any] | None, bytes | None,
                                                                            bytes, str]:
    """Run the hidden tests under the supervisor; (summary, JUnit or harness log, channel bytes, output)."""
    # No git history in the graded tree: the agent's code cannot tell grader-written files apart by it.
    # the image's python (the pytest grader needs its environment's), else the sandbox's bundled one
    python = "$(command -v python || command -v python3 || echo /.swe/py/python)"
    run = await sb.run(f"cd /workspace && rm -rf .git && {python} -I -S -B {kit_.dir}/supervisor.py "
                       f"{kit_.dir}/plan.json", timeout_s=timeout_s + 60)
    summary = _summary(run.output, kit_.nonce)
    report: bytes | None = None
    channel = b""
    if summary is not None:
        channel = await sb.read_file(f".swe-grade-{kit_.nonce}.chan")
        if summary.get("log_sha256"):
            report = await sb.read_file(f".swe-grade-{kit_.nonce}.log")
        elif summary.get("junit"):
            report = await sb.read_file(f".swe-grade-{kit_.nonce}.xml")
    return summary, report, channel, run.output


async def _grade_in_sandbox(task: TaskInstance, agent_diff: str, dropped: list[str], config: SandboxConfig,
                            mode: GradeMode, timeout_s: float) -> GradeResult:
    if task.test_cmd:
        harness.parser(task.log_parser or "")  # HarnessError before any sandbox starts
        kit_ = _make_kit(task, agent_diff, None, timeout_s)
    else:
        kit_ = _make_kit(task, agent_diff, await asyncio.to_thread(runner_config, task, config), timeout_s)
    canary = kit_.canary
    sb = await open_sandbox(task.workspace_spec(), config)
    try:
        applied = True
        await _stage(sb, kit_.dir, kit_.files)
        if agent_diff.strip():
            ok, log = await _apply(sb, f"{kit_.dir}/agent.diff")
            if not ok:
                return GradeResult(reward=0.0, mode=mode, applied=False, dropped=dropped, error_source="agent",
                                   error="the submitted diff does not apply to the base commit",
                                   log_tail=log[-LOG_TAIL_CHARS:])
        if task.test_patch.strip():
            ok, log = await _apply(sb, f"{kit_.dir}/test.diff")
            if not ok:
                return GradeResult(reward=0.0, mode=mode, applied=applied, dropped=dropped, error_source="env",
                                   error="the task's test_patch does not apply", log_tail=log[-LOG_TAIL_CHARS:])
        summary, junit_bytes, channel, output = await _run_tests(sb, kit_, timeout_s)
        # The agent's code ran in this sandbox: a hang or a crash may be its doing, so a missing report
        # is charged to the agent (a trainer masks env/infra failures, which the policy must never reach).
        # With no agent diff, the task is broken.
        source = "agent" if agent_diff.strip() else "env"
        if summary is None:  # killed or starved by what ran under it (or the task's python is broken)
            return GradeResult(reward=0.0, mode=mode, applied=applied, dropped=dropped, error_source=source,
                               error="no test report: the grading supervisor gave no summary",
                               log_tail=output[-LOG_TAIL_CHARS:])
        log_tail = str(summary.get("log_tail", ""))
        if summary.get("timed_out"):
            return GradeResult(reward=0.0, mode=mode, applied=applied, dropped=dropped, error_source=source,
                               error="no test report (timeout)", log_tail=log_tail)
        if task.test_cmd:
            return _harness_verdict(task, summary, junit_bytes, mode, applied, dropped, agent_diff, source)
        report: dict[str, Outcome] | None = None
        report_error = "no JUnit report"
        if junit_bytes is not None and hashlib.sha256(junit_bytes).hexdigest() == summary.get("junit_sha256"):
            try:
                report = parse_junit(junit_bytes)
            except JUnitError as exc:
                report_error = str(exc)
        if hashlib.sha256(channel).hexdigest() != summary.get("channel_sha256"):
            reasons = ["the outcome records changed after the run"]
        else:
            reasons = cross_check(summary, report, channel, canary, task.tests)
        if reasons:
            return _distrusted(reasons, agent_diff, log_tail, mode=mode, applied=applied, dropped=dropped)
        if report is None:
            return GradeResult(reward=0.0, mode=mode, applied=applied, dropped=dropped, error_source=source,
                               error=f"no test report (exit {summary.get('exit_code')}): {report_error}",
                               log_tail=log_tail)
        return _score(task, report, mode, log_tail, applied, dropped)
    finally:
        await sb.close()


def _distrusted(reasons: list[str], agent_diff: str, log_tail: str, **base: Any) -> GradeResult:
    """A run whose witnesses disagree scores 0: tampering when the agent changed anything,
    else the pristine tree itself trips the checks (a broken task)."""
    if not agent_diff.strip():
        return GradeResult(reward=0.0, **base, error_source="env", tamper_reasons=reasons, log_tail=log_tail,
                           error="grading checks fail without any agent change: " + "; ".join(reasons[:3]))
    return GradeResult(reward=0.0, **base, error_source="agent", tampered=True, tamper_reasons=reasons,
                       log_tail=log_tail, error="grading tampered: " + "; ".join(reasons[:3]))


def _harness_verdict(task: TaskInstance, summary: dict[str, Any], log_bytes: bytes | None, mode: GradeMode,
                     applied: bool, dropped: list[str], agent_diff: str, source: str) -> GradeResult:
    """Score a harness run from its log, after the checks a log allows (``harness.check_log``)."""
    assert task.log_parser is not None
    base = dict(mode=mode, applied=applied, dropped=dropped)
    if log_bytes is None or hashlib.sha256(log_bytes).hexdigest() != summary.get("log_sha256"):
        reasons = ["the test log changed after the run"]
        log = ""
        report: dict[str, Outcome] = {}
    else:
        log = log_bytes.decode("utf-8", "replace")
        report = harness.parse_log(task.log_parser, log)
        reasons = harness.check_log(task.log_parser, log, report, summary, task.tests)
    tail = log[-LOG_TAIL_CHARS:]
    if reasons:
        return _distrusted(reasons, agent_diff, tail, **base)
    if not report:
        return GradeResult(reward=0.0, **base, error_source=source, log_tail=tail,
                           error=f"no test results in the log (exit {summary.get('exit_code')})")
    return _score(task, report, mode, tail, applied, dropped)


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
    key = diff_key(GRADER_VERSION, task.instance_id, mode, task.test_patch, "\n".join(task.tests),
                   task.test_cmd or "", task.log_parser or "", normalize_diff(agent_diff))
    cache = _DEFAULT_CACHE if cache is None else cache

    async def run() -> GradeResult:
        started = time.perf_counter()
        try:
            res = await _grade_in_sandbox(task, agent_diff, dropped, config, mode, timeout_s)
        except SandboxError as exc:
            res = GradeResult(reward=0.0, mode=mode, dropped=dropped, error_source="infra",
                              error=f"{type(exc).__name__}: {exc}")
        except harness.HarnessError as exc:  # the server cannot grade this task: not the agent's doing
            res = GradeResult(reward=0.0, mode=mode, dropped=dropped, error_source="env", error=str(exc))
        return res.model_copy(update={"duration_s": round(time.perf_counter() - started, 3)})

    res = await cache.get_or_run(key, run)
    return res.model_copy(update={"dropped": dropped, "suspicious": suspicious, "suspicious_detail": detail})
