"""Per-token divergences between student and teacher next-token distributions.

Every function takes logits of shape (..., V) and returns one value per token (...), so the
same code runs on full logits and on the chunks of `chunked.py`. The teacher is always
detached: gradients reach the student only.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F


__all__ = [
    "entropy_aware_opd",
    "generalized_jsd",
    "masked_mean",
    "per_token_divergence",
    "taid_forward_kl",
]


def _kl(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """KL(p || q) over the last dim from log-probabilities (0 * log 0 taken as 0)."""
    return (log_p.exp() * (log_p - log_q)).sum(-1)


def _restrict_to_teacher_top_k(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Both logits gathered on the teacher's top-k token ids (renormalized by the softmax)."""
    if k <= 0 or k >= teacher_logits.size(-1):
        return student_logits, teacher_logits
    top_t, idx = teacher_logits.topk(k, dim=-1)
    return student_logits.gather(-1, idx), top_t


def generalized_jsd(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    beta: float = 0.5,
    temperature: float = 1.0,
    teacher_top_k: int = 0,
    token_clip: float | None = None,
) -> torch.Tensor:
    """Generalized JSD per token, as TRL's `GKDTrainer.generalized_jsd_loss` defines it.

    beta = 0: KL(teacher || student); beta = 1: KL(student || teacher); otherwise
    beta * KL(T || M) + (1 - beta) * KL(S || M) with M = (1 - beta) * S + beta * T.
    """
    teacher_logits = teacher_logits.detach()
    student_logits, teacher_logits = _restrict_to_teacher_top_k(student_logits, teacher_logits, teacher_top_k)
    log_s = F.log_softmax(student_logits.float() / temperature, dim=-1)
    log_t = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
    if beta == 0.0:
        div = _kl(log_t, log_s)
    elif beta == 1.0:
        div = _kl(log_s, log_t)
    else:
        log_m = torch.logaddexp(log_s + math.log1p(-beta), log_t + math.log(beta))
        div = beta * _kl(log_t, log_m) + (1.0 - beta) * _kl(log_s, log_m)
    return div if token_clip is None else div.clamp(max=token_clip)


def taid_forward_kl(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    t: float,
    temperature: float = 1.0,
    teacher_top_k: int = 0,
    token_clip: float | None = None,
) -> torch.Tensor:
    """TAID (arXiv:2501.16937): KL(p_t || student) with p_t = softmax((1-t)*sg(s) + t*teacher).

    The interpolation is in logit space against the *detached current* student, as upstream.
    We return the true KL (upstream returns the cross-entropy, which differs by the entropy
    of p_t, a constant for the student's gradient): at t = 0 the loss is exactly 0.
    """
    if not 0.0 <= t <= 1.0:
        raise ValueError(f"TAID t must be in [0, 1], got {t}")
    teacher_logits = teacher_logits.detach()
    student_logits, teacher_logits = _restrict_to_teacher_top_k(student_logits, teacher_logits, teacher_top_k)
    s = student_logits.float() / temperature
    target = (1.0 - t) * s.detach() + t * (teacher_logits.float() / temperature)
    div = _kl(F.log_softmax(target, dim=-1), F.log_softmax(s, dim=-1))
    return div if token_clip is None else div.clamp(max=token_clip)


def entropy_aware_opd(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    h_max: float | None = None,
    temperature: float = 1.0,
    teacher_top_k: int = 0,
    token_clip: float | None = None,
) -> torch.Tensor:
    """Entropy-aware on-policy distillation: w * KL(T||S) + (1 - w) * KL(S||T) per token.

    w = clamp(H(teacher) / h_max, 0, 1), detached: a confident (low-entropy) teacher gets the
    mode-seeking reverse KL, an uncertain one the mode-covering forward KL. h_max defaults to
    log V, the entropy of the uniform distribution over the (possibly top-k) support.
    """
    teacher_logits = teacher_logits.detach()
    student_logits, teacher_logits = _restrict_to_teacher_top_k(student_logits, teacher_logits, teacher_top_k)
    log_s = F.log_softmax(student_logits.float() / temperature, dim=-1)
    log_t = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
    h_t = -(log_t.exp() * log_t).sum(-1)
    h_max = math.log(log_t.size(-1)) if h_max is None else h_max
    w = (h_t / h_max).clamp(0.0, 1.0)
    div = w * _kl(log_t, log_s) + (1.0 - w) * _kl(log_s, log_t)
    return div if token_clip is None else div.clamp(max=token_clip)


def per_token_divergence(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    config: Any,  # HintsSettings (hints_channel.py)
    taid_t: float | None = None,
) -> torch.Tensor:
    """The hints channel's divergence selected by `config.divergence`, one value per token."""
    common = dict(
        temperature=config.temperature, teacher_top_k=config.teacher_top_k, token_clip=config.token_clip
    )
    if config.divergence == "jsd":
        return generalized_jsd(student_logits, teacher_logits, beta=config.jsd_beta, **common)
    if config.divergence == "taid":
        t = config.taid_t if taid_t is None else taid_t
        return taid_forward_kl(student_logits, teacher_logits, t=t, **common)
    if config.divergence == "eaopd":
        return entropy_aware_opd(student_logits, teacher_logits, h_max=config.eaopd_h_max, **common)
    raise ValueError(f"unknown divergence {config.divergence!r}")


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `values` over mask != 0 (0 when the mask is empty, still differentiable)."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)
