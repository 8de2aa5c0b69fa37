"""Sandbox benchmark: command round trip and session start, per backend, side by side.

    python bench/bench_sandbox.py [--iterations 500] [--starts 20] [--backends bwrap,docker]

Prints, in one run:
* the round trip of `true` through a session (p50/p99) against raw
  ``subprocess.run(["true"])`` and a raw persistent bash (pipes + sentinel);
* session start latency (open_sandbox until the first `true` is answered) for a
  generated ~5 MB repository (many small .py files): the first (cold: template
  prepared) and the rest (warm) separately;
* the targets (bwrap round trip p50 within 1 ms of the raw persistent shell,
  bwrap session start p50 under 150 ms) with PASS/MISS.
A backend that cannot run here (no Docker engine, no sandbox/docker.py) is shown
as skipped with the reason.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sandbox import SandboxConfig, WorkspaceSpec, open_sandbox

RT_TARGET_MS = 1.0  # bwrap p50 minus raw persistent shell p50
START_TARGET_MS = 150.0  # bwrap warm session start p50


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def fmt(samples: list[float]) -> str:
    ms = [x * 1000 for x in samples]
    return f"p50 {pct(ms, 50):8.3f} ms   p99 {pct(ms, 99):8.3f} ms   (n={len(ms)})"


def make_repo(root: Path, target_bytes: int = 5 * 1024 * 1024) -> tuple[Path, str]:
    """A git repository of ~``target_bytes`` of small Python files."""
    repo = root / "bench-repo"
    rng = random.Random(0)
    total, i = 0, 0
    while total < target_bytes:
        d = repo / f"pkg{i // 100:03d}"
        d.mkdir(parents=True, exist_ok=True)
        body = "".join(f"def f_{i}_{k}(x):\n    return x * {rng.randint(1, 999)} + {k}\n\n" for k in range(40))
        (d / f"mod{i:05d}.py").write_text(f'"""Module {i}."""\n\n' + body)
        total += len(body) + 20
        i += 1
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root), "GIT_AUTHOR_NAME": "b",
           "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "bench"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()
    print(f"repository: {i} files, {total / 1e6:.1f} MB of Python")
    return repo, head


def bench_subprocess(n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(["true"])
        out.append(time.perf_counter() - t)
    return out


def bench_raw_shell(n: int) -> list[float]:
    sh = subprocess.Popen(["bash", "--noprofile", "--norc"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          env={"PATH": "/usr/bin:/bin"})
    out = []
    try:
        for _ in range(n):
            t = time.perf_counter()
            sh.stdin.write(b"true; echo __S__ $?\n")
            sh.stdin.flush()
            while not sh.stdout.readline().startswith(b"__S__"):
                pass
            out.append(time.perf_counter() - t)
    finally:
        sh.stdin.close()
        sh.wait()
    return out


async def bench_backend(backend: str, repo: Path, commit: str, cache: Path, n: int, starts: int) -> dict:
    config = SandboxConfig(backend=backend, cache_dir=cache / backend)
    spec = WorkspaceSpec(repo_path=repo, base_commit=commit)
    start_times = []
    for _ in range(starts + 1):
        t = time.perf_counter()
        sb = await open_sandbox(spec, config)
        res = await sb.run("true")
        start_times.append(time.perf_counter() - t)
        assert res.ok, res
        await sb.close()
    rt = []
    async with await open_sandbox(spec, config) as sb:
        for _ in range(20):
            await sb.run("true")
        for _ in range(n):
            t = time.perf_counter()
            res = await sb.run("true")
            rt.append(time.perf_counter() - t)
        assert res.ok, res
    return {"cold": start_times[0], "warm": start_times[1:], "rt": rt}


def skip_reason(backend: str) -> str | None:
    import importlib.util

    if importlib.util.find_spec(f"sandbox.{backend}") is None:
        return f"sandbox/{backend}.py is missing"
    if backend == "bwrap" and shutil.which("bwrap") is None:
        return "bubblewrap is not installed"
    if backend == "docker":
        try:
            import docker

            docker.from_env(timeout=5).ping()
        except Exception as exc:  # noqa: BLE001
            return f"no Docker engine: {exc!r}"[:120]
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iterations", type=int, default=500)
    ap.add_argument("--starts", type=int, default=20)
    ap.add_argument("--backends", default="bwrap,docker")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as tmp:
        root = Path(tmp)
        repo, commit = make_repo(root)
        results: dict[str, dict | str] = {}
        for backend in args.backends.split(","):
            reason = skip_reason(backend)
            if reason:
                results[backend] = reason
                continue
            try:
                results[backend] = asyncio.run(bench_backend(backend, repo, commit, root / "cache",
                                                             args.iterations, args.starts))
            except Exception as exc:  # noqa: BLE001 - reported, the others still run
                results[backend] = f"failed: {type(exc).__name__}: {exc}"[:300]
        raw_sub = bench_subprocess(args.iterations)
        raw_sh = bench_raw_shell(args.iterations)

    print(f"\nround trip of `true` ({args.iterations} iterations)")
    print(f"  {'subprocess.run([true])':28s} {fmt(raw_sub)}")
    print(f"  {'raw persistent bash':28s} {fmt(raw_sh)}")
    for backend, r in results.items():
        line = fmt(r["rt"]) if isinstance(r, dict) else f"skipped: {r}"
        print(f"  {backend + ' session':28s} {line}")
    print("\nsession start, ~5 MB repository (open_sandbox until the first `true` answered)")
    for backend, r in results.items():
        if isinstance(r, dict):
            print(f"  {backend + ' warm':28s} {fmt(r['warm'])}")
            print(f"  {backend + ' cold (first)':28s} {r['cold'] * 1000:8.1f} ms (template prepared)")
        else:
            print(f"  {backend:28s} skipped: {r}")

    print("\ntargets")
    ok = True
    bw = results.get("bwrap")
    if isinstance(bw, dict):
        delta = (pct(bw["rt"], 50) - pct(raw_sh, 50)) * 1000
        start = pct(bw["warm"], 50) * 1000
        for name, value, limit in (("bwrap round trip p50 - raw shell p50", delta, RT_TARGET_MS),
                                   ("bwrap session start p50", start, START_TARGET_MS)):
            verdict = "PASS" if value < limit else "MISS"
            ok &= verdict == "PASS"
            print(f"  {name:40s} {value:8.3f} ms  (target < {limit:g} ms)  {verdict}")
    else:
        print(f"  bwrap: not measured ({bw})  MISS")
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
