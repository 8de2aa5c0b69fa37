"""Divergence math: parity with TRL's GKD JSD, TAID endpoints, entropy-aware OPD properties."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from trl.experimental.gkd import GKDTrainer

from trainer_client.losses import (
    HintsSettings,
    entropy_aware_opd,
    generalized_jsd,
    masked_mean,
    per_token_divergence,
    taid_forward_kl,
)


def _logits(seed: int, shape=(2, 7, 50), scale: float = 3.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g) * scale


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_jsd_matches_trl_gkd(beta, temperature):
    s, t = _logits(0), _logits(1)
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[0, :3] = 0
    mask[1, 5:] = 0
    labels = torch.where(mask.bool(), 1, -100)
    ref = GKDTrainer.generalized_jsd_loss(s, t, labels=labels, beta=beta, temperature=temperature)
    ours = masked_mean(generalized_jsd(s, t, beta=beta, temperature=temperature), mask)
    torch.testing.assert_close(ours, ref, atol=1e-6, rtol=1e-5)


def test_jsd_gradient_matches_trl_gkd():
    s1 = _logits(0).requires_grad_(True)
    s2 = s1.detach().clone().requires_grad_(True)
    t = _logits(1)
    labels = torch.ones(2, 7, dtype=torch.long)  # with labels GKD averages over valid tokens
    GKDTrainer.generalized_jsd_loss(s1, t, labels=labels, beta=0.5).backward()
    masked_mean(generalized_jsd(s2, t, beta=0.5), torch.ones(2, 7)).backward()
    torch.testing.assert_close(s2.grad, s1.grad, atol=1e-7, rtol=1e-5)


def test_jsd_is_zero_for_identical_and_positive_otherwise():
    s = _logits(0)
    assert generalized_jsd(s, s.clone()).abs().max() < 1e-6
    assert (generalized_jsd(s, _logits(1)) > 1e-4).all()


def test_token_clip_caps_each_token():
    s, t = _logits(0, scale=8.0), _logits(1, scale=8.0)
    raw = generalized_jsd(s, t, beta=0.0)
    clipped = generalized_jsd(s, t, beta=0.0, token_clip=0.5)
    assert raw.max() > 0.5
    torch.testing.assert_close(clipped, raw.clamp(max=0.5))


def test_teacher_top_k_restricts_to_teacher_support():
    s, t = _logits(0), _logits(1)
    k = 5
    idx = t.topk(k, dim=-1).indices
    expected = generalized_jsd(s.gather(-1, idx), t.gather(-1, idx))
    torch.testing.assert_close(generalized_jsd(s, t, teacher_top_k=k), expected)
    # student mass outside the teacher's top-k does not matter
    bumped = s.clone()
    outside = torch.ones_like(s, dtype=torch.bool).scatter(-1, idx, False)
    bumped[outside] += 5.0
    torch.testing.assert_close(generalized_jsd(bumped, t, teacher_top_k=k), expected)


def test_taid_t0_carries_no_teacher_signal():
    s = _logits(0).requires_grad_(True)
    teacher_a, teacher_b = torch.zeros(2, 7, 50), torch.zeros(2, 7, 50)
    teacher_a[..., 0], teacher_b[..., 3] = 10.0, 10.0
    la, lb = taid_forward_kl(s, teacher_a, t=0.0), taid_forward_kl(s, teacher_b, t=0.0)
    torch.testing.assert_close(la, lb)
    assert la.abs().max() < 1e-6
    (g,) = torch.autograd.grad(la.sum(), s)
    assert g.abs().max() < 1e-6


def test_taid_t1_is_forward_kl():
    s, t = _logits(0).requires_grad_(True), _logits(1)
    fkl = F.kl_div(F.log_softmax(s, -1), F.log_softmax(t, -1), reduction="none", log_target=True).sum(-1)
    torch.testing.assert_close(taid_forward_kl(s, t, t=1.0), fkl)
    torch.testing.assert_close(taid_forward_kl(s, t, t=1.0), generalized_jsd(s, t, beta=0.0))


def test_taid_intermediate_t_moves_with_teacher():
    s = _logits(0)
    values = [float(taid_forward_kl(s, _logits(1), t=t).mean()) for t in (0.0, 0.3, 0.7, 1.0)]
    assert values == sorted(values) and values[0] < values[-1]


def test_eaopd_zero_when_student_equals_teacher():
    s = _logits(0)
    assert entropy_aware_opd(s, s.clone()).abs().max() < 1e-6


def test_eaopd_weights_one_hot_and_uniform_teachers():
    s = _logits(0)
    one_hot = torch.full((2, 7, 50), -1e4)
    one_hot[..., 7] = 1e4  # entropy 0 -> w = 0 -> reverse KL
    uniform = torch.zeros(2, 7, 50)  # entropy log V -> w = 1 -> forward KL
    torch.testing.assert_close(entropy_aware_opd(s, one_hot), generalized_jsd(s, one_hot, beta=1.0))
    torch.testing.assert_close(entropy_aware_opd(s, uniform), generalized_jsd(s, uniform, beta=0.0))
    # h_max = 2 * log V: a uniform teacher gets w = 0.5
    mix = 0.5 * generalized_jsd(s, uniform, beta=0.0) + 0.5 * generalized_jsd(s, uniform, beta=1.0)
    torch.testing.assert_close(entropy_aware_opd(s, uniform, h_max=2 * math.log(50)), mix)


def test_per_token_divergence_dispatches_on_config():
    s, t = _logits(0), _logits(1)
    torch.testing.assert_close(
        per_token_divergence(s, t, HintsSettings(divergence="jsd", jsd_beta=0.3)), generalized_jsd(s, t, beta=0.3)
    )
    torch.testing.assert_close(
        per_token_divergence(s, t, HintsSettings(divergence="taid", taid_t=0.6)), taid_forward_kl(s, t, t=0.6)
    )
    torch.testing.assert_close(per_token_divergence(s, t, HintsSettings(divergence="eaopd")), entropy_aware_opd(s, t))


def test_teacher_never_gets_gradient():
    s, t = _logits(0).requires_grad_(True), _logits(1).requires_grad_(True)
    for div in ("jsd", "taid", "eaopd"):
        per_token_divergence(s, t, HintsSettings(divergence=div, taid_t=0.5)).sum().backward()
    assert t.grad is None and s.grad is not None
