"""The hints channel reading its student side from GRPO's own forward equals running the student again."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from trl import GRPOConfig

from trainer_client.losses import (
    HintRenderer,
    HintsSettings,
    build_hint_batch,
    hints_loss,
    load_hint_source,
)
from trainer_client.losses.model_io import backbone_of, capture_final_hidden, final_hidden_states
from trainer_client.losses.hint_context import parse_error_sites

from .channels_support import loss_settings
from .conftest import QWEN_VOCAB, tiny_qwen
from .grpo_trainer_support import LossTrainer as _Trainer
from .grpo_trainer_support import zero_reward as _reward
from .rollouts_support import make_grpo_batch

TOL = dict(atol=1e-5, rtol=1e-5)


def _trainer(tokenizer, tmp_path, model, cfg):
    args = GRPOConfig(
        output_dir=str(tmp_path), report_to=[], use_cpu=True, bf16=False, beta=0.0,
        per_device_train_batch_size=4, num_generations=4, max_completion_length=64, loss_type="dapo",
    )
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": "hi"}]}] * 4)
    t = _Trainer(model=model, reward_funcs=_reward, args=args, train_dataset=ds, processing_class=tokenizer, loss_settings=cfg)
    t.current_gradient_accumulation_steps = 2
    return t


def _grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.fixture(scope="module")
def parts(tokenizer):
    return load_hint_source(), HintRenderer(tokenizer)


def _hint_batch(tokenizer, parts, batch):
    return build_hint_batch(
        batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"], batch["completion_mask"],
        parse_error_sites(batch["error_sites"], batch["completion_ids"].size(0)), *parts,
        tool_mask=batch["tool_mask"], pad_token_id=tokenizer.pad_token_id,
    )


def test_context_positions_point_at_the_same_tokens(tokenizer, parts):
    """Each counted token is predicted at context_positions in the (prompt | completion) layout."""
    batch = make_grpo_batch(tokenizer, 4)  # prompts of different lengths: left padding
    sb = _hint_batch(tokenizer, parts, batch)
    assert sb is not None and sb.context_positions.numel() == sb.n_tokens
    context = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1).reshape(-1)
    student = sb.student_input_ids.reshape(-1)
    assert torch.equal(context[sb.context_positions + 1], student[sb.student_positions + 1])
    assert torch.equal(context[sb.context_positions], student[sb.student_positions])


def test_sequences_stop_at_the_last_counted_token(tokenizer, parts):
    batch = make_grpo_batch(tokenizer, 2)
    full = _hint_batch(tokenizer, parts, batch)
    cut = 5  # the last 5 generated tokens of row 0 become tool output: not counted, not needed
    n0 = int(batch["completion_mask"][0].sum())
    batch["tool_mask"][0, n0 - cut : n0] = 0
    short = _hint_batch(tokenizer, parts, batch)
    lengths = lambda b: b.teacher_attention_mask.sum(1).tolist()  # noqa: E731
    assert lengths(short)[0] == lengths(full)[0] - cut and lengths(short)[1] == lengths(full)[1]
    assert short.student_attention_mask.sum(1).tolist()[0] == full.student_attention_mask.sum(1).tolist()[0] - cut
    assert short.n_tokens == full.n_tokens - cut


@pytest.mark.parametrize("divergence", ["jsd", "eaopd"])
def test_hints_from_grpo_hidden_equal_own_student_forward(tokenizer, parts, divergence):
    """Values and gradients of the reuse path equal the separate-forward reference within 1e-5."""
    model = tiny_qwen(QWEN_VOCAB, seed=5)
    batch = make_grpo_batch(tokenizer, 4)
    cfg = HintsSettings(divergence=divergence, chunk_size=16)
    ref = hints_loss(model, batch, cfg, *parts, pad_token_id=tokenizer.pad_token_id)
    ref.loss.backward()
    ref_grads = _grads(model)
    model.zero_grad()

    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    hidden = final_hidden_states(model, ids, attn)
    fast = hints_loss(model, batch, cfg, *parts, pad_token_id=tokenizer.pad_token_id, student_hidden=hidden)
    fast.loss.backward()
    assert fast.n_tokens == ref.n_tokens > 0 and fast.n_sites == ref.n_sites
    assert float(ref.loss.detach()) > 0
    torch.testing.assert_close(fast.loss, ref.loss, **TOL)
    got = _grads(model)
    assert set(got) == set(ref_grads)
    for name, g in ref_grads.items():
        torch.testing.assert_close(got[name], g, **TOL, msg=lambda m: f"{name}: {m}")
    with pytest.raises(ValueError, match="student_hidden"):
        hints_loss(model, batch, cfg, *parts, pad_token_id=tokenizer.pad_token_id, student_hidden=hidden[:, 1:])


def test_trainer_reuses_grpo_forward_and_matches_reference(tokenizer, tmp_path):
    """In the mixin: one backbone forward fewer, same total and gradients within 1e-5."""
    model = tiny_qwen(QWEN_VOCAB, seed=7)
    batch = make_grpo_batch(tokenizer, 4)
    calls = []
    backbone = backbone_of(model)
    assert backbone is model.model
    counter = backbone.register_forward_pre_hook(lambda m, a, k: calls.append(1), with_kwargs=True)
    results = {}
    try:
        for reuse in (False, True):
            t = _trainer(tokenizer, tmp_path / str(reuse), model, loss_settings({"weight": 0.5, "reuse_grpo_hidden": reuse}))
            calls.clear()
            total = t._compute_loss(model, batch)
            n_calls = len(calls)
            total.backward()
            m = {k: v[-1] for k, v in t._metrics["train"].items() if k.startswith("channels/")}
            results[reuse] = (total.detach(), _grads(model), n_calls, m)
            model.zero_grad()
            assert len(backbone._forward_hooks) == 0  # the capture hook is gone after the step
    finally:
        counter.remove()
    (ref_total, ref_grads, ref_calls, ref_m), (total, grads, n_calls, m) = results[False], results[True]
    assert ref_calls == 3 and n_calls == 2  # GRPO + student + teacher  vs  GRPO + teacher
    assert m["channels/hints/tokens"] == ref_m["channels/hints/tokens"] > 0 and ref_m["channels/hints"] > 0
    assert m["channels/hints"] == pytest.approx(ref_m["channels/hints"], rel=1e-5, abs=1e-6)
    assert m["channels/grpo"] == ref_m["channels/grpo"]
    torch.testing.assert_close(total, ref_total, **TOL)
    assert set(grads) == set(ref_grads)
    for name, g in ref_grads.items():
        torch.testing.assert_close(grads[name], g, **TOL, msg=lambda msg: f"{name}: {msg}")


def test_capture_is_off_when_disabled(small_model):
    ids = torch.randint(0, 500, (2, 7))
    with capture_final_hidden(small_model, enabled=False) as captured:
        small_model(input_ids=ids)
    assert captured == []
    with capture_final_hidden(small_model) as captured:
        small_model(input_ids=ids)
    assert len(captured) == 1 and captured[0].shape == (2, 7, 64) and captured[0].requires_grad
    assert len(small_model.model._forward_hooks) == 0
