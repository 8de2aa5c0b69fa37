"""Typed configuration of the three-channel loss (one dataclass, validated on creation)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["LossConfig", "WeightSchedule"]


@dataclass(frozen=True)
class WeightSchedule:
    """How a channel weight evolves with the optimizer step.

    `constant`: the full weight from step 0. `warmup`: linear ramp from 0 at step 0 to the
    full weight at `warmup_steps` (the SDPO/OPSD papers use a constant weight; a warm-up lets
    the policy first learn the tool format from channel 1 before the hint teacher pulls).
    """

    kind: Literal["constant", "warmup"] = "constant"
    warmup_steps: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("constant", "warmup"):
            raise ValueError(f"unknown schedule kind {self.kind!r}")
        if self.warmup_steps < 0:
            raise ValueError("warmup_steps must be >= 0")

    def factor(self, step: int) -> float:
        """Multiplier in [0, 1] for the weight at optimizer step `step`."""
        if self.kind == "constant" or self.warmup_steps == 0:
            return 1.0
        return min(1.0, max(0.0, step / self.warmup_steps))


@dataclass(frozen=True)
class LossConfig:
    """total = grpo + alpha * channel2 + beta * channel3 (channels 2/3 off at weight 0)."""

    # --- weights ---------------------------------------------------------------------
    alpha: float = 0.1
    """Weight of channel 2 (hint-conditioned self-distillation)."""
    alpha_schedule: WeightSchedule = field(default_factory=WeightSchedule)
    beta: float = 0.05
    """Weight of channel 3 (preference loss on replayed teacher pairs)."""
    beta_schedule: WeightSchedule = field(default_factory=WeightSchedule)

    # --- channel 2: divergence ---------------------------------------------------------
    divergence: Literal["jsd", "taid", "eaopd"] = "jsd"
    """jsd: generalized JSD (GKD/OPSD); taid: TAID forward KL to an interpolated target;
    eaopd: entropy-aware mix of forward and reverse KL."""
    jsd_beta: float = 0.5
    """0 = forward KL(teacher||student), 1 = reverse KL, in between the generalized JSD."""
    temperature: float = 1.0
    token_clip: float | None = None
    """Clamp each token's divergence at this value (a few surprising tokens cannot dominate)."""
    teacher_top_k: int = 0
    """>0: restrict both distributions to the teacher's top-k tokens (renormalized)."""
    taid_t: float = 0.4
    """TAID interpolation coefficient (0 = detached student, 1 = teacher); start value
    when `taid_adaptive`."""
    taid_adaptive: bool = False
    """Move t with the TAID paper's momentum scheduler (needs `taid_total_steps`)."""
    taid_t_end: float = 1.0
    taid_total_steps: int = 0
    taid_alpha: float = 5e-4
    taid_momentum: float = 0.99
    eaopd_h_max: float | None = None
    """Entropy that maps to pure forward KL; None = log(V) (V = k under teacher top-k)."""
    chunk_size: int = 256
    """Tokens per chunk of the divergence (logits exist for one chunk at a time); 0 = all
    at once."""
    chunk_backend: Literal["auto", "native", "trl"] = "native"
    """native: ours (any divergence; peak extra memory flat in T, 12% of naive full logits
    at T=2048 in bench/bench_losses.py); trl: TRL's fused `_chunked_divergence_loss`
    (plain JSD only; faster, but ~25% of naive at T=2048); auto: trl where it applies."""

    reuse_grpo_hidden: bool = True
    """In the trainer, read channel 2's student hidden states from GRPO's own forward (a hook
    on the backbone) instead of running the student over its rollouts again; False keeps the
    separate student forward (the reference path; the values are equal within float error)."""

    # --- channel 2: hints ----------------------------------------------------------------
    hints_path: str | None = None
    """YAML of hint templates; None = the bundled trainer_client/losses/hints.yaml."""

    # --- channel 3: preference -----------------------------------------------------------
    pref_loss: Literal["dpo", "simpo"] = "dpo"
    dpo_beta: float = 0.1
    simpo_beta: float = 2.0
    simpo_gamma: float = 1.0
    """SimPO target margin (in units of the beta-scaled, length-normalized reward)."""
    pairs_path: str | None = None
    """JSONL of replayed pairs; None disables channel 3 in the trainer."""
    pairs_per_step: int = 2
    pair_seed: int = 0
    max_pair_length: int = 4096
    """Rendered prompt+response tokens per pair; longer prompts lose their oldest tokens."""

    def __post_init__(self) -> None:
        if self.alpha < 0 or self.beta < 0:
            raise ValueError("alpha and beta must be >= 0")
        if self.divergence not in ("jsd", "taid", "eaopd"):
            raise ValueError(f"unknown divergence {self.divergence!r}")
        if not 0.0 <= self.jsd_beta <= 1.0:
            raise ValueError("jsd_beta must be in [0, 1]")
        if not 0.0 <= self.taid_t <= 1.0 or not 0.0 <= self.taid_t_end <= 1.0:
            raise ValueError("taid_t and taid_t_end must be in [0, 1]")
        if self.taid_adaptive and self.taid_total_steps <= 0:
            raise ValueError("taid_adaptive needs taid_total_steps > 0")
        if self.temperature <= 0:
            raise ValueError("temperature must be > 0")
        if self.token_clip is not None and self.token_clip <= 0:
            raise ValueError("token_clip must be > 0")
        if self.teacher_top_k < 0 or self.chunk_size < 0:
            raise ValueError("teacher_top_k and chunk_size must be >= 0")
        if self.eaopd_h_max is not None and self.eaopd_h_max <= 0:
            raise ValueError("eaopd_h_max must be > 0")
        if self.chunk_backend not in ("auto", "native", "trl"):
            raise ValueError(f"unknown chunk_backend {self.chunk_backend!r}")
        if self.chunk_backend == "trl" and not self.trl_backend_applies:
            raise ValueError("chunk_backend='trl' supports plain JSD only (no clip, no top-k)")
        if self.pref_loss not in ("dpo", "simpo"):
            raise ValueError(f"unknown pref_loss {self.pref_loss!r}")
        if self.pairs_per_step < 1 or self.max_pair_length < 8:
            raise ValueError("pairs_per_step must be >= 1 and max_pair_length >= 8")

    @property
    def trl_backend_applies(self) -> bool:
        """TRL's fused kernel covers the generalized JSD without clip or top-k."""
        return self.divergence == "jsd" and self.token_clip is None and self.teacher_top_k == 0

    def alpha_at(self, step: int) -> float:
        return self.alpha * self.alpha_schedule.factor(step)

    def beta_at(self, step: int) -> float:
        return self.beta * self.beta_schedule.factor(step)
