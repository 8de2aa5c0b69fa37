"""Channel-3 math: DPO sigmoid and SimPO losses, and response log-probs from the LM head."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from .model_io import final_hidden_states, lm_head_params

__all__ = ["dpo_sigmoid_loss", "response_logps", "simpo_loss"]


def dpo_sigmoid_loss(
    chosen_logps: torch.Tensor,
    rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    """Per-pair DPO loss -log sigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r))) on summed log-probs."""
    logits = (chosen_logps - ref_chosen_logps) - (rejected_logps - ref_rejected_logps)
    return -F.logsigmoid(beta * logits)


def simpo_loss(chosen_avg_logps: torch.Tensor, rejected_avg_logps: torch.Tensor, beta: float, gamma: float) -> torch.Tensor:
    """Per-pair SimPO loss -log sigmoid(beta * (avg_c - avg_r) - gamma) on length-normalized log-probs."""
    return -F.logsigmoid(beta * (chosen_avg_logps - rejected_avg_logps) - gamma)


def _token_logps(hidden: torch.Tensor, targets: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    logits = F.linear(hidden, weight, bias).float()
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logits.logsumexp(-1)


def response_logps(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    response_mask: torch.Tensor,
    chunk_size: int = 256,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of log-probs, token count) of the tokens where response_mask == 1, per row.

    Only response positions are projected onto the vocabulary, `chunk_size` tokens at a time
    (recomputed in the backward), so long prompts cost no vocabulary-sized memory.
    """
    hidden = final_hidden_states(model, input_ids, attention_mask)  # (B, L, H)
    weight, bias = lm_head_params(model)
    mask = response_mask[:, 1:].bool()
    rows, cols = mask.nonzero(as_tuple=True)
    h = hidden[:, :-1][rows, cols]  # position p predicts token p + 1
    targets = input_ids[:, 1:][rows, cols]
    size = chunk_size if chunk_size > 0 else max(h.size(0), 1)
    parts = []
    for s in range(0, h.size(0), size):
        args = (h[s : s + size], targets[s : s + size], weight, bias)
        if torch.is_grad_enabled() and h.requires_grad and h.size(0) > size:
            parts.append(checkpoint(_token_logps, *args, use_reentrant=False))
        else:
            parts.append(_token_logps(*args))
    tok = torch.cat(parts) if parts else hidden.new_zeros(0)
    sums = torch.zeros(input_ids.size(0), device=tok.device, dtype=tok.dtype).index_add(0, rows, tok)
    return sums, mask.sum(-1)
