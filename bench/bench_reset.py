"""Reset latency through the real env server: cold vs warm (the warm pool), bwrap vs an image task.

Starts ``env-server serve`` once per column and resets over ``/ws`` (each reset replaces the
session's episode, as a trainer's does), then many sessions at once:

* ``bwrap cold`` / ``bwrap warm``: the demo task on bwrap, with no pool / ``--warm-pool``;
* ``image cold`` / ``image warm``: the toolz SWE-bench-layout task (docker/swebench_layout.py,
  built offline) on docker, image present, with no pool / ``--warm-pool``;
* ``image no-pull``: ``image cold`` with pull-on-demand off (``sandbox.backend.images.pull=false``): the
  same figures as ``image cold`` mean pull-on-demand costs a present image nothing.

Rows: sequential reset p50/p95 (one session, a pause between resets so the pool refills, as
between a trainer's rollouts), then resets/s and p50 with 8 and 32 sessions resetting at once.

Usage: python bench/bench_reset.py [--resets 30] [--rounds 3] [--columns bwrap-cold,bwrap-warm,...]

Targets: a warm reset p50 under 20 ms on bwrap and under 50 ms for an image task.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import websockets

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import ms_pct as pct  # noqa: E402
from machine import pipe_round_trip_us  # noqa: E402

from env_client.local_server import start_env_server  # noqa: E402
from task_factory.demo_task import demo_tasks_file  # noqa: E402

COLUMNS = {
    "bwrap-cold": ("bwrap", []),
    "bwrap-warm": ("bwrap", ["--warm-pool", "32", "--set", "warm_per_task=32"]),
    "image-cold": ("image", []),
    "image-warm": ("image", ["--warm-pool", "32", "--set", "warm_per_task=32"]),
    "image-no-pull": ("image", ["--set", "sandbox.backend.images.pull=false"]),
}


def image_task_file(out: Path) -> Path:
    """The toolz SWE-bench-layout instance as a task file (its image built offline, or reused)."""
    spec = importlib.util.spec_from_file_location("swebench_layout", ROOT / "docker" / "swebench_layout.py")
    layout = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = layout
    spec.loader.exec_module(layout)
    (out / "rows.jsonl").write_text(json.dumps(layout.build(layout.PROJECTS["toolz"], log=print)) + "\n")
    from task_factory.cli import main as task_factory

    if task_factory(["import", str(out / "rows.jsonl"), "--format", "swebench", "--out", str(out / "tasks")]) != 0:
        raise SystemExit("could not import the toolz layout row")
    return out / "tasks" / "tasks.jsonl"


async def sequential(url: str, n: int, pause_s: float) -> list[float]:
    out = []
    async with websockets.connect(url.replace("http", "ws") + "/ws", max_size=None) as ws:
        for _ in range(n):
            await asyncio.sleep(pause_s)
            t = time.perf_counter()
            await ws.send(json.dumps({"type": "reset"}))
            reply = json.loads(await ws.recv())
            out.append(time.perf_counter() - t)
            if reply["type"] != "observation":
                raise RuntimeError(f"reset failed: {reply}")
    return out


async def burst(url: str, sessions: int, rounds: int, pause_s: float) -> tuple[float, list[float], int]:
    """``sessions`` connections resetting at once, ``rounds`` times: (resets/s, latencies, errors)."""
    lat: list[float] = []
    errors = 0
    conns = [await websockets.connect(url.replace("http", "ws") + "/ws", max_size=None) for _ in range(sessions)]
    try:
        async def one(ws) -> None:
            nonlocal errors
            t = time.perf_counter()
            await ws.send(json.dumps({"type": "reset"}))
            reply = json.loads(await ws.recv())
            lat.append(time.perf_counter() - t)
            errors += reply["type"] != "observation"

        busy = 0.0
        for _ in range(rounds):
            await asyncio.sleep(pause_s)  # the pool refills between a trainer's groups
            t = time.perf_counter()
            await asyncio.gather(*(one(ws) for ws in conns))
            busy += time.perf_counter() - t
    finally:
        await asyncio.gather(*(ws.close() for ws in conns))
    return sessions * rounds / busy, lat, errors


def run_column(name: str, tasks: Path, data: Path, args: argparse.Namespace) -> dict[str, str]:
    kind, extra = COLUMNS[name]
    backend = "docker" if kind == "image" else "bwrap"
    server = start_env_server(tasks, backend=backend, data_dir=data / name, startup_timeout_s=120, stop_grace_s=60,
                              extra_args=["--max-sessions", "64", "--set", f"sandbox.cache_dir={data / 'cache'}",
                                          *extra])
    try:
        asyncio.run(sequential(server.url, 3, 0.5))  # templates, derived image, first pool fill
        seq = asyncio.run(sequential(server.url, args.resets, args.pause))
        row = {"reset p50 (ms)": f"{pct(seq, 0.5):.1f}", "reset p95 (ms)": f"{pct(seq, 0.95):.1f}"}
        for sessions in (8, 32):
            rate, lat, errors = asyncio.run(burst(server.url, sessions, args.rounds, args.pause * 4))
            row[f"{sessions} at once: resets/s"] = f"{rate:.1f}"
            row[f"{sessions} at once: p50 (ms)"] = f"{pct(lat, 0.5):.0f}"
            row[f"{sessions} at once: errors"] = str(errors)
        return row
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--resets", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pause", type=float, default=0.25, help="seconds between sequential resets")
    parser.add_argument("--columns", default=",".join(COLUMNS))
    args = parser.parse_args()
    columns = [c for c in args.columns.split(",") if c]
    unknown = [c for c in columns if c not in COLUMNS]
    if unknown:
        raise SystemExit(f"unknown columns {unknown}; choose from {', '.join(COLUMNS)}")
    with tempfile.TemporaryDirectory(prefix="bench-reset-") as tmp:
        data = Path(tmp)
        files = {"bwrap": demo_tasks_file()}
        if any(COLUMNS[c][0] == "image" for c in columns):
            (data / "layout").mkdir()
            files["image"] = image_task_file(data / "layout")
        results = {}
        for name in columns:
            print(f"[bench_reset] {name} ...", flush=True)
            results[name] = run_column(name, files[COLUMNS[name][0]], data, args)
    rows = list(next(iter(results.values())))
    width = max(len(r) for r in rows)
    print(f"\nreset latency through env-server /ws (pipe round trip now: {pipe_round_trip_us():.1f} us; "
          f"{args.resets} sequential resets, {args.rounds} rounds at once)")
    print(" " * width + "".join(f"{c:>15}" for c in columns))
    for r in rows:
        print(f"{r:{width}}" + "".join(f"{results[c][r]:>15}" for c in columns))
    warm = [c for c in columns if c.endswith("-warm")]
    for c in warm:
        target = 20 if c.startswith("bwrap") else 50
        p50 = float(results[c]["reset p50 (ms)"])
        print(f"{c}: reset p50 {p50:.1f} ms, target < {target} ms: {'met' if p50 < target else 'NOT met'}")
    if "image-cold" in results and "image-no-pull" in results:
        a, b = (statistics.fmean([float(results[c][k]) for k in ("reset p50 (ms)",)]) for c in ("image-cold",
                                                                                                 "image-no-pull"))
        print(f"pull-on-demand on a present image: reset p50 {a:.1f} ms vs {b:.1f} ms with pulls off")


if __name__ == "__main__":
    main()
