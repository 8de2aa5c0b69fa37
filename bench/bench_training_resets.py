"""Resets at the pace training asks for, through the real env server: warm pool off and on, side by side.

Two patterns, each on its own pair of servers started one after the other and alternated
(off, on, off, on: the pairs see the same load), every reset over ``/ws`` with no task named
so the server's round robin picks it, and one ``bash true`` step right after each reset:

* **rotating**: one session resets ``--resets`` times in turn over the task file's tasks (a
  replica serving many tasks); ``--pause`` between a step and the next reset (a rollout's length);
  pool on: ``--warm-pool 16 --prefetch-ahead 2``;
* **group bursts**: ``--groups`` GRPO groups, each ``--group`` sessions resetting at once on one
  task (``--group-size``: the round robin hands each task to that many resets in a row), then
  stepping at once, ``--group-pause`` between groups; pool on:
  ``--warm-pool 2*group --prefetch-ahead 1 --group-size group``.

Rows per column: reset p50/p90/p99, the first step's p50/p99 and the second step's p50 (ms).
The closing lines check the targets: the pool never slower than cold (reset p50 and p90), a warm
burst's p99 at most a third of the cold one's, and no set-up left to the first step (its p50 at
most 2 ms over the second step's; in a burst, the steps of a warm group run at once while a cold
group's arrive one by one, so its first steps compare with its own second ones, not across).

Usage: python bench/bench_training_resets.py [--tasks FILE] [--rounds 2] [--resets 24] [--groups 6] [--group 8]
Default tasks: the demo's six tasks (.cache/demo-tasks-v3, made by ``make demo``), else the six demo task.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
import websockets

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import ms_pct as pct  # noqa: E402
from machine import pipe_round_trip_us  # noqa: E402

from env_client.local_server import start_env_server  # noqa: E402
from task_factory.demo_task import demo_tasks_file  # noqa: E402

STEP = {"type": "step", "data": {"type": "call_tool", "tool_name": "bash", "arguments": {"command": "true"}}}


async def _reset_and_step(ws) -> tuple[float, float, float]:
    """A reset, then two steps: (reset, first step, second step) seconds."""
    t = time.perf_counter()
    await ws.send(json.dumps({"type": "reset"}))
    reply = json.loads(await ws.recv())
    out = [time.perf_counter() - t]
    if reply["type"] != "observation":
        raise RuntimeError(f"reset failed: {reply}")
    for _ in range(2):
        t = time.perf_counter()
        await ws.send(json.dumps(STEP))
        reply = json.loads(await ws.recv())
        if reply["type"] != "observation":
            raise RuntimeError(f"step failed: {reply}")
        out.append(time.perf_counter() - t)
    return out[0], out[1], out[2]


async def rotating(url: str, resets: int, pause_s: float) -> list[tuple[float, float, float]]:
    out = []
    async with websockets.connect(url.replace("http", "ws") + "/ws", max_size=None) as ws:
        for _ in range(resets):
            out.append(await _reset_and_step(ws))
            await asyncio.sleep(pause_s)
    return out


async def bursts(url: str, groups: int, group: int, pause_s: float) -> list[tuple[float, float, float]]:
    out = []
    conns = [await websockets.connect(url.replace("http", "ws") + "/ws", max_size=None) for _ in range(group)]
    try:
        for _ in range(groups):
            await asyncio.sleep(pause_s)
            out += await asyncio.gather(*(_reset_and_step(ws) for ws in conns))
    finally:
        await asyncio.gather(*(ws.close() for ws in conns))
    return out


def serve(tasks: Path, data: Path, name: str, extra: list[str]):
    return start_env_server(tasks, backend="bwrap", data_dir=data / name, startup_timeout_s=120, stop_grace_s=60,
                            extra_args=["--max-sessions", "64", "--set", f"sandbox.cache_dir={data / 'cache'}",
                                        *extra])


def claims(url: str) -> dict[str, float]:
    """The pool's claims so far, by how they were served (``/metrics``; empty with no pool)."""
    text = httpx.get(url + "/metrics", timeout=30).text
    return {m.group(1): float(m.group(2)) for m in re.finditer(r'^envserver_pool_claims_total\{how="(\w+)"\} (\S+)$',
                                                               text, re.M)}


def column(tasks: Path, data: Path, name: str, extra: list[str], run, warmup, served: Counter
           ) -> list[tuple[float, float, float]]:
    server = serve(tasks, data, name, extra)
    try:
        asyncio.run(warmup(server.url))  # templates made, first fills (a whole group: the round robin stays aligned)
        before = claims(server.url)
        out = asyncio.run(run(server.url))
        served.update({k: v - before.get(k, 0) for k, v in claims(server.url).items()})
        return out
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_tasks = ROOT / ".cache/demo-tasks-v3/tasks.jsonl"
    parser.add_argument("--tasks", type=Path, default=default_tasks if default_tasks.exists() else None)
    parser.add_argument("--rounds", type=int, default=2, help="off/on pairs per pattern, alternated")
    parser.add_argument("--resets", type=int, default=24)
    parser.add_argument("--pause", type=float, default=0.25, help="seconds from a step to the next reset")
    parser.add_argument("--groups", type=int, default=6)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--group-pause", type=float, default=2.0)
    parser.add_argument("--patterns", default="rotating,bursts")
    args = parser.parse_args()
    tasks = args.tasks or Path(demo_tasks_file())
    g = args.group
    patterns = {
        "rotating": ([], ["--warm-pool", "16", "--prefetch-ahead", "2"],
                     lambda url: rotating(url, args.resets, args.pause), lambda url: rotating(url, 3, 0.2)),
        "bursts": (["--group-size", str(g)],
                   ["--warm-pool", str(2 * g), "--set", f"warm_per_task={g}", "--prefetch-ahead", "1",
                    "--group-size", str(g)],
                   lambda url: bursts(url, args.groups, g, args.group_pause), lambda url: bursts(url, 1, g, 0.0)),
    }
    chosen = [p for p in args.patterns.split(",") if p]
    results: dict[str, dict[str, list[tuple[float, float, float]]]] = {}
    served: dict[str, Counter] = {}
    with tempfile.TemporaryDirectory(prefix="bench-training-resets-") as tmp:
        data = Path(tmp)
        for pattern in chosen:
            off, on, run, warmup = patterns[pattern]
            got = results[pattern] = {"off": [], "on": []}
            served[pattern] = Counter()
            for r in range(args.rounds):
                for label, extra in (("off", off), ("on", on)):
                    print(f"[bench_training_resets] {pattern} pool {label}, round {r + 1} ...", flush=True)
                    got[label] += column(tasks, data, f"{pattern}-{label}-{r}", extra, run, warmup, served[pattern])
    print(f"\nresets through env-server /ws, bwrap, tasks: {tasks} (pipe round trip now: "
          f"{pipe_round_trip_us():.1f} us; {args.rounds} rounds per column, alternated)")
    rows = {"reset p50": (0, 0.5), "reset p90": (0, 0.9), "reset p99": (0, 0.99), "first step p50": (1, 0.5),
            "first step p99": (1, 0.99), "second step p50": (2, 0.5)}
    header = [f"{p} {label}" for p in results for label in ("off", "on")]
    print(f"{'(ms)':16}" + "".join(f"{h:>16}" for h in header))
    for row, (i, q) in rows.items():
        cells = [f"{pct([x[i] for x in results[p][label]], q):.1f}" for p in results for label in ("off", "on")]
        print(f"{row:16}" + "".join(f"{c:>16}" for c in cells))
    print(f"{'resets':16}" + "".join(f"{len(results[p][label]):>16}" for p in results for label in ("off", "on")))
    for p in results:
        off, on = results[p]["off"], results[p]["on"]
        print(f"{p} pool on: claims " + ", ".join(f"{how} {int(served[p][how])}" for how in ("warm", "raced", "cold")))
        col = lambda xs, i, q: pct([x[i] for x in xs], q)  # noqa: E731
        never = col(on, 0, 0.5) <= col(off, 0, 0.5) and col(on, 0, 0.9) <= col(off, 0, 0.9)
        print(f"{p}: pool never slower than cold (reset p50, p90): {'met' if never else 'NOT met'}")
        # deferred set-up would make a claimed session's first step cost more than its second
        for label, xs in (("off", off), ("on", on)):
            extra = col(xs, 1, 0.5) - col(xs, 2, 0.5)
            print(f"{p} pool {label}: first step p50 {col(xs, 1, 0.5):.1f} ms, second {col(xs, 2, 0.5):.1f} ms "
                  f"(first - second {extra:+.1f} ms; no deferred set-up within 2 ms: {'met' if extra <= 2 else 'NOT met'})")
        if p == "bursts":
            third = col(on, 0, 0.99) <= col(off, 0, 0.99) / 3
            print(f"bursts: warm p99 {col(on, 0, 0.99):.0f} ms vs cold p99 {col(off, 0, 0.99):.0f} ms, "
                  f"target at most a third: {'met' if third else 'NOT met'}")


if __name__ == "__main__":
    main()
