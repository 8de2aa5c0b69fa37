"""Env-server benchmark on loopback: step latency over /ws and /mux, reset latency, concurrency sweep.

Starts the real server (``env-server serve``, bwrap backend) on the demo task and
prints the figures side by side, one column per server setting:

* ``trace-diffs=all`` / ``trace-diffs=edits``: the server's defaults otherwise (sandboxes
  at idle CPU priority, ``--sandbox-cpu idle``);
* ``cpu=normal``: trace-diffs=edits with ``--sandbox-cpu normal``, sandboxes competing
  with the server for the CPU as equals.

Usage:

    python bench/bench_env_server.py [--steps 1000] [--sweep 8,64,256] [--repeat 5] [--columns all,edits,normal]

Each sweep point runs ``--repeat`` times on the same server (fresh sessions each time): the
throughput printed is the median, with the range; p99 and errors cover every run. The load
generator shares the machine (on uvloop, to take as little of it as it can).

Targets (one replica, 2 cores): step p50 <= 1 ms at low load; >= 3000 steps/s
at 64 sessions; 256 sessions with zero errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import websockets

try:
    import uvloop

    run_loop = uvloop.run
except ImportError:  # the env extra brings uvloop; without it the client is heavier
    run_loop = asyncio.run

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import ms_pct as pct  # noqa: E402
from machine import pipe_round_trip_us  # noqa: E402

from env_client.local_server import LocalEnvServer, start_env_server  # noqa: E402
from task_factory.demo_task import demo_tasks_file  # noqa: E402

TRUE = {"type": "call_tool", "tool_name": "bash", "arguments": {"command": "true"}}


def start_server(tasks: Path, data: Path, max_sessions: int, trace_diffs: str,
                 sandbox_cpu: str = "idle") -> LocalEnvServer:
    return start_env_server(tasks, data_dir=data, startup_timeout_s=60, stop_grace_s=60,
                            extra_args=["--max-sessions", str(max_sessions), "--max-steps", "100000",
                                        "--trace-diffs", trace_diffs, "--sandbox-cpu", sandbox_cpu])


async def ws_latency(url: str, n: int) -> tuple[list[float], list[float]]:
    resets, steps = [], []
    async with websockets.connect(url.replace("http", "ws") + "/ws", max_size=None) as ws:
        for _ in range(3):
            t = time.perf_counter()
            await ws.send(json.dumps({"type": "reset"}))
            json.loads(await ws.recv())
            resets.append(time.perf_counter() - t)
        frame = json.dumps({"type": "step", "data": TRUE})
        for _ in range(n):
            t = time.perf_counter()
            await ws.send(frame)
            await ws.recv()
            steps.append(time.perf_counter() - t)
    return resets, steps


async def mux_latency(url: str, n: int) -> list[float]:
    steps = []
    async with websockets.connect(url.replace("http", "ws") + "/mux", max_size=None) as ws:
        await ws.send(json.dumps({"request_id": "r", "session_id": "s", "type": "reset", "data": {}}))
        await ws.recv()
        for i in range(n):
            t = time.perf_counter()
            await ws.send(json.dumps({"request_id": str(i), "session_id": "s", "type": "step", "data": TRUE}))
            await ws.recv()
            steps.append(time.perf_counter() - t)
    return steps


async def sweep(url: str, sessions: int, steps: int) -> dict[str, float]:
    """``sessions`` sessions over one /mux connection, each doing ``steps`` sequential steps."""
    errors = 0
    lat: list[float] = []
    waiters: dict[str, asyncio.Future] = {}
    async with websockets.connect(url.replace("http", "ws") + "/mux", max_size=None) as ws:
        async def reader() -> None:
            async for raw in ws:
                frame = json.loads(raw)
                fut = waiters.pop(frame["request_id"], None)
                if fut is not None:
                    fut.set_result(frame)

        async def req(rid: str, sid: str, type_: str, data: dict) -> dict:
            fut = asyncio.get_running_loop().create_future()
            waiters[rid] = fut
            await ws.send(json.dumps({"request_id": rid, "session_id": sid, "type": type_, "data": data}))
            return await asyncio.wait_for(fut, 600)

        pump = asyncio.create_task(reader())
        resets = await asyncio.gather(*(req(f"r{i}", f"s{i}", "reset", {}) for i in range(sessions)))
        errors += sum(r["type"] == "error" for r in resets)

        async def session(i: int) -> None:
            nonlocal errors
            for k in range(steps):
                t = time.perf_counter()
                r = await req(f"s{i}-{k}", f"s{i}", "step", TRUE)
                lat.append(time.perf_counter() - t)
                errors += r["type"] == "error" or "error_kind" in r["data"].get("metadata", {})

        t0 = time.perf_counter()
        await asyncio.gather(*(session(i) for i in range(sessions)))
        wall = time.perf_counter() - t0
        await asyncio.gather(*(req(f"c{i}", f"s{i}", "close", {}) for i in range(sessions)))
        pump.cancel()
    return {"sessions": sessions, "steps_per_s": len(lat) / wall, "p50_ms": pct(lat, 0.5),
            "p99_ms": pct(lat, 0.99), "errors": errors}


def repeated_sweep(url: str, sessions: int, steps: int, repeat: int) -> dict[str, float]:
    runs = [run_loop(sweep(url, sessions, steps)) for _ in range(repeat)]
    rates = sorted(r["steps_per_s"] for r in runs)
    return {"sessions": sessions, "steps_per_s": statistics.median(rates), "min": rates[0], "max": rates[-1],
            "p99_ms": max(r["p99_ms"] for r in runs), "errors": sum(r["errors"] for r in runs)}


COLUMNS = {  # name: (--trace-diffs, --sandbox-cpu)
    "all": ("all", "idle"), "edits": ("edits", "idle"), "normal": ("edits", "normal"),
}
TITLES = {"all": "trace-diffs=all", "edits": "trace-diffs=edits", "normal": "edits, cpu=normal"}


def run_mode(tasks: Path, column: str, n: int, sweep_sizes: list[int], sweep_steps: int,
             repeat: int) -> dict:
    trace_diffs, sandbox_cpu = COLUMNS[column]
    with tempfile.TemporaryDirectory() as data:
        server = start_server(tasks, Path(data), max(sweep_sizes + [8]) + 4, trace_diffs, sandbox_cpu)
        url = server.url
        try:
            resets, ws_steps = run_loop(ws_latency(url, n))
            mux_steps = run_loop(mux_latency(url, n))
            rows = [repeated_sweep(url, s, sweep_steps, repeat) for s in sweep_sizes]
        finally:
            server.stop()
    return {"reset_ms": statistics.median(resets) * 1000, "ws": (pct(ws_steps, .5), pct(ws_steps, .99)),
            "mux": (pct(mux_steps, .5), pct(mux_steps, .99)), "sweep": rows}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--sweep", default="8,64,256")
    ap.add_argument("--sweep-steps", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=5, help="runs per sweep point (median reported)")
    ap.add_argument("--columns", default="all,edits,normal",
                    help=f"server settings to compare, of {','.join(COLUMNS)}")
    a = ap.parse_args()
    tasks = demo_tasks_file()
    sizes = [int(x) for x in a.sweep.split(",") if x]
    modes = [m for m in a.columns.split(",") if m]
    unknown = [m for m in modes if m not in COLUMNS]
    if unknown:
        ap.error(f"unknown column(s) {unknown}; choose from {list(COLUMNS)}")
    rtt_before = pipe_round_trip_us()
    results = {m: run_mode(tasks, m, a.steps, sizes, a.sweep_steps, a.repeat) for m in modes}
    rtt_after = pipe_round_trip_us()
    print(f"env-server bench: bash('true'), loopback, {os.cpu_count()} cores, {a.steps} sequential steps, "
          f"sweep points x{a.repeat}")
    print(f"{'':34}" + "".join(f"{TITLES[m]:>22}" for m in modes))
    print(f"{'reset p50 (ms)':34}" + "".join(f"{results[m]['reset_ms']:>22.1f}" for m in modes))
    for k in ("ws", "mux"):
        print(f"{'step /' + k + ' p50 / p99 (ms)':34}"
              + "".join(f"{results[m][k][0]:>13.3f} /{results[m][k][1]:>7.3f}" for m in modes))
    for i, s in enumerate(sizes):
        print(f"{f'{s} sessions x {a.sweep_steps}: steps/s, p99, err':34}"
              + "".join(f"{results[m]['sweep'][i]['steps_per_s']:>9.0f},{results[m]['sweep'][i]['p99_ms']:>7.1f}ms,"
                        f"{results[m]['sweep'][i]['errors']:>4}" for m in modes))
        print(f"{'  (steps/s range over runs)':34}"
              + "".join(f"{results[m]['sweep'][i]['min']:>13.0f} -{results[m]['sweep'][i]['max']:>6.0f}" for m in modes))
    print(f"machine: pipe ping-pong round trip {rtt_before:.1f} us before, {rtt_after:.1f} us after "
          "(a quiet 2-core VM here: ~7 us)")
    print("targets: step p50 <= 1 ms; >= 3000 steps/s at 64 sessions; 0 errors at 256 sessions")


if __name__ == "__main__":
    main()
