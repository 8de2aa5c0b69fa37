"""The hints channel's divergence from hidden states and the LM head, without full B x T x V logits.

Callers pass only the positions that count (compacted, shape (N, H)); the logits of at most
`chunk_size` tokens exist at any time, in the forward and (through activation
checkpointing) in the backward. Plain JSD can instead run on TRL's fused
`_chunked_divergence_loss`, which tiles the vocabulary as well.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from .divergences import per_token_divergence

__all__ = ["divergence_from_hidden", "per_token_divergence_from_hidden"]


def _chunk_divergence(
    h_s: torch.Tensor,
    h_t: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    config: Any,  # HintsSettings (hints_channel.py)
    taid_t: float | None,
) -> torch.Tensor:
    student_logits = F.linear(h_s, weight, bias)
    with torch.no_grad():  # the teacher shares the head but never gets a gradient
        teacher_logits = F.linear(h_t, weight, bias)
    return per_token_divergence(student_logits, teacher_logits, config, taid_t=taid_t)


def per_token_divergence_from_hidden(
    student_hidden: torch.Tensor,
    teacher_hidden: torch.Tensor,
    lm_head_weight: torch.Tensor,
    config: Any,  # HintsSettings (hints_channel.py)
    lm_head_bias: torch.Tensor | None = None,
    taid_t: float | None = None,
) -> torch.Tensor:
    """Per-token divergence (N,) from hidden states (N, H), `config.chunk_size` tokens at a time.

    chunk_size = 0 projects every token at once (the naive reference).
    """
    teacher_hidden = teacher_hidden.detach()
    n = student_hidden.size(0)
    size = config.chunk_size or max(n, 1)
    if size >= n:
        return _chunk_divergence(student_hidden, teacher_hidden, lm_head_weight, lm_head_bias, config, taid_t)
    needs_grad = torch.is_grad_enabled() and (student_hidden.requires_grad or lm_head_weight.requires_grad)
    parts = []
    for start in range(0, n, size):
        args = (student_hidden[start : start + size], teacher_hidden[start : start + size], lm_head_weight, lm_head_bias)
        if needs_grad:  # keep no chunk's logits alive for the backward: recompute them there
            parts.append(checkpoint(_chunk_divergence, *args, config, taid_t, use_reentrant=False))
        else:
            parts.append(_chunk_divergence(*args, config, taid_t))
    return torch.cat(parts)


def divergence_from_hidden(
    student_hidden: torch.Tensor,
    teacher_hidden: torch.Tensor,
    lm_head_weight: torch.Tensor,
    config: Any,  # HintsSettings (hints_channel.py)
    lm_head_bias: torch.Tensor | None = None,
    taid_t: float | None = None,
) -> torch.Tensor:
    """Sum of the per-token divergence over all N given tokens (a scalar).

    Uses TRL's fused kernel when `config.chunk_backend` asks for it (or `auto` and the
    divergence is plain JSD), else `per_token_divergence_from_hidden`.
    """
    use_trl = config.chunk_backend == "trl" or (config.chunk_backend == "auto" and config.trl_backend_applies)
    if student_hidden.size(0) == 0:
        return student_hidden.sum() * 0.0 + lm_head_weight.sum() * 0.0
    if use_trl and config.chunk_size > 0:
        from trl.trainer.distillation_trainer import _chunked_divergence_loss

        ones = torch.ones(1, student_hidden.size(0), device=student_hidden.device)
        loss, _, _ = _chunked_divergence_loss(
            student_hidden.unsqueeze(0),
            teacher_hidden.detach().unsqueeze(0),
            lm_head_weight,
            lm_head_weight.detach(),
            ones,
            beta=config.jsd_beta,
            num_items_in_batch=1,  # -> the sum over tokens
            student_lm_head_bias=lm_head_bias,
            teacher_lm_head_bias=None if lm_head_bias is None else lm_head_bias.detach(),
            temperature=config.temperature,
        )
        return loss
    return per_token_divergence_from_hidden(
        student_hidden, teacher_hidden, lm_head_weight, config, lm_head_bias=lm_head_bias, taid_t=taid_t
    ).sum()
