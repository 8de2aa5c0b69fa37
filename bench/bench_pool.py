"""Warm pool benchmark: what a reset costs cold (``open_sandbox``) and warm (``WarmPool``), side by side.

    python bench/bench_pool.py [--iterations 40] [--concurrency 8,32] [--per-worker 4] [--backends bwrap]

Prints, per backend, in one table:
* reset-equivalent latency, one at a time: open a session + ``echo ok`` + close (p50/p95), and the
  open alone; warm: the pool is primed and its refill has finished before each timed reset (a
  server whose episodes outlast a start sees exactly that);
* throughput (resets per second) with 8 and 32 workers each doing resets back to back, and the
  share of warm claims: past its primed jails a pool cannot beat the rate jails start at, it
  only takes the start off the reset's path;
* what an idle pooled jail holds on the host: processes, RSS and PSS (bwrap: measured here);
* the target: a warm bwrap reset p50 under 20 ms, with PASS/MISS.

``bench_pool(...)`` (one backend, a dict of figures) and ``format_table(...)`` are what a bench
script calls; ``main()`` is the command line.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_sandbox import make_repo, pct, skip_reason  # noqa: E402
from machine import pipe_round_trip_us  # noqa: E402

from sandbox import SandboxConfig, WarmPool, WorkspaceSpec, open_sandbox  # noqa: E402

WARM_TARGET_MS = 20.0  # bwrap warm reset-equivalent p50


async def _reset(open_one) -> tuple[float, float]:
    """One reset-equivalent: (open seconds, open + `echo ok` + close seconds)."""
    t = time.perf_counter()
    sb = await open_one()
    opened = time.perf_counter() - t
    try:
        res = await sb.run("echo ok")
        assert res.ok and res.output.strip() == "ok", res
    finally:
        await sb.close()
    return opened, time.perf_counter() - t


async def _latency(spec: WorkspaceSpec, config: SandboxConfig, n: int) -> dict[str, Any]:
    cold = [await _reset(lambda: open_sandbox(spec, config)) for _ in range(n)]
    warm = []
    async with WarmPool(1) as pool:
        for _ in range(n):
            await pool.warm(spec, config)  # untimed: the refill of the previous claim ends
            warm.append(await _reset(lambda: pool.open(spec, config)))
        stats = pool.stats()
    assert stats["claims_warm"] == n, stats
    return {"cold_open": [o for o, _ in cold], "cold_reset": [r for _, r in cold],
            "warm_open": [o for o, _ in warm], "warm_reset": [r for _, r in warm]}


async def _throughput(spec: WorkspaceSpec, config: SandboxConfig, workers: int, per_worker: int,
                      pool: WarmPool | None) -> dict[str, Any]:
    open_one = (lambda: pool.open(spec, config)) if pool else (lambda: open_sandbox(spec, config))
    resets: list[float] = []

    async def worker() -> None:
        for _ in range(per_worker):
            resets.append((await _reset(open_one))[1])

    t = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    elapsed = time.perf_counter() - t
    out = {"per_s": workers * per_worker / elapsed, "reset": resets}
    if pool is not None:
        stats = pool.stats()
        out["warm_share"] = stats["claims_warm"] / max(1, stats["claims_warm"] + stats["claims_cold"])
    return out


def _descendants(root: int) -> list[int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    found, frontier = [], [root]
    while frontier:
        kids = [pid for pid, ppid in parents.items() if ppid in frontier]
        found += kids
        frontier = kids
    return found


def _memory_kb(pid: int) -> tuple[int, int]:
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1])
    except OSError:
        pass
    return rss, pss


async def _idle_cost(spec: WorkspaceSpec, config: SandboxConfig, n: int = 8) -> dict[str, float]:
    """Processes and memory of ``n`` idle pooled jails, per jail (the host's view of their processes)."""
    before = set(_descendants(os.getpid()))
    async with WarmPool(n) as pool:
        assert await pool.warm(spec, config) == n
        await asyncio.sleep(0.5)
        procs = [p for p in _descendants(os.getpid()) if p not in before]
        mem = [_memory_kb(p) for p in procs]
    return {"procs": len(procs) / n, "rss_mb": sum(r for r, _ in mem) / 1024 / n,
            "pss_mb": sum(p for _, p in mem) / 1024 / n}


async def _bench(backend: str, repo: Path, commit: str, cache: Path, iterations: int,
                 concurrency: tuple[int, ...], per_worker: int) -> dict[str, Any]:
    config = SandboxConfig(backend=backend, cache_dir=cache)
    spec = WorkspaceSpec(repo_path=repo, base_commit=commit)
    async with await open_sandbox(spec, config):  # prepares the template: no run pays for it
        pass
    out: dict[str, Any] = {"backend": backend, "iterations": iterations, "per_worker": per_worker}
    out.update(await _latency(spec, config, iterations))
    for workers in concurrency:
        out[f"cold_c{workers}"] = await _throughput(spec, config, workers, per_worker, None)
        async with WarmPool(workers) as pool:
            await pool.warm(spec, config)
            out[f"warm_c{workers}"] = await _throughput(spec, config, workers, per_worker, pool)
    # a container's processes are the engine's children, not ours: measured for bwrap only
    out["idle"] = await _idle_cost(spec, config) if backend == "bwrap" else None
    return out


def bench_pool(backend: str = "bwrap", iterations: int = 40, concurrency: tuple[int, ...] = (8, 32),
               per_worker: int = 4, repo_mb: float = 5.0) -> dict[str, Any]:
    """Run the benchmark for one backend on a generated repository; returns the figures (seconds)."""
    with tempfile.TemporaryDirectory(prefix="bench-pool-") as tmp:
        repo, commit = make_repo(Path(tmp), int(repo_mb * 1024 * 1024))
        return asyncio.run(_bench(backend, repo, commit, Path(tmp) / "cache", iterations, tuple(concurrency),
                                  per_worker))


def _ms(samples: list[float]) -> str:
    return f"{pct(samples, 50) * 1000:7.1f} / {pct(samples, 95) * 1000:7.1f} ms"


def format_table(r: dict[str, Any]) -> str:
    """The figures of :func:`bench_pool` as a table, cold and warm side by side."""
    w = 34
    lines = [f"{r['backend']}: reset-equivalent = open + `echo ok` + close ({r['iterations']} one at a time; "
             f"{r['per_worker']} per worker under concurrency)",
             f"  {'':{w}s} {'cold (open_sandbox)':>24s}   {'warm (WarmPool, primed)':>24s}",
             f"  {'open, p50 / p95':{w}s} {_ms(r['cold_open']):>24s}   {_ms(r['warm_open']):>24s}",
             f"  {'reset, p50 / p95':{w}s} {_ms(r['cold_reset']):>24s}   {_ms(r['warm_reset']):>24s}"]
    for workers in sorted(int(k[len("cold_c"):]) for k in r if k.startswith("cold_c")):
        key = f"cold_c{workers}"
        cold, warm = r[key], r[f"warm_c{workers}"]
        lines.append(f"  {f'resets/s at concurrency {workers}':{w}s} {cold['per_s']:20.1f} /s   "
                     f"{warm['per_s']:20.1f} /s   ({warm['warm_share']:.0%} of claims warm)")
        lines.append(f"  {f'  reset p50 / p95 at {workers}':{w}s} {_ms(cold['reset']):>24s}   "
                     f"{_ms(warm['reset']):>24s}")
    idle = r["idle"]
    if idle:
        lines.append(f"  idle pooled jail holds: {idle['procs']:.1f} processes, RSS {idle['rss_mb']:.1f} MB, "
                     f"PSS {idle['pss_mb']:.1f} MB (per jail)")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--concurrency", default="8,32")
    ap.add_argument("--per-worker", type=int, default=4)
    ap.add_argument("--backends", default="bwrap")
    ap.add_argument("--repo-mb", type=float, default=5.0)
    args = ap.parse_args()
    concurrency = tuple(int(c) for c in args.concurrency.split(","))
    print(f"machine: pipe round trip {pipe_round_trip_us():.1f} us, {os.cpu_count()} CPUs")
    ok = True
    for backend in args.backends.split(","):
        reason = skip_reason(backend)
        if reason:
            print(f"\n{backend}: skipped: {reason}")
            ok &= backend != "bwrap"
            continue
        r = bench_pool(backend, args.iterations, concurrency, args.per_worker, args.repo_mb)
        print("\n" + format_table(r))
        if backend == "bwrap":
            p50 = pct(r["warm_reset"], 50) * 1000
            verdict = "PASS" if p50 < WARM_TARGET_MS else "MISS"
            ok &= verdict == "PASS"
            print(f"\ntarget: bwrap warm reset p50 {p50:.1f} ms (< {WARM_TARGET_MS:g} ms)  {verdict}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
