"""What a tool profile costs per step: the default profile's persistent-shell `bash` beside the
bash-only profile's (mini-swe-agent's protocol: a fresh `bash -c` at /workspace per command), on
the real server (bwrap) and the demo task, in one run, interleaved.

Usage:

    python bench/bench_profiles.py [--steps 60] [--rounds 3]

Per profile: a step's latency (`true`, a command that reads the repository, one that writes a file:
the step records the workspace diff), and an episode's reset-to-graded time (the gold patch applied,
then submitted: `submit` under default, the sentinel line printing the patch under bash-only).
Rounds alternate the profiles so both see the same machine load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import websockets

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import ms_pct as pct  # noqa: E402

from contract import SUBMIT_SENTINEL  # noqa: E402
from env_client.local_server import start_env_server  # noqa: E402
from task_factory.demo_task import demo_tasks_file  # noqa: E402
from verifier.task import load_tasks  # noqa: E402

COMMANDS = {"true": "true", "read": "git log --oneline | head -3 && ls | head", "write": "echo x >> NOTES.txt"}


async def _call(ws, type_: str, data: dict) -> dict:
    await ws.send(json.dumps({"type": type_, "data": data}))
    reply = json.loads(await ws.recv())
    if reply["type"] == "error":
        raise RuntimeError(reply["data"])
    return reply["data"]


def _bash(command: str) -> dict:
    return {"type": "call_tool", "tool_name": "bash", "arguments": {"command": command}}


async def steps(url: str, profile: str, instance_id: str, n: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {k: [] for k in COMMANDS}
    async with websockets.connect(url + "/ws", max_size=None) as ws:
        await _call(ws, "reset", {"instance_id": instance_id, "profile": profile})
        for _ in range(n):
            for name, command in COMMANDS.items():
                t0 = time.perf_counter()
                await _call(ws, "step", _bash(command))
                out[name].append(time.perf_counter() - t0)
    return out


async def episode(url: str, profile: str, instance_id: str, patch: str) -> float:
    apply = f"cat > /tmp/gold.patch <<'PATCH_END'\n{patch}PATCH_END\ncd /workspace && git apply /tmp/gold.patch"
    async with websockets.connect(url + "/ws", max_size=None) as ws:
        t0 = time.perf_counter()
        await _call(ws, "reset", {"instance_id": instance_id, "profile": profile})
        await _call(ws, "step", _bash(apply))
        if profile == "bash-only":
            done = await _call(ws, "step", _bash(f"git diff > /tmp/p.txt; echo {SUBMIT_SENTINEL} && cat /tmp/p.txt"))
        else:
            done = await _call(ws, "step", {"type": "call_tool", "tool_name": "submit", "arguments": {}})
        elapsed = time.perf_counter() - t0
    if done["reward"] != 1.0:
        raise RuntimeError(f"{profile}: the gold patch scored {done['reward']}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=60, help="of each command, per profile and round")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    tasks = demo_tasks_file()
    task = load_tasks(tasks)[0]
    profiles = ("default", "bash-only")
    lat: dict[str, dict[str, list[float]]] = {p: {k: [] for k in COMMANDS} for p in profiles}
    graded: dict[str, list[float]] = {p: [] for p in profiles}
    with tempfile.TemporaryDirectory() as tmp:
        server = start_env_server(tasks, data_dir=Path(tmp), startup_timeout_s=60, stop_grace_s=60,
                                  extra_args=["--max-steps", "100000"])
        try:
            for r in range(args.rounds):
                for p in (profiles if r % 2 == 0 else profiles[::-1]):
                    for k, v in asyncio.run(steps(server.url.replace("http", "ws"), p, task.instance_id,
                                                  args.steps)).items():
                        lat[p][k] += v
                    graded[p].append(asyncio.run(episode(server.url.replace("http", "ws"), p, task.instance_id,
                                                         task.patch)))
        finally:
            server.stop()
    print(f"\nstep latency by tool profile, bwrap, demo task, {args.rounds} rounds x {args.steps} steps a command "
          f"({'; '.join(f'{k}: {v}' for k, v in COMMANDS.items())})")
    print(f"{'':28}" + "".join(f"{p:>22}" for p in profiles))
    for k in COMMANDS:
        print(f"{'step ' + k + ' p50 / p90':28}"
              + "".join(f"{pct(lat[p][k], 0.5):>12.1f} / {pct(lat[p][k], 0.9):<6.1f}ms" for p in profiles))
    print(f"{'reset, gold, graded (median)':28}"
          + "".join(f"{statistics.median(graded[p]):>20.2f} s" for p in profiles))


if __name__ == "__main__":
    main()
