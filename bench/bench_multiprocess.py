"""Multi-process CPU run vs single-process run on the same global batch.

Starts two real env servers (bwrap, tests/support/taskpacks.py's small pack) on loopback and runs
`trainer-client train` (cpu_smoke.yaml) twice on the same global batch: one process with
per_device_train_batch_size=B, then `accelerate launch --num_processes 2` (DDP on gloo,
trainer_client/configs/accelerate/ddp_cpu2.yaml) with B/2 per process. Prints, side by side,
the mean per-step `step_time` (TRL's) and `env/tool_phase_s` (wall seconds of the tool rounds,
the slowest rank's) over the steps after the first.

The policy: the tool-calling tiny model of tests/trainer/toolcaller_support.py when one is cached
(`--model DIR` or the newest ~/.cache/swe-openenv/test-models/tiny-qwen2-toolcaller-*, with its
PROBE prompt: `bash ls`, `bash nosuchcmd`), else the random smoke model (which calls no tools).

    python bench/bench_multiprocess.py [--batch 4] [--steps 4] [--model DIR]
"""

from __future__ import annotations

import argparse
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
sys.path.append(str(ROOT / "tests"))  # the test helpers (support/), after the project
os.environ.update(HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1", TRL_EXPERIMENTAL_SILENCE="1",
                  TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")


def toolcaller_model() -> Path | None:
    models = sorted((Path.home() / ".cache/swe-openenv/test-models").glob("tiny-qwen2-toolcaller-*/config.json"),
                    key=lambda p: p.stat().st_mtime)
    return models[-1].parent if models else None


def run(processes: int, per_device: int, urls: list[str], tasks: Path, model: Path | None, steps: int,
        out: Path) -> list[dict]:
    args = ["-m", "trainer_client.cli", "train", "--config", str(ROOT / "trainer_client/configs/cpu_smoke.yaml"),
            *(a for u in urls for a in ("--env-url", u)), "--tasks", str(tasks), "--output-dir", str(out),
            "--max-steps", str(steps), "--set", f"grpo.per_device_train_batch_size={per_device}",
            "--set", "grpo.max_completion_length=96", "--set", "output.plot=false", "--set", 'grpo.save_strategy="no"']
    if model is not None:
        from trainer.toolcaller_support import PROBE_INSTANCE, PROBE_PROMPT

        args += ["--set", f"model.name_or_path={model}", "--set", f"data.instance_ids=[{PROBE_INSTANCE}]",
                 "--set", f"data.prompt={json.dumps(PROBE_PROMPT)}", "--set", "data.repeat=64"]
    if processes == 1:
        cmd = [sys.executable, *args]
    else:
        cmd = [str(Path(sys.executable).parent / "accelerate"), "launch", "--config_file",
               str(ROOT / "trainer_client/configs/accelerate/ddp_cpu2.yaml"), "--num_processes", str(processes), *args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"{processes}-process run failed:\n{(proc.stdout + proc.stderr)[-4000:]}")
    print(f"  {processes} process(es): {time.perf_counter() - t0:.0f} s wall", flush=True)
    return [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines() if '"reward"' in l]


def main() -> None:
    from support.servers import start_server_process
    from support.taskpacks import build_small_pack

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=4, help="global batch (rollouts per step; even)")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--model", type=Path, default=None, help="tool-calling model dir (default: cached toolcaller)")
    opts = parser.parse_args()
    model = opts.model or toolcaller_model()
    tasks = build_small_pack(3)
    with tempfile.TemporaryDirectory() as tmp:
        servers = [start_server_process(tasks, Path(tmp) / f"env-{k}") for k in "ab"]
        try:
            urls = [s.url for s in servers]
            print(f"policy: {model or 'random tiny-qwen (no tool calls)'}; global batch {opts.batch}; "
                  f"{opts.steps} steps; {os.cpu_count()} CPU cores", flush=True)
            rows = {n: run(n, opts.batch // n, urls, tasks, model, opts.steps, Path(tmp) / f"run{n}") for n in (1, 2)}
        finally:
            for server in servers:
                server.stop()

    def mean(n: int, key: str) -> float:
        values = [r.get(key, 0.0) for r in rows[n][1:]] or [r.get(key, 0.0) for r in rows[n]]
        return statistics.mean(values)

    print(f"\n{'global batch ' + str(opts.batch):<28}{'1 process':>12}{'2 processes (DDP)':>20}")
    for key, label in (("step_time", "step time (s)"), ("env/tool_phase_s", "tool phase (s)"),
                       ("env/turns_per_rollout", "tool turns / rollout"), ("env/rollouts", "rollouts / step")):
        print(f"{label:<28}{mean(1, key):>12.2f}{mean(2, key):>20.2f}")


if __name__ == "__main__":
    main()
