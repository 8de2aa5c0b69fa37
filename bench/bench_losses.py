"""Loss-side benchmark (CPU): naive vs chunked channel-2 divergence, and one loss step
with all three channels against channel 1 (GRPO) alone.

    .venv/bin/python bench/bench_losses.py [--lengths 512 2048 8192] [--naive-max-t 2048]
        [--skip-div] [--skip-step] [--interleave ROUNDS]

`--interleave` adds the step comparison with every arm in one process, stepped in turn
(robust against load from elsewhere on a shared machine), including channel 2 without the
reuse of GRPO's hidden states (its own student forward) for the before/after of that change.

Each measurement runs in a fresh subprocess; peak extra memory = the child's peak RSS
(ru_maxrss) after the computation minus its peak RSS just before it (inputs, model and
imports excluded). Results print side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

V_QWEN = 151936


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


# ------------------------------------------------------------------------- workers
def worker_divergence(t: int, mode: str, h: int, chunk: int, threads: int) -> dict:
    import torch

    from trainer_client.losses import HintsSettings
    from trainer_client.losses.chunked import divergence_from_hidden

    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    hs = (torch.randn(t, h, generator=g)).requires_grad_(True)
    ht = hs.detach() + 0.3 * torch.randn(t, h, generator=g)
    w = (torch.randn(V_QWEN, h, generator=g) * 0.2).requires_grad_(True)
    cfg = {
        "naive": HintsSettings(chunk_size=0, chunk_backend="native"),
        "chunked": HintsSettings(chunk_size=chunk, chunk_backend="native"),
        "trl": HintsSettings(chunk_size=chunk, chunk_backend="trl"),
    }[mode]
    before = _maxrss_mb()
    start = time.perf_counter()
    loss = divergence_from_hidden(hs, ht, w, cfg) / t
    loss.backward()
    elapsed = time.perf_counter() - start
    return {
        "loss": float(loss.detach()),
        "grad_norm": float(hs.grad.norm()),
        "seconds": elapsed,
        "peak_extra_mb": _maxrss_mb() - before,
    }


def _step_setup(mode: str, threads: int, completion_len: int, site_frac: float):
    """(trainer, model, batch, n_site_tokens) of one arm: `grpo` (channel 1 alone), `full` (all
    three channels), `full-noreuse` (all three, channel 2 running its own student forward)."""
    import tempfile

    import torch
    from datasets import Dataset
    from trl import GRPOConfig

    from trainer_client.losses import LossSettings
    from trainer_client.tokenizer import load_qwen_tokenizer

    torch.set_num_threads(threads)
    sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    from support.pairs import write_pairs  # the same pair records the tests use

    from trainer_client.trainer import SweGRPOTrainer as Trainer

    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = load_qwen_tokenizer()
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(
        Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, vocab_size=V_QWEN, tie_word_embeddings=True, max_position_embeddings=8192)
    )
    tmp = tempfile.mkdtemp(prefix="bench-losses-")
    pairs = write_pairs(__import__("pathlib").Path(tmp) / "pairs.jsonl", 8)
    cfg = LossSettings.model_validate(
        {"hints": {"weight": 0.0}, "pairs": {"weight": 0.0}}
        if mode == "grpo"
        else {"hints": {"weight": 0.1, "reuse_grpo_hidden": mode != "full-noreuse"},
              "pairs": {"weight": 0.05, "loss": "dpo", "path": str(pairs), "per_step": 2}}
    )
    args = GRPOConfig(output_dir=tmp, report_to=[], use_cpu=True, bf16=False, beta=0.0,
                      per_device_train_batch_size=4, num_generations=4, max_completion_length=completion_len)
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": "hi"}]}] * 4)
    trainer = Trainer(model=model, reward_funcs=lambda completions, **k: [0.0] * len(completions), args=args,
                      train_dataset=ds, processing_class=tok, loss_settings=cfg)
    trainer.current_gradient_accumulation_steps = 1
    b, p, c = 4, 128, completion_len
    g = torch.Generator().manual_seed(1)
    n_site_tokens = int(site_frac * b * c)  # 5% of completion tokens, split over two rollouts
    sites = [[], [], [], []]
    for row in (0, 1):
        sites[row] = [{"turn": 3, "error_kind": "nonzero_exit", "hint_template_key": "bash.nonzero_exit",
                       "token_start": c - n_site_tokens // 2}]
    batch = {
        "prompt_ids": torch.randint(0, 150000, (b, p), generator=g),
        "prompt_mask": torch.ones(b, p, dtype=torch.long),
        "completion_ids": torch.randint(0, 150000, (b, c), generator=g),
        "completion_mask": torch.ones(b, c, dtype=torch.long),
        "tool_mask": torch.ones(b, c, dtype=torch.long),
        "advantages": torch.randn(b, generator=g),
        "num_items_in_batch": torch.tensor(b * c),
        "error_sites": sites,
    }
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return trainer, model, batch, opt, n_site_tokens


def _one_step(trainer, model, batch, opt) -> float:
    start = time.perf_counter()
    loss = trainer._compute_loss(model, batch)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return time.perf_counter() - start


def _channel_metrics(trainer) -> dict:
    return {k: v[-1] for k, v in trainer._metrics["train"].items() if k.startswith("channels/")}


def worker_step(mode: str, steps: int, threads: int, completion_len: int, site_frac: float) -> dict:
    trainer, model, batch, opt, n_site_tokens = _step_setup(mode, threads, completion_len, site_frac)
    times, before = [], None
    for i in range(steps + 1):  # step 0 warms up (and caches DPO references)
        if i == 1:
            before = _maxrss_mb()
        elapsed = _one_step(trainer, model, batch, opt)
        if i:
            times.append(elapsed)
    return {"seconds": statistics.median(times), "peak_extra_mb": _maxrss_mb() - before,
            "metrics": _channel_metrics(trainer), "site_tokens": n_site_tokens, "completion_tokens": 4 * completion_len}


def worker_interleaved(modes: list, steps: int, threads: int, completion_len: int, site_frac: float) -> dict:
    """All arms in one process, one step of each in turn (order rotated every round), so that
    load from elsewhere on the machine hits every arm alike; per-arm median and per-round ratios."""
    arms = {m: _step_setup(m, threads, completion_len, site_frac) for m in modes}
    for m in modes:  # warm-up step of each arm (and DPO references)
        _one_step(*arms[m][:4])
    times: dict = {m: [] for m in modes}
    for r in range(steps):
        order = modes[r % len(modes):] + modes[: r % len(modes)]
        for m in order:
            times[m].append(_one_step(*arms[m][:4]))
    return {"times": times, "metrics": {m: _channel_metrics(arms[m][0]) for m in modes}}


# ------------------------------------------------------------------------- driver
def _run(kind: str, **kw) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps({"kind": kind, **kw})]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker")
    ap.add_argument("--lengths", type=int, nargs="+", default=[512, 2048, 8192])
    ap.add_argument("--naive-max-t", type=int, default=2048, help="skip naive above this T (RAM)")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--completion-len", type=int, default=512)
    ap.add_argument("--skip-step", action="store_true")
    ap.add_argument("--skip-div", action="store_true")
    ap.add_argument("--interleave", type=int, default=0, metavar="ROUNDS",
                    help="also time GRPO / full / full without hidden-state reuse in one process, ROUNDS rounds")
    a = ap.parse_args()
    if a.worker:
        spec = json.loads(a.worker)
        kind = spec.pop("kind")
        fn = {"div": worker_divergence, "step": worker_step, "interleaved": worker_interleaved}[kind]
        print(json.dumps(fn(**spec)))
        return

    if not a.skip_div:
        bench_divergence(a)
    if not a.skip_step:
        bench_step(a)
    if a.interleave:
        bench_interleaved(a)


def bench_divergence(a) -> None:
    print(f"# channel-2 divergence, forward+backward, V={V_QWEN}, H={a.hidden}, chunk={a.chunk}, threads={a.threads}")
    print(f"{'T':>6} | {'naive s':>8} {'naive MB':>9} | {'chunked s':>9} {'chunk MB':>9} {'ratio':>6} {'|dloss|':>8} | {'trl s':>7} {'trl MB':>8} {'ratio':>6} {'|dloss|':>8}")
    for t in a.lengths:
        common = dict(t=t, h=a.hidden, chunk=a.chunk, threads=a.threads)
        naive = _run("div", mode="naive", **common) if t <= a.naive_max_t else {"error": "skipped"}
        chunk = _run("div", mode="chunked", **common)
        trl = _run("div", mode="trl", **common)

        def cols(r):
            if "error" in r:
                return f"{'-':>9} {'-':>9} {'-':>6} {'-':>8}", None
            ratio = r["peak_extra_mb"] / naive["peak_extra_mb"] if "error" not in naive else float("nan")
            diff = abs(r["loss"] - naive["loss"]) if "error" not in naive else float("nan")
            return f"{r['seconds']:>9.2f} {r['peak_extra_mb']:>9.0f} {ratio:>6.1%} {diff:>8.1e}", r

        naive_cols = f"{naive['seconds']:>8.2f} {naive['peak_extra_mb']:>9.0f}" if "error" not in naive else f"{'skip':>8} {'-':>9}"
        print(f"{t:>6} | {naive_cols} | {cols(chunk)[0]} | {cols(trl)[0]}")
        for name, r in (("naive", naive), ("chunked", chunk), ("trl", trl)):
            if "error" in r and r["error"] != "skipped":
                print(f"       {name}: {r['error']}")


def bench_step(a) -> None:
    print(f"\n# one loss step (_compute_loss + backward + AdamW) of the CPU smoke config: 4 rollouts x "
          f"{a.completion_len} completion tokens, prompt 128, 5% error-site tokens, 2 DPO pairs; median of {a.steps}")
    grpo = _run("step", mode="grpo", steps=a.steps, threads=a.threads, completion_len=a.completion_len, site_frac=0.05)
    full = _run("step", mode="full", steps=a.steps, threads=a.threads, completion_len=a.completion_len, site_frac=0.05)
    for name, r in (("GRPO only", grpo), ("all three", full)):
        if "error" in r:
            print(f"{name:>10}: {r['error']}")
        else:
            print(f"{name:>10}: {r['seconds']:.2f} s/step, peak extra {r['peak_extra_mb']:.0f} MB")
    if "error" not in grpo and "error" not in full:
        print(f"     ratio: {full['seconds'] / grpo['seconds']:.2f}x (target <= 1.5x); "
              f"site tokens {full['site_tokens']}/{full['completion_tokens']}; channels: "
              + ", ".join(f"{k.split('/')[1]}={v:.4g}" for k, v in full["metrics"].items()))



def bench_interleaved(a) -> None:
    modes = ["grpo", "full", "full-noreuse"]
    print(f"\n# interleaved in one process, {a.interleave} rounds (same config as above); full-noreuse = "
          f"channel 2 with its own student forward (the path before hidden-state reuse)")
    r = _run("interleaved", modes=modes, steps=a.interleave, threads=a.threads, completion_len=a.completion_len,
             site_frac=0.05)
    if "error" in r:
        print(f"  failed: {r['error']}")
        return
    t = r["times"]
    for m in modes:
        ratios = [x / g for x, g in zip(t[m], t["grpo"])]
        print(f"{m:>13}: median {statistics.median(t[m]):.2f} s/step; per-round ratio to GRPO median "
              f"{statistics.median(ratios):.2f}x (min {min(ratios):.2f}, max {max(ratios):.2f}); hints="
              f"{r['metrics'][m].get('channels/hints', 0.0):.6g}")


if __name__ == "__main__":
    main()
