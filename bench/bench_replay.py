"""Replay benchmark: teacher replay throughput, and what the live replay loop adds to a training step.

Uses what `make demo` builds and caches (run it once first): its task file (real and synthetic
tasks), its warm-started policy and its two local teacher checkpoints, on a fresh env server
(bwrap sandbox) on loopback.

1. Throughput: states per second replayed through N local teachers (`transformers serve`, real
   HTTP), with agreement only and with fork verification (every proposed action executed in a
   fork of the episode at step t and graded by the hidden tests). The states are those of the
   last `make demo` training run's episodes (its traces, served again).
2. Loop overhead: mean optimizer-step time of `trainer-client train` with the loop off, and on
   (teachers: a zero-cost double answering at once, so the figure is the loop's own cost; and
   the local teachers, whose inference shares this machine's cores), side by side in one run.
   Target: the loop adds at most 10% to a step.

    python bench/bench_replay.py [--teachers 1,2] [--steps 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "tests"))  # the test helpers (support/), after the project

from env_client.local_server import LocalEnvServer, start_env_server  # noqa: E402


def demo_artifacts() -> tuple[Path, Path, list[Path]]:
    """(task file, warm-started policy, teacher checkpoints) cached by `make demo`."""
    tasks = ROOT / ".cache/demo-tasks-v3/tasks.jsonl"
    policies = sorted((ROOT / ".cache/demo-warmstart").glob("*/warmstart.json"), key=lambda p: p.stat().st_mtime)
    teachers = sorted((ROOT / ".cache/demo-teachers").glob("*/warmstart.json"), key=lambda p: p.stat().st_mtime)
    if not tasks.exists() or not policies or not teachers:
        raise SystemExit("bench_replay: run `make demo` once first (it caches the tasks, the policy and the teachers)")
    final = teachers[-1].parent
    stages = sorted(final.glob("stage-*"))
    return tasks, policies[-1].parent, [*stages, final]


def start_server(tasks: Path, data: Path, max_sessions: int = 32) -> LocalEnvServer:
    return start_env_server(tasks, backend="bwrap", data_dir=data, startup_timeout_s=60, stop_grace_s=30,
                            extra_args=["--max-sessions", str(max_sessions), "--log-level", "warning"])


def demo_episodes(data: Path, limit: int = 8) -> list[str]:
    """Copy the last `make demo` run's traces into `data` and pick up to `limit` of its training
    episodes (not forks) that took steps: their states are what the loop replays in the demo."""
    src = ROOT / "runs/demo/env-data/traces"
    if not src.is_dir():
        raise SystemExit("bench_replay: run `make demo` once first (its episodes are the states replayed)")
    shutil.copytree(src, data / "traces")
    picked = []
    for path in sorted((data / "traces").glob("*.jsonl"), key=lambda p: p.stat().st_mtime, reverse=True):
        lines = path.read_text().splitlines()
        head = json.loads(lines[0]) if lines else {}
        if head.get("kind") == "reset" and not head.get("fork_of") and len(lines) > 1:
            picked.append(path.stem)
    return picked[:limit]


def throughput(url: str, episodes: list[str], checkpoints: list[Path], n_teachers: int, verify: bool) -> dict:
    from trainer_client.replay.during_training import pick_states
    from trainer_client.replay.local import local_teachers
    from trainer_client.replay.pair_mining import ReplayOptions, replay
    from trainer_client.replay.traces import env_client, fetch_trace
    from trainer_client.replay.verify import ForkVerifier

    async def states() -> list:
        async with env_client() as http:
            out = []
            for ep in episodes:
                out += pick_states(await fetch_trace(http, url, ep), 2, ReplayOptions())
            return out

    records = asyncio.run(states())
    with local_teachers(checkpoints[:n_teachers], threads=1) as teachers:
        async def run():
            verifier = ForkVerifier(lambda _: url) if verify else None
            try:
                return await replay(records, teachers, ReplayOptions(), verify=verifier)
            finally:
                if verifier is not None:
                    await verifier.aclose()

        started = time.perf_counter()
        result = asyncio.run(run())
        wall = time.perf_counter() - started
    s = result.summary
    return {"teachers": n_teachers, "mode": "fork" if verify else "agreement", "states": len(records),
            "calls_ok": s.calls_ok, "calls": s.calls, "pairs": s.pairs_kept, "wall_s": wall, "errors": s.errors,
            "states_per_s": len(records) / wall}


def step_times(url: str, tasks: Path, policy: Path, out: Path, steps: int, extra: list[str]) -> dict:
    """Mean optimizer-step seconds of a `train` run (the first step, with its warm-up, left out), and per
    step: the training thread's seconds on the loop, the loop thread's CPU seconds."""
    import trainer_client.metrics as metrics
    from trainer_client.config import load_config
    from trainer_client.run import train

    stamps: list[float] = []

    class Timed(metrics.MetricsCallback):
        def on_step_end(self, args, state, control, **kwargs):
            stamps.append(time.perf_counter())

    cfg = load_config(ROOT / "trainer_client/configs/cpu_smoke.yaml", [
        f"model.name_or_path={policy}", f"env.urls=[\"{url}\"]", f"data.tasks={tasks}", f"grpo.output_dir={out}",
        f"grpo.max_steps={steps + 1}", 'grpo.save_strategy="no"', "grpo.max_completion_length=384", "output.plot=false",
        "loss.pairs.weight=0.5", *extra])
    original, metrics.MetricsCallback = metrics.MetricsCallback, Timed  # train imports it at call time
    try:
        train(cfg)
    finally:
        metrics.MetricsCallback = original
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "channels/total" in r][1:]  # the timed steps
    loop_s = [r["replay/train_thread_s"] for r in rows if "replay/train_thread_s" in r]
    cpu = [r["replay/thread_cpu_s"] for r in rows if "replay/thread_cpu_s" in r]
    return {"step_s": sum(gaps) / len(gaps),
            "train_thread_s": sum(loop_s) / len(loop_s) if loop_s else 0.0,
            "loop_cpu_s": (cpu[-1] - cpu[0]) / max(1, len(cpu) - 1) if len(cpu) > 1 else 0.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--teachers", default="1,2", help="teacher counts for the throughput table")
    ap.add_argument("--steps", type=int, default=5, help="timed optimizer steps per loop arm")
    ap.add_argument("--skip-overhead", action="store_true")
    args = ap.parse_args()
    tasks, policy, checkpoints = demo_artifacts()
    from support.teacher_double import FakeTeacherServer, Reply

    with tempfile.TemporaryDirectory() as tmp:
        episodes = demo_episodes(Path(tmp) / "data")
        server = start_server(tasks, Path(tmp) / "data")
        url = server.url
        try:
            print(f"replay throughput: {len(episodes)} episodes of the demo's training run, up to 2 states each "
                  "(error sites first)")
            print(f"{'teachers':>8} {'mode':>9} {'states':>6} {'calls ok':>9} {'pairs':>5} {'wall s':>7} {'states/s':>8}")
            for n in (int(x) for x in args.teachers.split(",")):
                for verify in (False, True):
                    r = throughput(url, episodes, checkpoints, n, verify)
                    print(f"{r['teachers']:>8} {r['mode']:>9} {r['states']:>6} {r['calls_ok']:>4}/{r['calls']:<4} "
                          f"{r['pairs']:>5} {r['wall_s']:>7.1f} {r['states_per_s']:>8.2f}  {r['errors'] or ''}",
                          flush=True)
            if args.skip_overhead:
                return
            with FakeTeacherServer(lambda model, body, n: Reply.call("bash", command="git diff")) as double:
                teachers_file = Path(tmp) / "double.yaml"
                teachers_file.write_text(json.dumps({"teachers": [{"name": "double", "model": "double",
                                                                   "base_url": double.base_url,
                                                                   "price_in": 0, "price_out": 0}]}))
                on_dir = Path(tmp) / "loop_on_double"
                results = [("loop on, teacher double", step_times(url, tasks, policy, on_dir, args.steps, [
                    "replay.enabled=true", f"replay.teachers={teachers_file}"]))]
            # the same channel-3 work without the loop: the pairs the loop delivered, given up front
            results.insert(0, ("loop off, same pairs static", step_times(
                url, tasks, policy, Path(tmp) / "off_static", args.steps, [f"loss.pairs.path={on_dir / 'pairs.jsonl'}"])))
            results.append(("loop on, 2 local teachers", step_times(
                url, tasks, policy, Path(tmp) / "on_local", args.steps,
                ["replay.enabled=true", "replay.local_models=[" + ",".join(f'"{c}"' for c in checkpoints[:2]) + "]"])))
            base = results[0][1]["step_s"]
            print(f"\nloop overhead over {args.steps} steps (first step excluded); the loop-off arm trains on the pairs "
                  "the double-teacher arm mined, given as a file, so channel 3 does the same work")
            print(f"  {'arm':<30} {'step s':>7} {'vs off':>7} {'train thread on loop':>21} {'loop thread CPU':>16}")
            for name, r in results:
                print(f"  {name:<30} {r['step_s']:>7.2f} {(r['step_s'] / base - 1) * 100:>+6.0f}% "
                      f"{r['train_thread_s']:>12.3f} s/step {r['loop_cpu_s']:>9.3f} s/step "
                      f"({r['train_thread_s'] / r['step_s'] * 100:.1f}% / {r['loop_cpu_s'] / r['step_s'] * 100:.1f}%)")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
