"""Docker backend latency: session start (p50) and a `true` round trip (p50/p99).

    python docker/bench.py [--sessions 10] [--commands 300] [--repo-mb 5]

Needs a running engine and the sandbox image (docker/setup-engine.sh, build-images.sh).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from sandbox import SandboxConfig, WorkspaceSpec, open_sandbox


def make_repo(root: Path, mb: int) -> Path:
    """A git repository of about ``mb`` MB of Python-ish text."""
    repo = root / "repo"
    repo.mkdir()
    line = "def f_%d(x):\n    return x * %d  # padding padding padding padding\n"
    per_file = "".join(line % (i, i) for i in range(400)).encode()
    for i in range(max(1, mb * 1024 * 1024 // len(per_file))):
        (repo / f"mod_{i}.py").write_bytes(per_file)
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True)
    return repo


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] * 1000


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=10)
    ap.add_argument("--commands", type=int, default=300)
    ap.add_argument("--repo-mb", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = SandboxConfig(backend="docker", cache_dir=Path(tmp) / "cache")
        spec = WorkspaceSpec(repo_path=make_repo(Path(tmp), a.repo_mb))
        sb = await open_sandbox(spec, cfg)  # warm: template prepared once, not timed
        await sb.close()
        starts = []
        for _ in range(a.sessions):
            t0 = time.perf_counter()
            sb = await open_sandbox(spec, cfg)
            starts.append(time.perf_counter() - t0)
            await sb.close()
        async with await open_sandbox(spec, cfg) as sb:
            rtts = []
            for _ in range(a.commands):
                t0 = time.perf_counter()
                await sb.run("true")
                rtts.append(time.perf_counter() - t0)
    print(f"docker session start ({a.repo_mb} MB repo): p50 {pct(starts, 50):.0f} ms  max {max(starts)*1000:.0f} ms")
    print(f"docker `true` round trip: p50 {pct(rtts, 50):.2f} ms  p99 {pct(rtts, 99):.2f} ms  "
          f"mean {statistics.mean(rtts)*1000:.2f} ms")


if __name__ == "__main__":
    asyncio.run(main())
