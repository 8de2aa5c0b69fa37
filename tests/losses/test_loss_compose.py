"""compute_channels without a trainer: composition, gating, scaling, and learning signal."""

from __future__ import annotations

import pytest
import torch

from trainer_client.losses import (
    HintRenderer,
    LossConfig,
    ReferenceLogps,
    WeightSchedule,
    compute_channels,
    encode_pair,
    load_hint_source,
    load_pairs,
    pair_preference_loss,
    response_logps,
    sdpo_loss,
)
from trainer_client.losses.pairs import collate_pairs

from .conftest import QWEN_VOCAB, tiny_qwen
from .pairs_data import write_pairs
from .rollouts import make_grpo_batch


@pytest.fixture(scope="module")
def parts(tokenizer):
    return load_hint_source(), HintRenderer(tokenizer)


@pytest.fixture
def pairs(tokenizer, tmp_path):
    return [encode_pair(tokenizer, p, i) for i, p in enumerate(load_pairs(write_pairs(tmp_path / "p.jsonl", 4)))]


def _kw(parts, tokenizer):
    return dict(hint_source=parts[0], renderer=parts[1], pad_token_id=tokenizer.pad_token_id)


def test_weights_zero_or_inputs_absent_leave_grpo_untouched(qwen_model, tokenizer, parts, pairs):
    grpo = torch.tensor(1.2345, requires_grad=True)
    batch = make_grpo_batch(tokenizer, 2)
    off = compute_channels(qwen_model, batch, LossConfig(alpha=0, beta=0), grpo_loss=grpo, pairs=pairs, **_kw(parts, tokenizer))
    assert off.total is grpo
    no_inputs = compute_channels(qwen_model, make_grpo_batch(tokenizer, 2, with_sites=False), LossConfig(alpha=1, beta=1, pref_loss="simpo"), grpo_loss=grpo, pairs=[], **_kw(parts, tokenizer))
    assert no_inputs.total is grpo and no_inputs.n_error_sites == 0 and no_inputs.n_pairs == 0


def test_total_is_weighted_sum_scaled_for_accumulation(qwen_model, tokenizer, parts, pairs):
    grpo = torch.tensor(0.5)
    cfg = LossConfig(alpha=0.3, beta=0.2, pref_loss="simpo")
    out = compute_channels(qwen_model, make_grpo_batch(tokenizer, 3), cfg, grpo_loss=grpo, pairs=pairs[:2], gradient_accumulation_steps=4, **_kw(parts, tokenizer))
    assert out.n_error_sites == 3 and out.n_sdpo_tokens > 0 and out.n_pairs == 2
    assert float(out.sdpo.detach()) > 0 and float(out.replay.detach()) > 0
    expected = 0.5 + (0.3 * out.sdpo + 0.2 * out.replay) / 4
    torch.testing.assert_close(out.total, expected)
    m = out.metrics()
    assert {"channels/grpo", "channels/sdpo", "channels/replay", "channels/total", "channels/error_sites", "channels/pairs"} <= set(m)


def test_warmup_schedule_scales_weights():
    cfg = LossConfig(alpha=0.4, alpha_schedule=WeightSchedule("warmup", 10), beta=0.2)
    assert [cfg.alpha_at(s) for s in (0, 5, 10, 50)] == [0.0, 0.2, 0.4, 0.4]
    assert cfg.beta_at(0) == 0.2


def test_empty_hint_teacher_equals_student(qwen_model, tokenizer, parts):
    """With a hint that renders to no tokens the teacher IS the student: divergence 0."""

    class _NoHint:
        def hint(self, site):
            return ""

    renderer = HintRenderer(tokenizer)
    renderer._cache[""] = []
    out = sdpo_loss(qwen_model, make_grpo_batch(tokenizer, 2), LossConfig(), _NoHint(), renderer, pad_token_id=tokenizer.pad_token_id)
    assert out.n_tokens > 0 and float(out.loss.detach()) < 1e-6


@pytest.mark.parametrize("divergence", ["jsd", "taid", "eaopd"])
def test_sdpo_matches_full_logits_reference(qwen_model, tokenizer, parts, divergence):
    """The chunked hidden-state path equals the naive full-logits computation on the real batch."""
    batch = make_grpo_batch(tokenizer, 2)
    fast = sdpo_loss(qwen_model, batch, LossConfig(divergence=divergence, chunk_size=8), *parts, pad_token_id=tokenizer.pad_token_id)
    naive = sdpo_loss(qwen_model, batch, LossConfig(divergence=divergence, chunk_size=0, chunk_backend="native"), *parts, pad_token_id=tokenizer.pad_token_id)
    torch.testing.assert_close(fast.loss, naive.loss, atol=1e-5, rtol=1e-5)


def test_channel2_alone_reduces_masked_divergence(tokenizer, parts):
    torch.manual_seed(0)
    model = tiny_qwen(QWEN_VOCAB, seed=1)
    batch = make_grpo_batch(tokenizer, 4)
    cfg = LossConfig(alpha=1.0, beta=0.0)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    values = []
    for _ in range(6):
        out = compute_channels(model, batch, cfg, **_kw(parts, tokenizer))
        values.append(float(out.sdpo.detach()))
        opt.zero_grad()
        out.total.backward()
        opt.step()
    final = float(sdpo_loss(model, batch, cfg, *parts, pad_token_id=tokenizer.pad_token_id).loss.detach())
    assert final < 0.7 * values[0], (values, final)


@pytest.mark.parametrize("pref_loss", ["dpo", "simpo"])
def test_channel3_alone_raises_chosen_minus_rejected_margin(tokenizer, pairs, pref_loss):
    model = tiny_qwen(QWEN_VOCAB, seed=2)
    pad = tokenizer.pad_token_id

    def margin():
        ids, attn, resp = collate_pairs(pairs, pad)
        with torch.no_grad():
            s, _ = response_logps(model, ids, attn, resp)
        return float((s[: len(pairs)] - s[len(pairs):]).mean())

    ref = ReferenceLogps()
    ref.compute(model, pairs, pad_token_id=pad)
    cfg = LossConfig(alpha=0.0, beta=1.0, pref_loss=pref_loss)
    start = margin()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(4):
        out = compute_channels(model, {}, cfg, pairs=pairs[step % 2 * 2 : step % 2 * 2 + 2], reference=ref, pad_token_id=pad)
        opt.zero_grad()
        out.total.backward()
        opt.step()
    assert margin() > start + 1.0, (start, margin())
    assert float(pair_preference_loss(model, pairs, cfg, reference=ref, pad_token_id=pad).loss.detach()) < float(out.replay.detach()) + 1e-3
