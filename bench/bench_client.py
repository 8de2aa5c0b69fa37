"""Client-library overhead: env_client over /mux against hand-written WebSocket frames.

Starts the real server (``env-server serve``, bwrap backend, the demo task) on loopback and
runs, interleaved on the same server, the same /mux frames two ways:

* ``raw``: hand-written ``websockets`` code: one frame out, the reply in (one session, sequential
  steps), or a reader task matching replies to futures by request id (64 sessions);
* ``env_client``: ``ReplicaPool`` -> ``RemoteSession.call_tool`` (request ids, timeouts,
  backpressure, reconnect bookkeeping, typed errors, the episode recording).

Figures: p50 / p99 of one step (a cheap tool call, bash ``true``) with one session per side,
the two sides stepping in turns (each on its own socket) so that both see the same moments of
a shared machine; throughput with 64 concurrent sessions on one connection, the sides'
runs alternating (each starts once the server has closed the previous run's sessions); the
client process's CPU time per step (the server runs in its own process, so this is the
client's own cost: the median step's for one session, the run's total per step for 64).
Each figure is the median over ``--repeat`` runs.

    python bench/bench_client.py [--steps 2000] [--sessions 64] [--session-steps 50] [--repeat 5]

Target: the library within 10% of raw frames.
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

import httpx
import websockets

try:
    import uvloop

    run_loop = uvloop.run
except ImportError:  # the env extra brings uvloop; both sides of the comparison use the same loop
    run_loop = asyncio.run

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import ms_pct as pct  # noqa: E402
from machine import pipe_round_trip_us  # noqa: E402

from env_client import ClientConfig, ReplicaPool  # noqa: E402
from env_client.local_server import LocalEnvServer, start_env_server  # noqa: E402
from task_factory.demo_task import demo_tasks_file  # noqa: E402

TRUE = {"type": "call_tool", "tool_name": "bash", "arguments": {"command": "true"}}
INSTANCE = "six__demo-1"


def _mux(url: str) -> str:
    return url.replace("http", "ws") + "/mux"


def start_server(tasks: Path, data: Path, max_sessions: int) -> LocalEnvServer:
    """`env-server serve` on a free loopback port, healthy (its defaults, no step budget to speak of)."""
    return start_env_server(tasks, data_dir=data, startup_timeout_s=60, stop_grace_s=60,
                            extra_args=["--max-sessions", str(max_sessions), "--max-steps", "100000"])


# ------------------------------------------------------------------ raw frames


async def paired_latency(url: str, n: int) -> dict[str, tuple[list[float], list[float]]]:
    """One raw session and one env_client session, each on its own /mux socket, stepping in turns
    (which goes first alternates), so both see the same machine at the same moments.
    {side: (wall seconds per step, client CPU seconds per step)}."""
    out: dict[str, tuple[list[float], list[float]]] = {"raw": ([], []), "lib": ([], [])}
    pool = ReplicaPool([url], ClientConfig())
    try:
        async with websockets.connect(_mux(url), max_size=None, compression=None) as ws:
            await ws.send(json.dumps({"request_id": "r", "session_id": "s", "type": "reset",
                                      "data": {"instance_id": INSTANCE}}))
            await ws.recv()
            session, _ = await pool.open_session(instance_id=INSTANCE)

            async def raw_step(i: int) -> None:
                await ws.send(json.dumps({"request_id": str(i), "session_id": "s", "type": "step", "data": TRUE}))
                reply = json.loads(await ws.recv())
                assert reply["type"] == "observation", reply

            async def lib_step(i: int) -> None:
                await session.call_tool("bash", {"command": "true"})

            for i in range(n):
                for name, step in ((("raw", raw_step), ("lib", lib_step)) if i % 2 == 0
                                   else (("lib", lib_step), ("raw", raw_step))):
                    cpu, t = time.process_time(), time.perf_counter()
                    await step(i)
                    out[name][0].append(time.perf_counter() - t)
                    out[name][1].append(time.process_time() - cpu)
            await ws.send(json.dumps({"request_id": "c", "session_id": "s", "type": "close", "data": {}}))
            await ws.recv()
            await pool.release(session)
    finally:
        await pool.close()
    return out


async def raw_throughput(url: str, sessions: int, steps: int) -> tuple[float, float]:
    """`sessions` sessions on one connection, `steps` sequential steps each. (steps/s, CPU s per step)."""
    waiters: dict[str, asyncio.Future] = {}
    async with websockets.connect(_mux(url), max_size=None, compression=None) as ws:
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
            return await fut

        pump = asyncio.create_task(reader())
        await asyncio.gather(*(req(f"r{i}", f"s{i}", "reset", {"instance_id": INSTANCE}) for i in range(sessions)))

        async def session(i: int) -> None:
            for k in range(steps):
                reply = await req(f"s{i}-{k}", f"s{i}", "step", TRUE)
                assert reply["type"] == "observation", reply

        cpu, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(session(i) for i in range(sessions)))
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu
        await asyncio.gather(*(req(f"c{i}", f"s{i}", "close", {}) for i in range(sessions)))
        pump.cancel()
    return sessions * steps / wall, cpu / (sessions * steps)


# ------------------------------------------------------------------ the library


async def lib_throughput(url: str, sessions: int, steps: int) -> tuple[float, float]:
    pool = ReplicaPool([url], ClientConfig())
    try:
        opened = await asyncio.gather(*(pool.open_session(instance_id=INSTANCE) for _ in range(sessions)))

        async def session(s) -> None:
            for _ in range(steps):
                await s.call_tool("bash", {"command": "true"})

        cpu, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(session(s) for s, _ in opened))
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu
        await asyncio.gather(*(pool.release(s) for s, _ in opened))
    finally:
        await pool.close()
    return sessions * steps / wall, cpu / (sessions * steps)


# ------------------------------------------------------------------ the run


def settle(url: str, limit_s: float = 60.0) -> None:
    """Wait until the server has no live session (the last run's sandboxes are torn down)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        text = httpx.get(url + "/metrics", timeout=10).text
        active = [line.split()[-1] for line in text.splitlines() if line.startswith("envserver_sessions_active")]
        if active and float(active[0]) == 0:
            return
        time.sleep(0.2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2000, help="sequential steps per side per latency run")
    ap.add_argument("--sessions", type=int, default=64)
    ap.add_argument("--session-steps", type=int, default=50, help="steps per session per throughput run")
    ap.add_argument("--repeat", type=int, default=5, help="interleaved runs per figure (median reported)")
    a = ap.parse_args()
    tasks = demo_tasks_file()
    rtt_before = pipe_round_trip_us()
    figures: dict[str, dict[str, list[float]]] = {k: {"p50": [], "p99": [], "cpu_lat": [], "tput": [], "cpu_tput": []}
                                                   for k in ("raw", "lib")}
    with tempfile.TemporaryDirectory() as data:
        server = start_server(tasks, Path(data), a.sessions + 8)
        url = server.url
        try:
            run_loop(paired_latency(url, 50))  # warm up both paths (imports, sandbox caches)
            sides = {"raw": raw_throughput, "lib": lib_throughput}
            for _ in range(a.repeat):
                for name, (lat, cpu) in run_loop(paired_latency(url, a.steps)).items():
                    figures[name]["p50"].append(pct(lat, 0.5))
                    figures[name]["p99"].append(pct(lat, 0.99))
                    figures[name]["cpu_lat"].append(statistics.median(cpu) * 1e6)
            for r in range(a.repeat):  # then throughput, each run on a server done closing the last run's sessions
                for name in (("raw", "lib") if r % 2 == 0 else ("lib", "raw")):
                    settle(url)
                    rate, cpu_step = run_loop(sides[name](url, a.sessions, a.session_steps))
                    figures[name]["tput"].append(rate)
                    figures[name]["cpu_tput"].append(cpu_step * 1e6)
        finally:
            server.stop()
    rtt_after = pipe_round_trip_us()
    med = {k: {f: statistics.median(v) for f, v in figs.items()} for k, figs in figures.items()}

    def row(label: str, key: str, fmt: str, higher_is_better: bool = False) -> str:
        raw, lib = med["raw"][key], med["lib"][key]
        delta = (raw / lib - 1) if higher_is_better else (lib / raw - 1)
        return f"{label:38}{raw:>12{fmt}}{lib:>14{fmt}}{delta * 100:>+11.1f}%"

    loop = "uvloop" if run_loop is not asyncio.run else "asyncio"
    print(f"client bench: bash('true') over /mux, loopback, {os.cpu_count()} cores, {loop}; medians of "
          f"{a.repeat} runs ({a.steps} steps per side per latency run)")
    print(f"{'':38}{'raw frames':>12}{'env_client':>14}{'overhead':>12}")
    print(row("step p50, 1 session (ms)", "p50", ".3f"))
    print(row("step p99, 1 session (ms)", "p99", ".3f"))
    print(row("client CPU per step, 1 session (us)", "cpu_lat", ".0f"))  # the median step's
    print(row(f"throughput, {a.sessions} sessions (steps/s)", "tput", ".0f", higher_is_better=True))
    print(row(f"client CPU per step, {a.sessions} sessions (us)", "cpu_tput", ".0f"))
    spread = {k: (min(v["tput"]), max(v["tput"])) for k, v in figures.items()}
    print(f"{'  (throughput range over runs)':38}{spread['raw'][0]:>6.0f}-{spread['raw'][1]:<5.0f}"
          f"{spread['lib'][0]:>8.0f}-{spread['lib'][1]:<5.0f}")
    print(f"machine: pipe ping-pong round trip {rtt_before:.1f} us before, {rtt_after:.1f} us after "
          "(a quiet 2-core VM here: ~7 us)")
    print("target: env_client within 10% of raw frames (p50 latency and throughput)")


if __name__ == "__main__":
    main()
