"""Grading benchmark: how much latency the grader's anti-tampering defences add, before vs after.

    .venv/bin/python bench/bench_grading.py [--reps 5] [--backend bwrap|docker] [--tasks FILE]

For each task it grades the gold patch (``task.patch``) with two graders in one process,
alternating before/after, ``--reps`` times each after one warm-up each, and prints per task:
the p50 wall time of a grading (fresh sandbox until it is closed), the overhead
((after - before) / before) and both rewards (1.0 expected; a mismatch is flagged loudly).
The total row is the median over tasks of the per-task p50s, and its overhead.

* before (``--before REF``): the grader at a git ref, e.g. the commit before a change to the defences;
* before (default): ``legacy_grade`` below, a baseline re-implementation of the previous grader
  (apply the agent diff and the test_patch, run pytest straight in the workspace, read the
  JUnit report back). It exists only here, to measure against.
* after: the current ``verifier.grade_submission`` (canaries planted in the test
  modules, the graded tree's history rebuilt, the tests run as the only shell of the sandbox
  behind a Landlock wall, the log checked against the canaries), with the result cache off.

Tasks: the demo task plus the cached small pack of real tasks (``tests/support/taskpacks.py``,
3 tasks), or every task of ``--tasks FILE`` (e.g. one built by ``task-factory build``).
Targets: the defences add at most 15% to a grader with none (the default baseline), and the current
grader takes at most 1.5x the first-round grader's time (``--before f216933``: the third round of
defences, the script check included, against the first). A pipe ping-pong round trip
measured before and after the run tells how busy the machine was.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from machine import pipe_round_trip_us  # noqa: E402

from sandbox import DEFAULT_BACKEND, SandboxConfig, backend_names, open_sandbox  # noqa: E402
from task_factory.demo_task import demo_tasks_file  # noqa: E402
from verifier import GradeCache, grade_submission  # noqa: E402
from verifier.diffs import filter_diff, touched_paths  # noqa: E402
from verifier.junit import PASSING, outcomes_for, parse_junit  # noqa: E402
from verifier.task import TaskInstance, load_tasks  # noqa: E402

TARGET_OVERHEAD = 0.15  # the defences add at most 15% to the grading p50 (against legacy_grade)
FIRST_ROUND = "f216933"  # the first-round grader: the current one takes at most TARGET_RATIO x its time
TARGET_RATIO = 1.5
TIMEOUT_S = 300


async def legacy_grade(task: TaskInstance, diff: str, config: SandboxConfig,
                       timeout_s: float = TIMEOUT_S) -> tuple[float, str | None]:
    """BASELINE ONLY: the grader as it was before the anti-tampering defences; (reward, error).

    Fresh sandbox; the filtered agent diff, then the test_patch, each staged under
    /tmp/.grade/<tag>/ and applied; pytest run straight in the workspace; its JUnit report
    copied back into the workspace, read and scored (reward 1.0 iff every test passes).
    """
    agent_diff, _ = filter_diff(diff, touched_paths(task.test_patch))
    tag = os.urandom(8).hex()
    sb = await open_sandbox(task.workspace_spec(), config)
    try:
        for name, data in (("agent.diff", agent_diff), ("test.diff", task.test_patch)):
            if not data.strip():
                continue
            path = f"/tmp/.grade/{tag}/{name}"
            await sb.write_file(f".swe-grade-{tag}-{name}", data.encode())
            res = await sb.run(f"mkdir -p /tmp/.grade/{tag} && mv -f -- /workspace/.swe-grade-{tag}-{name} {path}",
                               timeout_s=60)
            if not res.ok:
                return 0.0, f"could not stage {name}: {res.output[-200:]}"
            res = await sb.run(f"git apply --whitespace=nowarn {path} 2>&1 || "
                               f"patch --batch --fuzz=5 -p1 -i {path} 2>&1", timeout_s=120)
            if not res.ok:
                return 0.0, f"{name} does not apply: {res.output[-200:]}"
        junit = f"/tmp/.grade/{tag}/junit.xml"
        tests = " ".join(shlex.quote(t) for t in task.tests)
        await sb.run(f"cd /workspace && PYTHONPYCACHEPREFIX=/tmp/.grade/{tag}/pyc PYTHONDONTWRITEBYTECODE=1 "
                     f"python -m pytest -p no:cacheprovider -q -rA --junitxml={junit} {tests}; "
                     f"cp -f {junit} /workspace/.swe-grade-{tag}.xml", timeout_s=timeout_s)
        try:
            report = parse_junit(await sb.read_file(f".swe-grade-{tag}.xml"))
        except Exception as exc:  # noqa: BLE001 - no report: reward 0, reported
            return 0.0, f"no test report: {exc}"
        outcomes = outcomes_for(task.tests, report)
        ok = bool(outcomes) and all(o in PASSING for o in outcomes.values())
        return (1.0 if ok else 0.0), None
    finally:
        await sb.close()


def grader_at(ref: str):
    """BASELINE ONLY: ``grade_submission`` of the grader at git ``ref`` (its ``env_server`` package
    extracted to a temporary folder as ``env_server_before``), adapted to take this tree's tasks."""
    import importlib
    import subprocess
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="grader-before-"))
    subprocess.run(f"git -C {ROOT} archive {ref} env_server | tar -x -C {root}", shell=True, check=True)
    (root / "env_server").rename(root / "env_server_before")
    sys.path.append(str(root))
    grading = importlib.import_module("env_server_before.grading")
    old_task = importlib.import_module("env_server_before.task")

    async def grade(task: TaskInstance, diff: str, config: SandboxConfig) -> tuple[float, str | None]:
        old = old_task.TaskInstance.model_validate(task.model_dump())
        res = await grading.grade_submission(old, diff, config, "resolved", cache=grading.GradeCache(max_entries=0),
                                             timeout_s=TIMEOUT_S)
        return res.reward, res.error
    return grade


async def current_grade(task: TaskInstance, diff: str, config: SandboxConfig) -> tuple[float, str | None]:
    res = await grade_submission(task, diff, config, "resolved", cache=GradeCache(max_entries=0),
                                 timeout_s=TIMEOUT_S)
    return res.reward, res.error


async def bench_task(task: TaskInstance, config: SandboxConfig, reps: int, before=None) -> dict:
    """Warm-up each, then ``reps`` rounds of before, after; wall times and every reward seen."""
    graders = {"before": before or legacy_grade, "after": current_grade}
    times: dict[str, list[float]] = {k: [] for k in graders}
    rewards: dict[str, list[float]] = {k: [] for k in graders}
    errors: dict[str, str] = {}
    for rep in range(reps + 1):
        for name, grade in graders.items():
            t = time.perf_counter()
            reward, error = await grade(task, task.patch, config)
            elapsed = time.perf_counter() - t
            rewards[name].append(reward)
            if error:
                errors.setdefault(name, error)
            if rep > 0:  # rep 0 is the warm-up
                times[name].append(elapsed)
    return {"p50": {k: statistics.median(v) for k, v in times.items()}, "rewards": rewards, "errors": errors}


def load_bench_tasks(tasks_file: str | None) -> list[TaskInstance]:
    if tasks_file:
        return load_tasks(tasks_file)
    sys.path.append(str(ROOT / "tests"))  # after the repo root: tests/sandbox/ must not shadow `sandbox`
    from support.taskpacks import build_small_pack

    return load_tasks(demo_tasks_file()) + load_tasks(build_small_pack(3))


def reward_cell(rewards: list[float]) -> str:
    return "1.0" if all(r == 1.0 for r in rewards) else "/".join(f"{r:g}" for r in sorted(set(rewards)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5, help="timed gradings per grader per task (after 1 warm-up)")
    ap.add_argument("--backend", choices=backend_names(), default=DEFAULT_BACKEND)
    ap.add_argument("--tasks", metavar="FILE", help="a tasks.jsonl to bench instead of demo + small pack")
    ap.add_argument("--before", metavar="REF", help="compare with the grader at this git ref (e.g. the commit "
                    "before a change to the defences) instead of the baseline without defences")
    a = ap.parse_args()
    if a.reps < 1:
        ap.error("--reps must be at least 1")

    tasks = load_bench_tasks(a.tasks)
    config = SandboxConfig(backend=a.backend)
    rtt_before = pipe_round_trip_us()
    before = grader_at(a.before) if a.before else None
    results = {}
    for task in tasks:
        print(f"grading {task.instance_id} ...", file=sys.stderr, flush=True)
        results[task.instance_id] = asyncio.run(bench_task(task, config, a.reps, before))
    rtt_after = pipe_round_trip_us()

    width = max(28, *(len(t) for t in results))
    print(f"\ngrading bench: gold patch, {a.backend} backend, {os.cpu_count()} cores, {len(tasks)} tasks, "
          f"{a.reps} reps per grader (+1 warm-up), before/after alternating")
    print(f"  before = {'the grader at ' + a.before if a.before else 'legacy_grade (baseline, no defences)'}; "
          "after = grade_submission (current, cache off)")
    print(f"{'task':{width}}  {'before p50':>10}  {'after p50':>10}  {'overhead':>8}  rewards before/after")
    mismatch = False
    for tid, r in results.items():
        b, af = r["p50"]["before"], r["p50"]["after"]
        cells = {k: reward_cell(r["rewards"][k]) for k in ("before", "after")}
        bad = any(c != "1.0" for c in cells.values())
        mismatch |= bad
        note = ""
        if bad:
            note = "   <<<<< REWARD MISMATCH (expected 1.0): " + "; ".join(
                f"{k}: {e[:100]}" for k, e in r["errors"].items())
        print(f"{tid:{width}}  {b:>9.3f}s  {af:>9.3f}s  {(af - b) / b:>+8.1%}  {cells['before']} / {cells['after']}"
              f"{note}")
    tb = statistics.median(r["p50"]["before"] for r in results.values())
    ta = statistics.median(r["p50"]["after"] for r in results.values())
    overhead = (ta - tb) / tb
    print(f"{'total (median of task p50s)':{width}}  {tb:>9.3f}s  {ta:>9.3f}s  {overhead:>+8.1%}")
    print(f"machine: pipe ping-pong round trip {rtt_before:.1f} us before, {rtt_after:.1f} us after "
          "(a quiet 2-core VM here: ~7 us)")
    if a.before and FIRST_ROUND.startswith(a.before[:7]):
        verdict = "PASS" if ta <= TARGET_RATIO * tb else "FAIL"
        print(f"target: at most {TARGET_RATIO}x the first-round grader: {ta / tb:.2f}x  {verdict}")
    else:
        verdict = "PASS" if overhead <= TARGET_OVERHEAD else "FAIL"
        print(f"target: defences add at most {TARGET_OVERHEAD:.0%}: overhead {overhead:+.1%}  {verdict}")
    if mismatch:
        print("REWARD MISMATCH: a gold patch did not grade 1.0 (see the rows marked above)")
    return 0 if verdict == "PASS" and not mismatch else 1


if __name__ == "__main__":
    sys.exit(main())
