"""compute_channels without a trainer: composition, gating, scaling, and learning signal."""

from __future__ import annotations

import pytest
import torch

from trainer_client.losses import (
    HintRenderer,
    HintsSettings,
    WeightSchedule,
    compute_channels,
    encode_pair,
    hints_loss,
    load_hint_source,
    load_pairs,
    pairs_loss,
    response_logps,
)
from trainer_client.losses.pairs import collate_pairs

from .channels_support import loss_settings, make_channels
from .conftest import QWEN_VOCAB, tiny_qwen
from support.pairs import write_pairs
from .rollouts_support import make_grpo_batch


@pytest.fixture(scope="module")
def parts(tokenizer):
    return load_hint_source(), HintRenderer(tokenizer)


@pytest.fixture
def records(tmp_path):
    return load_pairs(write_pairs(tmp_path / "p.jsonl", 4))


@pytest.fixture
def pairs(tokenizer, records):
    return [encode_pair(tokenizer, p, i) for i, p in enumerate(records)]


def test_weights_zero_or_inputs_absent_leave_grpo_untouched(qwen_model, tokenizer, records):
    grpo = torch.tensor(1.2345, requires_grad=True)
    batch = make_grpo_batch(tokenizer, 2)
    off = compute_channels(qwen_model, batch, make_channels(tokenizer, records=records), grpo_loss=grpo)
    assert off.total is grpo
    on = make_channels(tokenizer, {"weight": 1}, {"weight": 1, "loss": "simpo"})  # no pairs in the buffer
    no_inputs = compute_channels(qwen_model, make_grpo_batch(tokenizer, 2, with_sites=False), on, grpo_loss=grpo)
    assert no_inputs.total is grpo and no_inputs.counts["hints"]["sites"] == 0 and no_inputs.counts["pairs"]["used"] == 0


def test_total_is_weighted_sum_scaled_for_accumulation(qwen_model, tokenizer, records):
    grpo = torch.tensor(0.5)
    channels = make_channels(tokenizer, {"weight": 0.3}, {"weight": 0.2, "loss": "simpo", "per_step": 2},
                             records=records)
    out = compute_channels(qwen_model, make_grpo_batch(tokenizer, 3), channels, grpo_loss=grpo,
                           gradient_accumulation_steps=4)
    assert out.counts["hints"]["sites"] == 3 and out.counts["hints"]["tokens"] > 0 and out.counts["pairs"]["used"] == 2
    assert float(out.losses["hints"].detach()) > 0 and float(out.losses["pairs"].detach()) > 0
    expected = 0.5 + (0.3 * out.losses["hints"] + 0.2 * out.losses["pairs"]) / 4
    torch.testing.assert_close(out.total, expected)
    m = out.metrics()
    assert {"channels/grpo", "channels/hints", "channels/pairs", "channels/total", "channels/hints/sites",
            "channels/pairs/used", "channels/hints/weight", "channels/pairs/weight"} <= set(m)
    assert m["channels/hints/weight"] == 0.3 and m["channels/pairs/weight"] == 0.2


def test_warmup_schedule_scales_weights():
    cfg = loss_settings({"weight": 0.4, "schedule": WeightSchedule(kind="warmup", warmup_steps=10)}, {"weight": 0.2})
    assert [cfg.hints.weight_at(s) for s in (0, 5, 10, 50)] == [0.0, 0.2, 0.4, 0.4]
    assert cfg.pairs.weight_at(0) == 0.2


def test_empty_hint_teacher_equals_student(qwen_model, tokenizer, parts):
    """With a hint that renders to no tokens the teacher IS the student: divergence 0."""

    class _NoHint:
        def hint(self, site):
            return ""

    renderer = HintRenderer(tokenizer)
    renderer._cache[""] = []
    out = hints_loss(qwen_model, make_grpo_batch(tokenizer, 2), HintsSettings(), _NoHint(), renderer,
                     pad_token_id=tokenizer.pad_token_id)
    assert out.n_tokens > 0 and float(out.loss.detach()) < 1e-6


@pytest.mark.parametrize("divergence", ["jsd", "taid", "eaopd"])
def test_hints_match_full_logits_reference(qwen_model, tokenizer, parts, divergence):
    """The chunked hidden-state path equals the naive full-logits computation on the real batch."""
    batch = make_grpo_batch(tokenizer, 2)
    fast = hints_loss(qwen_model, batch, HintsSettings(divergence=divergence, chunk_size=8), *parts,
                      pad_token_id=tokenizer.pad_token_id)
    naive = hints_loss(qwen_model, batch, HintsSettings(divergence=divergence, chunk_size=0, chunk_backend="native"),
                       *parts, pad_token_id=tokenizer.pad_token_id)
    torch.testing.assert_close(fast.loss, naive.loss, atol=1e-5, rtol=1e-5)


def test_hints_alone_reduce_masked_divergence(tokenizer, parts):
    torch.manual_seed(0)
    model = tiny_qwen(QWEN_VOCAB, seed=1)
    batch = make_grpo_batch(tokenizer, 4)
    channels = make_channels(tokenizer, {"weight": 1.0})
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    values = []
    for _ in range(6):
        out = compute_channels(model, batch, channels)
        values.append(float(out.losses["hints"].detach()))
        opt.zero_grad()
        out.total.backward()
        opt.step()
    final = float(hints_loss(model, batch, channels["hints"].settings, *parts,
                             pad_token_id=tokenizer.pad_token_id).loss.detach())
    assert final < 0.7 * values[0], (values, final)


@pytest.mark.parametrize("loss", ["dpo", "simpo"])
def test_pairs_alone_raise_chosen_minus_rejected_margin(tokenizer, records, pairs, loss):
    model = tiny_qwen(QWEN_VOCAB, seed=2)
    pad = tokenizer.pad_token_id

    def margin():
        ids, attn, resp = collate_pairs(pairs, pad)
        with torch.no_grad():
            s, _ = response_logps(model, ids, attn, resp)
        return float((s[: len(pairs)] - s[len(pairs):]).mean())

    channels = make_channels(tokenizer, pairs={"weight": 1.0, "loss": loss, "per_step": 2}, records=records)
    channels["pairs"].prepare(model)  # DPO: the reference log-probs of the initial policy
    start = margin()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(4):
        out = compute_channels(model, {}, channels, step=step)
        assert out.counts["pairs"]["used"] == 2
        opt.zero_grad()
        out.total.backward()
        opt.step()
    assert margin() > start + 1.0, (start, margin())
    reference = channels["pairs"].reference if loss == "dpo" else None
    final = pairs_loss(model, pairs, channels["pairs"].settings, reference=reference, pad_token_id=pad)
    assert float(final.loss.detach()) < float(out.losses["pairs"].detach()) + 1e-3
