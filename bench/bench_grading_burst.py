"""Graded submissions per minute: a GRPO group's submits at once on one replica, with a bystander.

Starts ``env-server serve`` (bwrap) on a task file (default: the demo's six tasks,
``.cache/demo-tasks-v3`` from ``make demo``), opens ``--group`` sessions over the client library,
one task per session in turn, applies the gold patch in half of them and a wrong edit in the
others, then submits them all at once (``--bursts`` times). Meanwhile a bystander session runs
``true`` steps in a loop. Reports:

* gradings per minute (the burst's submits over its wall time) and each submit's latency p50 /
  p99 (its wait in the grading queue, its grading, and any GRADER_BUSY refusal the client
  library waited out and sent again);
* the bystander's step p50 / p99 idle (before any burst) and during the bursts;
* the rewards (gold 1.0, wrong 0.0: a mismatch is printed loudly) and the queue's refusals.

Usage: python bench/bench_grading_burst.py [--tasks FILE] [--group 16] [--bursts 2] [--max-gradings N]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import ms_pct as pct  # noqa: E402
from machine import pipe_round_trip_us  # noqa: E402

from env_client import WsSession  # noqa: E402
from env_client.local_server import start_env_server  # noqa: E402
from verifier.task import load_tasks  # noqa: E402


async def prepared(url: str, task, gold: bool) -> WsSession:
    """A session on ``task`` whose workspace holds the gold patch, or a wrong edit."""
    s = WsSession(url)
    await s.__aenter__()
    await s.reset(instance_id=task.instance_id)
    if gold:
        tag = "PATCH_" + secrets.token_hex(6)
        cmd = f"cat > /tmp/gold.diff <<'{tag}'\n{task.patch}\n{tag}\ngit apply /tmp/gold.diff && echo applied"
    else:
        cmd = "echo '# not a fix' >> README.md 2>/dev/null || echo '# not a fix' > NOTES.txt; echo applied"
    obs = await s.call_tool("bash", {"command": cmd})
    if "applied" not in str(obs.get("output", "")):
        raise RuntimeError(f"could not prepare {task.instance_id}: {obs.get('output')}")
    return s


async def bystander(url: str, stop: asyncio.Event, out: list[float]) -> None:
    """``true`` steps in a loop (a new episode every 50 steps: the step budget's last one is graded)."""
    async with WsSession(url) as s:
        while not stop.is_set():
            await s.reset()
            for _ in range(50):
                if stop.is_set():
                    break
                t = time.perf_counter()
                await s.call_tool("bash", {"command": "true"})
                out.append(time.perf_counter() - t)
                await asyncio.sleep(0.05)


async def burst(url: str, tasks: list, group: int) -> tuple[float, list[float], list[tuple[bool, float]]]:
    sessions = await asyncio.gather(*(prepared(url, tasks[i % len(tasks)], gold=i % 2 == 0) for i in range(group)))
    latencies: list[float] = []
    rewards: list[tuple[bool, float]] = []

    async def submit(i: int, s: WsSession) -> None:
        t = time.perf_counter()
        obs = await s.call_tool("submit", {})
        latencies.append(time.perf_counter() - t)
        rewards.append((i % 2 == 0, float(obs.get("reward") or 0.0)))

    start = time.perf_counter()
    try:
        await asyncio.gather(*(submit(i, s) for i, s in enumerate(sessions)))
    finally:
        wall = time.perf_counter() - start
        await asyncio.gather(*(s.close() for s in sessions))
    return wall, latencies, rewards


async def run(url: str, tasks: list, group: int, bursts: int) -> dict:
    idle: list[float] = []
    stop = asyncio.Event()
    watcher = asyncio.create_task(bystander(url, stop, idle))
    await asyncio.sleep(5.0)
    stop.set()
    await watcher
    during: list[float] = []
    stop = asyncio.Event()
    watcher = asyncio.create_task(bystander(url, stop, during))
    walls, latencies, rewards = [], [], []
    try:
        for _ in range(bursts):
            wall, lat, rew = await burst(url, tasks, group)
            walls.append(wall)
            latencies += lat
            rewards += rew
    finally:
        stop.set()
        await watcher
    return {"walls": walls, "latencies": latencies, "rewards": rewards, "idle": idle, "during": during}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_tasks = ROOT / ".cache/demo-tasks-v3/tasks.jsonl"
    parser.add_argument("--tasks", type=Path, default=default_tasks)
    parser.add_argument("--group", type=int, default=16)
    parser.add_argument("--bursts", type=int, default=2)
    parser.add_argument("--max-gradings", type=int, default=0, help="the server's max_gradings (0: one per CPU)")
    args = parser.parse_args()
    if not args.tasks.exists():
        raise SystemExit(f"no task file at {args.tasks}: run `make demo` first, or pass --tasks FILE")
    tasks = [t for t in load_tasks(args.tasks) if t.patch.strip()]
    with tempfile.TemporaryDirectory(prefix="bench-grading-burst-") as tmp:
        server = start_env_server(args.tasks, backend="bwrap", data_dir=Path(tmp) / "data", startup_timeout_s=120,
                                  stop_grace_s=120, extra_args=["--max-sessions", "64", "--set",
                                                                f"max_gradings={args.max_gradings}"])
        try:
            got = asyncio.run(run(server.url, tasks, args.group, args.bursts))
            metrics = httpx.get(server.url + "/metrics", timeout=60).text
        finally:
            server.stop()
    refused = re.search(r"^envserver_grader_busy_total (\S+)$", metrics, re.M)
    wrong = [(gold, r) for gold, r in got["rewards"] if r != (1.0 if gold else 0.0)]
    per_min = 60 * args.group * len(got["walls"]) / sum(got["walls"])
    print(f"\ngraded submissions, bwrap, {len(tasks)} tasks, groups of {args.group} at once, {args.bursts} bursts "
          f"(pipe round trip now: {pipe_round_trip_us():.1f} us)")
    print(f"gradings per minute:        {per_min:.1f} (burst walls: {', '.join(f'{w:.1f} s' for w in got['walls'])})")
    print(f"submit latency p50 / p99:   {pct(got['latencies'], 0.5) / 1000:.1f} / {pct(got['latencies'], 0.99) / 1000:.1f} s")
    print(f"bystander step p50 / p99:   idle {pct(got['idle'], 0.5):.1f} / {pct(got['idle'], 0.99):.1f} ms, "
          f"during the bursts {pct(got['during'], 0.5):.1f} / {pct(got['during'], 0.99):.1f} ms "
          f"({len(got['during'])} steps)")
    print(f"GRADER_BUSY refusals:       {float(refused.group(1)) if refused else 0:.0f} (sent again by the client)")
    print(f"rewards: gold {statistics.fmean([r for g, r in got['rewards'] if g]):.2f}, "
          f"wrong {statistics.fmean([r for g, r in got['rewards'] if not g]):.2f}"
          + (f"  MISMATCH: {wrong}" if wrong else ""))


if __name__ == "__main__":
    main()
