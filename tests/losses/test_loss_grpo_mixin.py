"""LossChannelsMixin on a real TRL GRPOTrainer (tiny Qwen2, real tokenizer, CPU)."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer


from .channels_support import loss_settings
from .conftest import QWEN_VOCAB, tiny_qwen
from .grpo_trainer_support import LossTrainer as _Trainer
from .grpo_trainer_support import zero_reward as _reward
from support.pairs import write_pairs
from .rollouts_support import make_grpo_batch


def _make(cls, tokenizer, tmp_path, model, **extra):
    args = GRPOConfig(
        output_dir=str(tmp_path), report_to=[], use_cpu=True, bf16=False, beta=0.0,
        per_device_train_batch_size=4, num_generations=4, max_completion_length=64, loss_type="dapo",
    )
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": "hi"}]}] * 4)
    return cls(model=model, reward_funcs=_reward, args=args, train_dataset=ds, processing_class=tokenizer, **extra)


@pytest.fixture(scope="module")
def model():
    return tiny_qwen(QWEN_VOCAB, seed=3)


@pytest.mark.parametrize(
    "config,with_sites",
    [
        (loss_settings(), True),  # weights zero
        (loss_settings({"weight": 0.5}, {"weight": 0.5, "loss": "simpo"}), False),  # no sites, no pairs
    ],
)
def test_total_equals_trl_grpo_loss_exactly(config, with_sites, model, tokenizer, tmp_path):
    batch = make_grpo_batch(tokenizer, 4, with_sites=with_sites)
    base = _make(GRPOTrainer, tokenizer, tmp_path / "a", model)
    mixed = _make(_Trainer, tokenizer, tmp_path / "b", model, loss_settings=config)
    for t in (base, mixed):
        t.current_gradient_accumulation_steps = 2
    expected = base._compute_loss(model, batch)
    got = mixed._compute_loss(model, batch)
    assert torch.equal(got, expected)
    assert mixed._metrics["train"]["channels/total"] == [float(expected.detach())]
    assert mixed._metrics["train"]["channels/hints"] == [0.0] and mixed._metrics["train"]["channels/pairs"] == [0.0]


def test_channels_added_scaled_and_logged(model, tokenizer, tmp_path):
    pairs = write_pairs(tmp_path / "pairs.jsonl", 3)
    cfg = loss_settings({"weight": 0.5}, {"weight": 0.25, "loss": "dpo", "path": str(pairs), "per_step": 2})
    batch = make_grpo_batch(tokenizer, 4)
    base = _make(GRPOTrainer, tokenizer, tmp_path / "a", model)
    mixed = _make(_Trainer, tokenizer, tmp_path / "b", model, loss_settings=cfg)
    for t in (base, mixed):
        t.current_gradient_accumulation_steps = 2
    grpo = base._compute_loss(model, batch)
    total = mixed._compute_loss(model, batch)
    m = {k: v[-1] for k, v in mixed._metrics["train"].items() if k.startswith("channels/")}
    assert m["channels/hints/sites"] == 4 and m["channels/pairs/used"] == 2 and m["channels/hints/tokens"] > 0
    assert m["channels/hints"] > 0 and m["channels/pairs"] > 0
    assert m["channels/hints/weight"] == 0.5 and m["channels/pairs/weight"] == 0.25
    assert len(mixed.loss_channels(model)["pairs"].reference) == 3  # DPO references cached once, at step 0
    expected = float(grpo.detach()) + (0.5 * m["channels/hints"] + 0.25 * m["channels/pairs"]) / 2
    assert float(total.detach()) == pytest.approx(expected, rel=1e-5, abs=1e-6)
    assert m["channels/total"] == pytest.approx(float(total.detach()))
    total.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.zero_grad()
