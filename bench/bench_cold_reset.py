"""Where a cold reset's time goes, phase by phase, on bwrap (the real server's path, in process).

Times ``--resets`` cold episode starts of the demo's tasks (``Episode.start`` with no pool, as a
reset does), one after another, idle, and splits each by wrapping the functions it calls:

* ``template``: the task's workspace template (``prepare_template``: cached per repository and
  commit, so a lookup after the first);
* ``tool view``: the blocked-tool view of /usr (cached);
* ``cgroup``: the session's cgroup;
* ``spawn``: bwrap's process started (``create_subprocess_exec``);
* from the spawn to the runtime's first answer, split by the runtime's own clock readings
  (``info["timing"]``): ``jail + python`` (bwrap's namespaces and mounts, the interpreter's own
  start, up to the runtime's first statement), ``imports`` (the runtime's module: its imports
  and definitions; a runtime without that reading counts it in ``jail + python``), ``init sent``
  (waiting for the host's init message), ``layers`` (overlay, seccomp, Landlock, limits:
  ``runtime.setup``), ``shell`` (the persistent bash started), ``reply`` (the answer read by
  the host); ``handshake`` where the runtime gives no timing;
* ``episode``: the rest of ``Episode.start`` (the reset record written to the trace, the first
  observation).

Prints p50 / p90 per phase (ms) and the total, against the 50 ms target of issue 36 (idle, p50).
``--baseline REV``: the same starts, alternating with starts whose runtime is ``sandbox/runtime.py``
as of git revision REV (before and after in one run, under the same load); a table for each.

``--cpu-policy normal``: the sandboxes at normal CPU priority (a server's run at idle: from its
layers on, a starting runtime then waits for every other process of a busy machine).

Usage: python bench/bench_cold_reset.py [--resets 30] [--tasks FILE] [--baseline REV] [--cpu-policy idle|normal]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import ms_pct as pct  # noqa: E402
from machine import pipe_round_trip_us  # noqa: E402

import sandbox.bwrap as bwrap_module  # noqa: E402
import sandbox.channel as channel_module  # noqa: E402
from env_server.config import ServerConfig  # noqa: E402
from env_server.episode import Episode, EpisodeConfig  # noqa: E402
from env_server.traces import TraceStore  # noqa: E402
from task_factory.demo_task import demo_tasks_file  # noqa: E402
from verifier.task import load_tasks  # noqa: E402

PHASES = ("template", "tool view", "cgroup", "spawn", "jail + python", "imports", "init sent", "layers", "shell",
          "reply", "handshake", "episode", "total")


class Timer:
    """Wraps the phases' functions; ``now`` holds the seconds of each phase of the start under way."""

    def __init__(self) -> None:
        self.now: dict[str, float] = {}
        wrap = self.wrap
        bwrap_module.prepare_template = wrap("template", bwrap_module.prepare_template)
        bwrap_module.tool_view = wrap("tool view", bwrap_module.tool_view)
        bwrap_module.SessionCgroup.create = staticmethod(wrap("cgroup", bwrap_module.SessionCgroup.create))
        spawn = asyncio.create_subprocess_exec

        async def timed_spawn(*a, **k):
            t = time.perf_counter()
            try:
                return await spawn(*a, **k)
            finally:
                self.now["spawn"] = self.now.get("spawn", 0.0) + time.perf_counter() - t
                self.now["spawned"] = time.monotonic()
        bwrap_module.asyncio.create_subprocess_exec = timed_spawn  # (the module's asyncio is the global one)
        self._spawn = spawn
        handshake = channel_module.RuntimeChannel.handshake

        async def timed_handshake(this, *a, **k):
            sent = time.monotonic()
            info = await handshake(this, *a, **k)
            done = time.monotonic()
            timing = info.get("timing") or {}
            if {"main", "init_read", "layers", "ready"} <= set(timing) and "spawned" in self.now:
                first = timing.get("started", timing["main"])  # the runtime's first statement
                self.now["jail + python"] = first - self.now["spawned"]
                self.now["imports"] = timing["main"] - first
                self.now["init sent"] = max(0.0, timing["init_read"] - max(timing["main"], sent))
                self.now["layers"] = timing["layers"] - timing["init_read"]
                self.now["shell"] = timing["ready"] - timing["layers"]
                self.now["reply"] = done - timing["ready"]
            else:
                self.now["handshake"] = done - sent
            return info
        channel_module.RuntimeChannel.handshake = timed_handshake

    def wrap(self, phase: str, fn):
        def timed(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.now[phase] = self.now.get(phase, 0.0) + time.perf_counter() - t
        return timed

    def restore(self) -> None:
        asyncio.create_subprocess_exec = self._spawn


async def run(tasks, n: int, data: Path, runtimes: list[Path], cpu_policy: str) -> list[list[dict[str, float]]]:
    """``n`` timed starts per runtime source, the sources taking turns start by start."""
    timer = Timer()
    data.mkdir(parents=True, exist_ok=True)
    config = ServerConfig(tasks_path=None, data_dir=data, sandbox={"limits": {"cpu_policy": cpu_policy}})
    store = TraceStore(data)
    laps: list[list[dict[str, float]]] = [[] for _ in runtimes]
    try:
        # the first round over the tasks builds their templates and compiles each runtime: not counted
        for i in range((n + len(tasks)) * len(runtimes)):
            which, k = i % len(runtimes), i // len(runtimes)
            task = tasks[k % len(tasks)]
            bwrap_module.RUNTIME_SCRIPT = runtimes[which]
            timer.now = {}
            t = time.perf_counter()
            episode, _ = await Episode.start(f"bench-{i}", task, store, config.sandbox, EpisodeConfig())
            total = time.perf_counter() - t
            await episode.close()
            if k < len(tasks):
                continue
            lap = {name: v for name, v in timer.now.items() if name != "spawned"}
            lap["total"] = total
            lap["episode"] = total - sum(v for name, v in lap.items() if name != "total")
            laps[which].append(lap)
            await asyncio.sleep(0.2)
    finally:
        timer.restore()
        bwrap_module.RUNTIME_SCRIPT = runtimes[0]
    return laps


def report(title: str, laps: list[dict[str, float]]) -> float:
    print(f"\n{title}")
    print(f"{'phase':14}{'p50 (ms)':>10}{'p90 (ms)':>10}{'share':>8}")
    total = statistics.median(lap["total"] for lap in laps)
    for phase in PHASES:
        xs = [lap.get(phase, 0.0) for lap in laps]
        print(f"{phase:14}{pct(xs, 0.5):>10.1f}{pct(xs, 0.9):>10.1f}{statistics.median(xs) / total:>8.0%}")
    return pct([lap["total"] for lap in laps], 0.5)


def runtime_at(rev: str, folder: Path) -> Path:
    """``sandbox/runtime.py`` as of git revision ``rev``, written under ``folder``."""
    source = subprocess.run(["git", "show", f"{rev}:sandbox/runtime.py"], cwd=ROOT, check=True,
                            capture_output=True).stdout
    path = folder / "runtime.py"
    path.write_bytes(source)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_tasks = ROOT / ".cache/demo-tasks-v3/tasks.jsonl"
    parser.add_argument("--tasks", type=Path, default=default_tasks if default_tasks.exists() else None)
    parser.add_argument("--resets", type=int, default=30)
    parser.add_argument("--baseline", metavar="REV",
                        help="also time starts with the runtime of this git revision, alternating with the current")
    parser.add_argument("--cpu-policy", choices=("idle", "normal"), default="idle",
                        help="the sandboxes' CPU policy (idle: a server's default). From its layers on, a runtime "
                             "at idle priority waits for every other process: on a busy machine, normal shows "
                             "the start's own cost")
    args = parser.parse_args()
    tasks = load_tasks(args.tasks or demo_tasks_file())
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="bench-cold-reset-") as tmp:
        runtimes = [bwrap_module.RUNTIME_SCRIPT]
        if args.baseline:
            runtimes.append(runtime_at(args.baseline, Path(tmp)))
        laps = asyncio.run(run(tasks, args.resets, Path(tmp) / "data", runtimes, args.cpu_policy))
    print(f"\ncold episode start on bwrap (CPU policy {args.cpu_policy}), {len(tasks)} tasks in turn, "
          f"{args.resets} starts per runtime, one at a "
          f"time (load average before: {load}; after: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"pipe round trip now: {pipe_round_trip_us():.1f} us)")
    if args.baseline:
        report(f"runtime of {args.baseline}", laps[1])
    p50 = report("runtime of the working tree" if args.baseline else "the runtime", laps[0])
    print(f"target: cold start p50 at most 50 ms idle: {p50:.1f} ms  {'met' if p50 <= 50 else 'NOT met'}")


if __name__ == "__main__":
    main()
