"""CPU scoring benchmark: TRL's fused LM head projecting every position vs completion positions only.

    .venv/bin/python bench/bench_cpu_scoring.py [--batch 4] [--prompt 1050] [--completion 64] [--rounds 3]

GRPOTrainer scores a batch with `model(..., labels, fused_lm_head=True)` forward + backward.
On non-Triton devices trl 1.16 projects every position through the LM head (prompt
included); SweGRPOTrainer's compact_fused_lm_head projects only the labelled (completion)
positions. Both arms run the tiny Qwen2 smoke model (151,665-token vocabulary) on the same
batch in one process, stepped in turn; the figures are medians over rounds, and the values
of both arms are compared (max |difference| of log-probs and gradients).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=1050, help="prompt tokens (issue text + tool schemas)")
    ap.add_argument("--completion", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()

    import torch
    from trainer_client.tiny_qwen import tiny_qwen_dir
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from trainer_client.trainer import compact_fused_lm_head

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_qwen_dir()), dtype=torch.float32)
    add_fused_lm_head(model, temperature=1.0, outputs=("log_probs", "entropy"))
    model.train()
    total = a.prompt + a.completion
    ids = torch.randint(0, 150_000, (a.batch, total), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    labels = ids.clone()
    labels[:, : a.prompt] = -100

    def step(compact: bool):
        model.zero_grad(set_to_none=True)
        t = time.perf_counter()
        if compact:
            with compact_fused_lm_head():
                out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
        else:
            out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
        out.log_probs.sum().backward()
        took = time.perf_counter() - t
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        return took, out.log_probs.detach(), grads

    step(False), step(True)  # warm-up
    times = {False: [], True: []}
    for _ in range(a.rounds):
        for compact in (False, True):
            took, lp, g = step(compact)
            times[compact].append(took)
            if compact:
                lp_c, g_c = lp, g
            else:
                lp_f, g_f = lp, g
    full, comp = statistics.median(times[False]), statistics.median(times[True])
    print(f"CPU scoring, forward + backward: batch {a.batch} x ({a.prompt} prompt + {a.completion} completion) "
          f"tokens, vocab {model.config.vocab_size}, {torch.get_num_threads()} threads, median of {a.rounds}")
    print(f"{'':32}{'every position':>16}{'completion only':>17}{'speed-up':>10}")
    print(f"{'step (s)':32}{full:>16.3f}{comp:>17.3f}{full / comp:>9.1f}x")
    print(f"{'positions through the LM head':32}{a.batch * (total - 1):>16}{a.batch * a.completion:>17}")
    print(f"max |log-prob diff| {float((lp_f - lp_c).abs().max()):.2e}   "
          f"max |grad diff| {float((g_f - g_c).abs().max()):.2e}")


if __name__ == "__main__":
    main()
