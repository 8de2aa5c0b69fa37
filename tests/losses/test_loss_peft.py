"""The hints and pairs channels with LoRA adapters (TRL's peft_config) on a real GRPOTrainer, CPU.

What each channel means with adapters (documented in trainer_client/config.py PeftSection):
the hints channel's teacher is the CURRENT policy (adapters on, no gradient), so it must equal the
same computation on the merged model; the pairs channel's DPO reference is the INITIAL policy, i.e.
the base model with adapters disabled.
"""

from __future__ import annotations

import copy

import torch

from trainer_client.losses.hint_context import HintRenderer
from trainer_client.losses.hints import load_hint_source
from trainer_client.losses.hints_channel import hints_loss
from trainer_client.losses.model_io import is_peft_model
from trainer_client.losses.pairs import encode_pair, load_pairs
from trainer_client.losses.pairs_channel import ReferenceLogps, pairs_loss

from .channels_support import loss_settings
from .conftest import QWEN_VOCAB, tiny_qwen
from .grpo_trainer_support import LossTrainer, zero_reward
from support.pairs import write_pairs
from .rollouts_support import make_grpo_batch

from peft import LoraConfig


def _trainer(tokenizer, tmp_path, settings):
    from datasets import Dataset
    from trl import GRPOConfig

    args = GRPOConfig(output_dir=str(tmp_path), report_to=[], use_cpu=True, bf16=False, beta=0.0,
                      per_device_train_batch_size=4, num_generations=4, max_completion_length=64, loss_type="dapo")
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": "hi"}]}] * 4)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM")
    return LossTrainer(model=tiny_qwen(QWEN_VOCAB, seed=5), reward_funcs=zero_reward, args=args, train_dataset=ds,
                       processing_class=tokenizer, loss_settings=settings, peft_config=lora)


def _perturb_adapters(model):
    """LoRA B starts at 0 (adapted == base): give it values so adapters change the outputs."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)


def test_channels_with_lora_adapters(tokenizer, tmp_path):
    pairs_file = write_pairs(tmp_path / "pairs.jsonl", 3)
    cfg = loss_settings({"weight": 0.5, "reuse_grpo_hidden": False},
                        {"weight": 0.25, "loss": "dpo", "path": str(pairs_file), "per_step": 2})
    trainer = _trainer(tokenizer, tmp_path / "run", cfg)
    model = trainer.model
    assert is_peft_model(model)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    _perturb_adapters(model)

    # pairs: the DPO reference is the base model (adapters disabled), not the adapted policy
    pairs = [encode_pair(tokenizer, p, i, cfg.pairs.max_length) for i, p in enumerate(load_pairs(pairs_file))]
    base = tiny_qwen(QWEN_VOCAB, seed=5)  # the same base weights, without any adapter
    ref = ReferenceLogps()
    ref.compute(base, pairs, pad_token_id=tokenizer.pad_token_id)
    with torch.no_grad():
        via_peft = pairs_loss(model, pairs, cfg.pairs, reference=None, pad_token_id=tokenizer.pad_token_id)
        via_base = pairs_loss(model, pairs, cfg.pairs, reference=ref, pad_token_id=tokenizer.pad_token_id)
    torch.testing.assert_close(via_peft.loss, via_base.loss)
    assert float(via_peft.margin) != 0.0  # adapters moved the policy away from its reference

    # hints: teacher and student are the adapted policy == the merged model
    batch = make_grpo_batch(tokenizer, 4)
    hints, renderer = load_hint_source(None), HintRenderer(tokenizer)
    merged = copy.deepcopy(model).merge_and_unload()
    with torch.no_grad():
        s_peft = hints_loss(model, batch, cfg.hints, hints, renderer, pad_token_id=tokenizer.pad_token_id)
        s_merged = hints_loss(merged, batch, cfg.hints, hints, renderer, pad_token_id=tokenizer.pad_token_id)
        s_base = hints_loss(base, batch, cfg.hints, hints, renderer, pad_token_id=tokenizer.pad_token_id)
    assert s_peft.n_tokens > 0
    torch.testing.assert_close(s_peft.loss, s_merged.loss, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(s_peft.loss, s_base.loss)  # the teacher is not the frozen base

    # the whole loss in the trainer: finite channels, gradients on adapters only
    trainer.current_gradient_accumulation_steps = 1
    total = trainer._compute_loss(model, batch)
    m = {k: v[-1] for k, v in trainer._metrics["train"].items() if k.startswith("channels/")}
    assert m["channels/hints"] > 0 and m["channels/pairs"] > 0 and m["channels/pairs/used"] == 2
    assert all(torch.isfinite(torch.tensor(v)) for v in m.values())
    assert len(trainer.loss_channels(model)["pairs"].reference) == 0  # PEFT: no cached reference, the base model is at hand
    total.backward()
    grads = {n for n, p in model.named_parameters() if p.grad is not None}
    assert grads and grads <= trainable
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
