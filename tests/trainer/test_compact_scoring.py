"""Completion-only scoring on the CPU (trainer_client.trainer.compact_fused_lm_head).

TRL's fused LM head, on a non-Triton device, projects every position through the LM head;
the compact path projects only the labelled ones. These tests pin that the compact path is
really taken on the CPU (the kernel sees only the labelled rows) and that it changes nothing:
log-probs, entropies and gradients equal to the full path's.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def fused_model():
    import torch
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from trainer_client.tiny_qwen import tiny_qwen_dir

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_qwen_dir()), dtype=torch.float32)
    add_fused_lm_head(model, temperature=0.7, outputs=("log_probs", "entropy"))
    return model


def _score(model, compact: bool):
    import torch

    from trainer_client.trainer import compact_fused_lm_head

    g = torch.Generator().manual_seed(1)
    input_ids = torch.randint(0, 1000, (3, 40), generator=g)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, :5] = 0  # left padding, as GRPO batches have
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    labels[:, :-7] = -100  # score only the last 7 positions ("the completion")
    model.zero_grad()
    if compact:
        with compact_fused_lm_head():
            out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, fused_lm_head=True)
    else:
        out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, fused_lm_head=True)
    (out.log_probs.sum() + 0.1 * out.entropy.sum()).backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.log_probs.detach(), out.entropy.detach(), grads, int((labels[:, 1:] != -100).sum())


def test_compact_path_is_taken_on_cpu_and_sees_only_labelled_rows(fused_model, monkeypatch):
    import trl.trainer.utils as trl_utils

    rows = []
    real_apply = trl_utils._ChunkedLogProbFunction.apply

    def spy(hidden, *args):
        rows.append(hidden.shape[0])
        return real_apply(hidden, *args)

    monkeypatch.setattr(trl_utils._ChunkedLogProbFunction, "apply", spy)
    *_, labelled = _score(fused_model, compact=False)
    *_, _ = _score(fused_model, compact=True)
    assert rows == [3 * 39, labelled], rows  # full: every shifted position; compact: the labelled ones
    assert labelled == 3 * 7


def test_compact_scoring_equals_full_scoring(fused_model):
    import torch

    lp_full, ent_full, g_full, _ = _score(fused_model, compact=False)
    lp_compact, ent_compact, g_compact, _ = _score(fused_model, compact=True)
    torch.testing.assert_close(lp_compact, lp_full, rtol=0, atol=1e-5)
    torch.testing.assert_close(ent_compact, ent_full, rtol=0, atol=1e-5)
    assert g_full.keys() == g_compact.keys() and len(g_full) > 5
    for name in g_full:
        torch.testing.assert_close(g_compact[name], g_full[name], rtol=1e-4, atol=1e-6, msg=name)
    assert float(lp_full[:, -7:].abs().sum()) > 0  # the scored positions carry real values


def test_trainer_restores_trl_state_after_scoring():
    import trl.trainer.utils as trl_utils

    from trainer_client.trainer import compact_fused_lm_head

    before = trl_utils._use_triton
    with compact_fused_lm_head():
        import torch

        assert trl_utils._use_triton(torch.device("cpu")) is True
    assert trl_utils._use_triton is before
