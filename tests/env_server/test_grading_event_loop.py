"""Grading one hostile submission never slows the others.

The red team's submission printed one 40 kB ``PASSED a<spaces>b`` line at exit: the log reader's
backtracking regular expression took 14-31 s on it, on the server's event loop, so every other
session's step, ``/health`` and the WebSocket keepalives waited (clients were dropped with ``1011
keepalive ping timeout``). Now the log is read in linear time, in a worker process.

A real ``env-server serve`` (bwrap) on loopback, in a process of its own as in production. A
bystander session runs ``echo`` steps back to back, and its step latency is measured while the
replica is idle, while it grades the gold patch, and while it grades the gold patch plus code that
prints about 6.5 MB of hostile lines at exit (long runs of spaces, brackets, many summary lines).
A grading costs the bystander something by itself on a small machine (the grading sandbox starts
and runs pytest beside it); the hostile log must add nothing to that: the bystander's p99 during
the hostile grading stays within 2x of its p99 during the gold one, and the hostile grading still
reads the gold patch's results (1.0).
"""

from __future__ import annotations

import asyncio
import os
import queue
import re
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import websockets
from env_support import call, requires_sandbox, tool

from env_client.processes import stop_process_group

from verifier.task import load_tasks

pytestmark = [requires_sandbox, pytest.mark.timeout(900)]
READY = re.compile(r"^env-server ready: http://127\.0\.0\.1:(\d+) ")
# appended to the demo task's module (six.py, which its tests import): ~6.5 MB printed when pytest exits,
# after its summary (the log stays under the 8 MB output limit, so the summary is read)
FLOOD = '''

import atexit as _atexit
import os as _os


def _flood():
    wide = b"PASSED a" + b" " * 40000 + b"b\\n"
    brackets = b"FAILED t.py::x[" + b"] " * 20000 + b"\\n"
    for block in range(30):
        many = b"".join(b"PASSED tests/t.py::test_%d_%d[a b] - c\\n" % (block, i) for i in range(2700))
        _os.write(1, wide + wide + brackets + many)


_atexit.register(_flood)
'''


def _serve(tasks: Path, data: Path) -> tuple[subprocess.Popen, int]:
    script = Path(sys.executable).with_name("env-server")
    argv = [*([str(script)] if script.exists() else [sys.executable, "-m", "env_server.cli"]), "serve", "--port", "0",
            "--tasks", str(tasks), "--backend", "bwrap", "--data-dir", str(data), "--log-level", "warning",
            "--max-steps", "100000"]
    env = {k: v for k, v in os.environ.items() if k not in ("ENV_SERVER_TOKEN", "ENV_SERVER_TOKENS_FILE")}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=lambda: ([lines.put(x) for x in proc.stdout], lines.put(None)), daemon=True).start()
    seen = []
    while True:
        line = lines.get(timeout=120)
        assert line is not None, f"env-server exited {proc.wait()} before it was ready:\n{''.join(seen)}"
        seen.append(line)
        if m := READY.match(line):
            return proc, int(m.group(1))


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


async def _campaign(url: str, instance_id: str, gold: str) -> dict[str, object]:
    async with websockets.connect(url, max_size=None) as bystander:
        assert (await call(bystander, "reset", {"instance_id": instance_id}))["type"] == "observation"

        async def echo() -> float:
            start = time.perf_counter()
            reply = await call(bystander, "step", tool("bash", command="echo hi"))
            assert reply["type"] == "observation" and "hi" in reply["data"]["observation"]["output"], reply
            return time.perf_counter() - start

        async def grading(hostile: bool) -> tuple[list[float], dict]:
            """The bystander's step latencies while another session submits the gold patch (plus the flood)."""
            async with websockets.connect(url, max_size=None) as ws:
                assert (await call(ws, "reset", {"instance_id": instance_id}))["type"] == "observation"
                script = f"cd /workspace && printf %s {shlex.quote(gold)} | git apply"
                if hostile:
                    script += f" && printf %s {shlex.quote(FLOOD)} >> six.py"
                reply = await call(ws, "step", tool("bash", command=script))
                assert "error_kind" not in reply["data"]["metadata"], reply
                submit = asyncio.ensure_future(call(ws, "step", tool("submit")))
                samples = []
                while not submit.done():
                    samples.append(await echo())
                return samples, (await submit)["data"]

        for _ in range(20):  # warm up (the worker processes start on the first grading)
            await echo()
        results: dict[str, object] = {"idle": [await echo() for _ in range(300)], "gold": [], "hostile": []}
        for kind in ("gold", "hostile", "gold", "hostile"):  # alternated: both meet the same machine
            samples, data = await grading(kind == "hostile")
            assert data["reward"] == 1.0, (kind, data["metadata"])
            results[kind] += samples  # type: ignore[operator]
        return results


def test_a_hostile_log_does_not_slow_a_bystander(tmp_path, demo_tasks_path):
    task = load_tasks(demo_tasks_path)[0]
    proc, port = _serve(demo_tasks_path, tmp_path / "data")
    try:
        results = asyncio.run(_campaign(f"ws://127.0.0.1:{port}/ws", task.instance_id, task.patch))
        health = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                                 f"http://127.0.0.1:{port}/health"], capture_output=True, text=True).stdout
    finally:
        stop_process_group(proc, grace_s=30)
    idle, gold, hostile = (results[k] for k in ("idle", "gold", "hostile"))
    stats = {k: f"{len(v)} steps, p50 {sorted(v)[len(v) // 2] * 1e3:.1f} ms, p99 {p99(v) * 1e3:.1f} ms, "
                f"max {max(v) * 1e3:.0f} ms" for k, v in (("idle", idle), ("gold", gold), ("hostile", hostile))}
    assert health == "200"
    assert len(hostile) >= 50, stats  # the hostile gradings took long enough to measure
    # what a grading costs the bystander anyway (idle is reported: on a 2-core machine the gold patch's
    # grading alone can double the bystander's p99), and the hostile log adds nothing to it
    assert p99(hostile) <= 2 * max(p99(gold), p99(idle)), stats
