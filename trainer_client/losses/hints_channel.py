"""Channel ``hints`` (channel 2, weight alpha): the same model, with a hint at the env's error
sites, is the teacher of the rollout's own tokens (self-distillation, SDPO / OPSD style).

The teacher is the policy on the hint-conditioned context, without gradient; the loss is the
configured divergence averaged over the student's own tokens after each rollout's first error
site, computed from hidden states in chunks (``chunked.py``; the divergences: ``divergences.py``).

The student side needs no forward of its own when the caller already ran the policy over the
rollouts (the GRPO forward): pass its final hidden states as `student_hidden` and only the counted
positions are read from them (the gradient flows back through that forward). Without them the
student rollouts are run once more here (the reference path).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Mapping

from pydantic import Field, model_validator

from .channels import ChannelContext, ChannelLoss, ChannelSettings, LossChannel, StepInputs

__all__ = ["HintsChannel", "HintsLoss", "HintsSettings", "has_error_sites", "hints_loss"]


class HintsSettings(ChannelSettings):
    """``loss.hints``: the divergence between the policy and its hint-conditioned self."""

    divergence: Literal["jsd", "taid", "eaopd"] = Field("jsd", description=(
        "jsd: generalized JSD (GKD/OPSD); taid: TAID forward KL to an interpolated target; eaopd: an "
        "entropy-aware mix of forward and reverse KL"))
    jsd_beta: float = Field(0.5, ge=0, le=1, description="0: forward KL(teacher||student), 1: reverse KL, "
                            "in between the generalized JSD")
    temperature: float = Field(1.0, gt=0)
    token_clip: float | None = Field(None, gt=0, description="clamp each token's divergence at this value")
    teacher_top_k: int = Field(0, ge=0, description=">0: both distributions restricted to the teacher's top-k "
                               "tokens (renormalized)")
    taid_t: float = Field(0.4, ge=0, le=1, description="TAID's interpolation coefficient (0: the detached "
                          "student, 1: the teacher); the start value when taid_adaptive")
    taid_adaptive: bool = Field(False, description="move t with TAID's momentum scheduler (needs taid_total_steps)")
    taid_t_end: float = Field(1.0, ge=0, le=1)
    taid_total_steps: int = Field(0, ge=0)
    taid_alpha: float = 5e-4
    taid_momentum: float = 0.99
    eaopd_h_max: float | None = Field(None, gt=0, description="the entropy that maps to pure forward KL; "
                                      "none: log(V) (V = k under teacher top-k)")
    chunk_size: int = Field(256, ge=0, description="tokens per chunk of the divergence (logits exist for one "
                            "chunk at a time); 0: all at once")
    chunk_backend: Literal["auto", "native", "trl"] = Field("native", description=(
        "native: ours (any divergence; peak extra memory flat in T); trl: TRL's fused kernel (plain JSD "
        "only); auto: trl where it applies"))
    reuse_grpo_hidden: bool = Field(True, description=(
        "read the student side from GRPO's own forward (a hook on the backbone) instead of a forward "
        "of its own; the values are equal within float error"))
    templates: str | None = Field(None, description="YAML of hint templates; none: the bundled "
                                  "trainer_client/losses/hints.yaml")

    @model_validator(mode="after")
    def _consistent(self) -> "HintsSettings":
        if self.taid_adaptive and self.taid_total_steps <= 0:
            raise ValueError("taid_adaptive needs taid_total_steps > 0")
        if self.chunk_backend == "trl" and not self.trl_backend_applies:
            raise ValueError("chunk_backend='trl' supports plain JSD only (no clip, no top-k)")
        return self

    @property
    def trl_backend_applies(self) -> bool:
        """TRL's fused kernel covers the generalized JSD without clip or top-k."""
        return self.divergence == "jsd" and self.token_clip is None and self.teacher_top_k == 0


def has_error_sites(batch: Mapping[str, Any]) -> bool:
    sites = batch.get("error_sites")
    return sites is not None and any(len(s or []) for s in sites)


@dataclass
class HintsLoss:
    loss: Any  # mean divergence per counted token (0 when none)
    n_sites: int
    n_tokens: int


def hints_loss(
    model: Any,
    inputs: Mapping[str, Any],
    settings: HintsSettings,
    hint_source: Any,
    renderer: Any,
    taid_t: float | None = None,
    pad_token_id: int = 0,
    student_hidden: Any = None,
) -> HintsLoss:
    """The hints loss for a GRPO-style batch carrying `error_sites` (see hint_context).

    student_hidden: optional (B, P + C, H) final (post-norm) hidden states of the student over
    cat(prompt_ids, completion_ids) with cat(prompt_mask, completion_mask), as the trainer's own
    forward computed them, with their graph.
    """
    import torch

    from .chunked import divergence_from_hidden
    from .hint_context import build_hint_batch, parse_error_sites
    from .model_io import final_hidden_states, lm_head_params

    completion_ids = inputs["completion_ids"]
    device = completion_ids.device
    sites = parse_error_sites(inputs.get("error_sites"), completion_ids.size(0))
    batch = build_hint_batch(
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
        return HintsLoss(torch.zeros((), device=device), 0, 0)
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
    total = divergence_from_hidden(h_s, h_t, weight, settings, lm_head_bias=bias, taid_t=taid_t)
    return HintsLoss(total / batch.n_tokens, batch.n_sites, batch.n_tokens)


class HintsChannel(LossChannel):
    """Channel 2: its state is the hint source, the renderer and TAID's t."""

    name: ClassVar[str] = "hints"
    number: ClassVar[int] = 2
    symbol: ClassVar[str] = "alpha"
    summary: ClassVar[str] = "the same model with a hint at the env's error sites as teacher"
    settings_class: ClassVar[type[ChannelSettings]] = HintsSettings
    counts: ClassVar[tuple[str, ...]] = ("sites", "tokens")
    column: ClassVar[str] = "sites"
    column_legend: ClassVar[str] = "sites: error sites (the hints' input)"
    default_weight: ClassVar[float] = 0.1
    settings: HintsSettings

    def __init__(self, settings: HintsSettings, context: ChannelContext):
        from .hint_context import HintRenderer
        from .hints import load_hint_source
        from .taid import TAIDScheduler

        super().__init__(settings, context)
        self.hint_source = context.hint_source or load_hint_source(settings.templates)
        self.renderer = HintRenderer(context.tokenizer)
        self.taid = (TAIDScheduler(settings.taid_total_steps, settings.taid_t, settings.taid_t_end,
                                   settings.taid_alpha, settings.taid_momentum)
                     if settings.divergence == "taid" and settings.taid_adaptive else None)

    def has_inputs(self, batch: Any) -> bool:
        return has_error_sites(batch)

    def wants_grpo_hidden(self, step: int, batch: Any) -> bool:
        return self.settings.reuse_grpo_hidden and self.active(step, batch)

    @property
    def taid_t(self) -> float | None:
        return self.taid.t if self.taid else None

    def compute(self, model: Any, inputs: StepInputs) -> ChannelLoss:
        out = hints_loss(model, inputs.batch, self.settings, self.hint_source, self.renderer, taid_t=self.taid_t,
                         pad_token_id=self.context.pad_token_id, student_hidden=inputs.student_hidden)
        values = {}
        if self.taid is not None and out.n_tokens and inputs.training:
            self.taid.update(float(out.loss.detach()), inputs.step)
            values["taid_t"] = self.taid.t
        return ChannelLoss(out.loss if out.n_tokens else None,  # nothing counted: nothing added
                           {"sites": float(out.n_sites), "tokens": float(out.n_tokens)}, values)

    def state_dict(self) -> dict[str, Any]:
        return {"taid": self.taid.state_dict() if self.taid else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.taid is not None and state.get("taid"):
            self.taid.load_state_dict(state["taid"])
