"""Pair records: loading, chat-template rendering, sampling, reference cache."""

from __future__ import annotations

import pytest
import torch

from trainer_client.losses import (
    PairSampler,
    PairsSettings,
    ReferenceLogps,
    collate_pairs,
    encode_pair,
    load_pairs,
    pairs_loss,
    response_logps,
)

from support.pairs import write_pairs


def test_load_and_render_pairs(tokenizer, tmp_path):
    pairs = load_pairs(write_pairs(tmp_path / "p.jsonl", 3))
    assert [p.state_id for p in pairs] == ["ep0:2", "ep1:2", "ep2:2"]
    assert pairs[0].chosen.tool_name == "view" and pairs[0].provenance.episode_id  # the one pair type, typed
    enc = encode_pair(tokenizer, pairs[0], 0)  # tool-call arguments given as a JSON string render as an object
    prompt = tokenizer.decode(enc.prompt_ids)
    assert prompt.endswith("<|im_start|>assistant\n") and '"name": "view"' in prompt  # tools rendered
    assert tokenizer.decode(enc.chosen_ids) == '<tool_call>\n{"name": "view", "arguments": {"path": "module_0.py"}}\n</tool_call><|im_end|>\n'
    assert tokenizer.decode(enc.rejected_ids).startswith('<tool_call>\n{"name": "bash"')


def test_long_prompts_keep_newest_tokens(tokenizer, tmp_path):
    pair = load_pairs(write_pairs(tmp_path / "p.jsonl", 1))[0]
    full = encode_pair(tokenizer, pair, 0)
    short = encode_pair(tokenizer, pair, 0, max_length=60)
    assert len(short.prompt_ids) + max(len(short.chosen_ids), len(short.rejected_ids)) == 60
    assert short.prompt_ids == full.prompt_ids[-len(short.prompt_ids):]


def test_bad_record_names_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"state_id": "x"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        load_pairs(path)


def test_sampler_k_per_step_covers_epoch_deterministically():
    a, b = PairSampler(10, 3, seed=7), PairSampler(10, 3, seed=7)
    steps = [a.next() for _ in range(4)]
    assert steps == [b.next() for _ in range(4)]
    assert all(len(s) == 3 and len(set(s)) == 3 for s in steps)
    assert set(i for s in steps[:3] for i in s) | set(steps[3][:1]) == set(range(10))
    assert PairSampler(2, 5).next().__len__() == 2


def test_reference_cache_and_dpo_at_reference_is_log2(qwen_model, tokenizer, tmp_path):
    raw = load_pairs(write_pairs(tmp_path / "p.jsonl", 3))
    pairs = [encode_pair(tokenizer, p, i) for i, p in enumerate(raw)]
    ref = ReferenceLogps()
    ref.compute(qwen_model, pairs, batch_size=2, pad_token_id=tokenizer.pad_token_id)
    assert len(ref) == 3
    ids, attn, resp = collate_pairs(pairs[:1], tokenizer.pad_token_id)
    with torch.no_grad():
        direct, _ = response_logps(qwen_model, ids, attn, resp)
    torch.testing.assert_close(ref.get(pairs[:1])[0], direct[:1])
    out = pairs_loss(qwen_model, pairs, PairsSettings(loss="dpo"), reference=ref, pad_token_id=tokenizer.pad_token_id)
    # the policy is the reference: every DPO logit is 0 -> loss log 2, margin 0
    torch.testing.assert_close(out.loss.detach(), torch.tensor(0.6931472), atol=1e-5, rtol=0)
    assert abs(out.margin) < 1e-4 and out.n_pairs == 3
    with pytest.raises(KeyError):
        ReferenceLogps().get(pairs)
