"""Image-resident workspaces: session start and memory, copied vs copy-on-write, side by side.

    .venv/bin/python bench/bench_image_workspace.py [--reps 5] [--tasks FILE]

Tasks: the SWE-bench-layout instances of ``docker/swebench_layout.py`` (toolz, Django,
SymPy; built once and cached by the engine) imported with ``task-factory import``, or
every image-resident task of ``--tasks FILE``. For each task, alternating the two modes
(``SWE_DOCKER_WORKSPACE=copy`` / ``overlay``) after one warm-up each, it measures the wall
time of ``open_sandbox`` (template cached, container up, runtime answering) and of a first
``git status`` in the workspace, and reads how many bytes the session's workspace holds in
memory (the tmpfs copy) or on disk (the overlay's upper layer). Prints p50 per task and mode.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sandbox import SandboxConfig, open_sandbox  # noqa: E402
from verifier.task import TaskInstance, load_tasks  # noqa: E402


def layout_tasks(out: Path) -> Path:
    spec = importlib.util.spec_from_file_location("swebench_layout", ROOT / "docker" / "swebench_layout.py")
    layout = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = layout
    spec.loader.exec_module(layout)
    rows = [layout.build(p, log=lambda m: print(m, file=sys.stderr)) for p in layout.PROJECTS.values()]
    (out / "dataset.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    subprocess.run([sys.executable, "-m", "task_factory", "import", str(out / "dataset.jsonl"),
                    "--out", str(out / "tasks"), "--quiet"], check=True, stdout=subprocess.DEVNULL)
    return out / "tasks" / "tasks.jsonl"


async def one(task: TaskInstance, mode: str) -> tuple[float, float, int]:
    os.environ["SWE_DOCKER_WORKSPACE"] = mode
    t0 = time.perf_counter()
    sb = await open_sandbox(task.workspace_spec(), SandboxConfig(backend="docker"))
    started = time.perf_counter() - t0
    try:
        t1 = time.perf_counter()
        await sb.run("git status --short >/dev/null")
        status = time.perf_counter() - t1
        cow = getattr(sb, "_cow", None)
        if cow is not None:
            held = cow.used_bytes()
        else:
            held = int((await sb.run("du -sk /workspace | cut -f1")).output.split()[0]) * 1024
        assert sb.info.details["workspace"] == ("copy-on-write" if mode == "overlay" else "copy")
    finally:
        await sb.close()
    return started, status, held


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tasks", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.tasks or layout_tasks(Path(tmp))
        tasks = [t for t in load_tasks(path) if t.image_resident]
    print(f"{'task':<32} {'mode':<14} {'start p50':>10} {'git status p50':>15} {'workspace held':>15}")
    for task in tasks:
        results: dict[str, list[tuple[float, float, int]]] = {"copy": [], "overlay": []}
        for mode in results:  # warm-up: template, derived image, page cache
            await one(task, mode)
        for _ in range(args.reps):
            for mode in results:
                results[mode].append(await one(task, mode))
        for mode, rows in results.items():
            label = "copy-on-write" if mode == "overlay" else "copy"
            start = statistics.median(r[0] for r in rows)
            status = statistics.median(r[1] for r in rows)
            held = statistics.median(r[2] for r in rows)
            print(f"{task.instance_id:<32} {label:<14} {start:>9.2f}s {status:>14.3f}s {held / 2**20:>12.1f} MB")


if __name__ == "__main__":
    asyncio.run(main())
