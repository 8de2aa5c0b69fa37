"""The machine reference every benchmark prints beside its figures (shared VMs vary over minutes),
and the percentile the latency benchmarks report."""

from __future__ import annotations

import os
import time

__all__ = ["ms_pct", "pipe_round_trip_us"]


def ms_pct(xs: list[float], p: float) -> float:
    """The ``p`` quantile (0..1, nearest rank) of ``xs`` seconds, in milliseconds; NaN for none."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] * 1000 if xs else float("nan")


def pipe_round_trip_us(n: int = 5000) -> float:
    """A one-byte ping-pong between two processes over pipes: what a context switch costs on
    this machine right now (shared VMs vary by 2x over minutes; read the figures against it)."""
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(w1)
            while (b := os.read(r1, 1)):
                os.write(w2, b)
        finally:
            os._exit(0)
    os.close(r1)
    os.close(w2)
    t = time.perf_counter()
    for _ in range(n):
        os.write(w1, b"x")
        os.read(r2, 1)
    elapsed = time.perf_counter() - t
    os.close(w1)  # the child reads EOF and exits
    os.waitpid(pid, 0)
    os.close(r2)
    return elapsed / n * 1e6
