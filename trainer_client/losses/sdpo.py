"""Channel 2: hint-conditioned self-distillation at error sites (SDPO / OPSD style).

The teacher is the same model on the hint-conditioned context, without gradient; the loss
is the configured divergence averaged over the student's own tokens after each rollout's
first error site, computed from hidden states in chunks.

The student side needs no forward of its own when the caller already ran the policy over
the rollouts (the GRPO forward): pass its final hidden states as `student_hidden` and only the
counted positions are read from them (the gradient flows back through that forward). Without
it, the student rollouts are run once more here (the reference path).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch

from .chunked import divergence_from_hidden
from .config import LossConfig
from .hints import HintSource
from .model_io import final_hidden_states, lm_head_params
from .teacher_context import HintRenderer, build_sdpo_batch, parse_error_sites

__all__ = ["SdpoOutput", "sdpo_loss"]


@dataclass
class SdpoOutput:
    loss: torch.Tensor  # mean divergence per counted token (0 when none)
    n_sites: int
    n_tokens: int


def sdpo_loss(
    model: Any,
    inputs: Mapping[str, Any],
    config: LossConfig,
    hint_source: HintSource,
    renderer: HintRenderer,
    taid_t: float | None = None,
    pad_token_id: int = 0,
    student_hidden: torch.Tensor | None = None,
) -> SdpoOutput:
    """Channel-2 loss for a GRPO-style batch carrying `error_sites` (see teacher_context).

    student_hidden: optional (B, P + C, H) final (post-norm) hidden states of the student
    over cat(prompt_ids, completion_ids) with cat(prompt_mask, completion_mask), as the
    trainer's own forward computed them, with their graph.
    """
    completion_ids = inputs["completion_ids"]
    device = completion_ids.device
    sites = parse_error_sites(inputs.get("error_sites"), completion_ids.size(0))
    batch = build_sdpo_batch(
        inputs["prompt_ids"].cpu(),
        inputs["prompt_mask"].cpu(),
        completion_ids.cpu(),
        inputs["completion_mask"].cpu(),
        sites,
        hint_source,
        renderer,
        tool_mask=None if inputs.get("tool_mask") is None else inputs["tool_mask"].cpu(),
        pad_token_id=pad_token_id,
    )
    if batch is None:
        return SdpoOutput(torch.zeros((), device=device), 0, 0)
    if student_hidden is not None:
        expected = (completion_ids.size(0), inputs["prompt_ids"].size(1) + completion_ids.size(1))
        if student_hidden.dim() != 3 or tuple(student_hidden.shape[:2]) != expected:
            raise ValueError(f"student_hidden has shape {tuple(student_hidden.shape)}; expected {expected} + (H,)")
        flat = student_hidden.reshape(-1, student_hidden.size(-1))
        h_s = flat.index_select(0, batch.context_positions.to(flat.device)).to(device)
    else:
        student = final_hidden_states(model, batch.student_input_ids.to(device), batch.student_attention_mask.to(device))
        h_s = student.reshape(-1, student.size(-1)).index_select(0, batch.student_positions.to(device))
        del student
    with torch.no_grad():
        teacher = final_hidden_states(
            model, batch.teacher_input_ids.to(device), batch.teacher_attention_mask.to(device)
        )
        h_t = teacher.reshape(-1, teacher.size(-1)).index_select(0, batch.teacher_positions.to(device))
        del teacher
    weight, bias = lm_head_params(model)
    h_s = h_s.to(weight.dtype)  # a no-op unless the hidden states came from an autocast forward
    total = divergence_from_hidden(h_s, h_t, weight, config, lm_head_bias=bias, taid_t=taid_t)
    return SdpoOutput(total / batch.n_tokens, batch.n_sites, batch.n_tokens)
