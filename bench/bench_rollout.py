"""Rollout tool-phase benchmark: a batch of rollouts each calling a 1-second tool.

Runs the same scripted first turn (every rollout calls `wait(seconds=1)`) through
stock TRL's `GRPOTrainer._tool_call_loop` and through `SweGRPOTrainer`'s concurrent
override, with the real tiny Qwen2 model and tokenizer (CPU), and prints side by side:
the tool phase (first tool call start -> last tool call end) and the whole loop (tool
phase + the post-tool generate). Target: ours within 1.5x of one call; stock ~N x.

    python bench/bench_rollout.py [--rollouts 8] [--seconds 1.0]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


class WaitEnv:
    """In-process environment whose only tool blocks for `delay` seconds (a slow sandbox call)."""

    delay = 1.0
    spans: list[tuple[float, float]] = []

    def reset(self, **row) -> str:
        return ""

    def wait(self, seconds: float) -> str:
        """Wait, like a slow shell command.

        Args:
            seconds: Requested duration (the benchmark fixes it).
        """
        t0 = time.perf_counter()
        time.sleep(self.delay)
        WaitEnv.spans.append((t0, time.perf_counter()))
        return "done"

    def get_reward(self) -> float:
        return 0.0


def build(cls, out: Path, n: int):
    from datasets import Dataset
    from trainer_client.tiny_qwen import tiny_qwen_dir
    from trl import GRPOConfig

    from trainer_client.tokenizer import load_qwen_tokenizer

    args = GRPOConfig(output_dir=str(out), per_device_train_batch_size=n, num_generations=n, max_completion_length=96,
                      bf16=False, use_cpu=True, report_to=[], beta=0.0, save_strategy="no", max_steps=1)
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": "go"}]}] * n)
    return cls(model=str(tiny_qwen_dir()), processing_class=load_qwen_tokenizer(), args=args, train_dataset=data,
               environment_factory=WaitEnv)


def run_loop(trainer, n: int) -> tuple[float, float]:
    import torch
    from trl.chat_template_utils import parse_response

    tok = trainer.processing_class
    envs = [WaitEnv() for _ in range(n)]
    trainer.environments = envs
    trainer._sync_tool_dicts = [{"wait": e.wait} for e in envs]
    trainer._async_tool_dicts = [{} for _ in envs]
    trainer._batch_environments = [None] * n
    prompts = [[{"role": "user", "content": f"go {i}"}] for i in range(n)]
    prompt_ids = [list(tok.apply_chat_template(p, tools=trainer.tools, add_generation_prompt=True, tokenize=True,
                                               return_dict=False)) for p in prompts]
    call = '<tool_call>\n{"name": "wait", "arguments": {"seconds": 1}}\n</tool_call><|im_end|>'
    completion_ids = [tok(call).input_ids for _ in range(n)]
    completions = [[parse_response(tok, c, prefix=p, tools=trainer.tools)] for c, p in zip(completion_ids, prompt_ids)]
    WaitEnv.spans = []
    torch.manual_seed(0)
    t0 = time.perf_counter()
    trainer._tool_call_loop(prompts, prompt_ids, completion_ids, completions, None, None, {})
    total = time.perf_counter() - t0
    assert len(WaitEnv.spans) == n, WaitEnv.spans
    tool_phase = max(e for _, e in WaitEnv.spans) - min(s for s, _ in WaitEnv.spans)
    return tool_phase, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    import torch
    from trl import GRPOTrainer

    from trainer_client.trainer import SweGRPOTrainer

    torch.set_num_threads(2)
    WaitEnv.delay = args.seconds
    with tempfile.TemporaryDirectory() as tmp:
        stock = build(GRPOTrainer, Path(tmp) / "stock", args.rollouts)
        ours = build(SweGRPOTrainer, Path(tmp) / "ours", args.rollouts)
        run_loop(ours, 2)  # warm-up (thread pool, generate kernels)
        s_tool, s_total = run_loop(stock, args.rollouts)
        o_tool, o_total = run_loop(ours, args.rollouts)
    one = args.seconds
    print(f"{args.rollouts} rollouts x one {one:.1f}s tool call (trl 1.16.0, tiny Qwen2 on CPU)")
    print(f"{'':28}{'stock TRL':>12}{'SweGRPOTrainer':>16}{'speed-up':>10}")
    print(f"{'tool phase (s)':28}{s_tool:12.2f}{o_tool:16.2f}{s_tool / o_tool:9.1f}x")
    print(f"{'tool phase / one call':28}{s_tool / one:11.2f}x{o_tool / one:15.2f}x")
    print(f"{'whole loop incl. generate (s)':28}{s_total:12.2f}{o_total:16.2f}{s_total / o_total:9.1f}x")


if __name__ == "__main__":
    main()
