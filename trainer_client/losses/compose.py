"""All channels for one batch: total = grpo + alpha * channel2 + beta * channel3.

Usable without a trainer (tests, scripts); the trainer mixin calls it with TRL's GRPO loss
as `grpo_loss`. A channel whose weight is 0 or whose inputs are absent is neither computed
nor added, so the total is then exactly the channel-1 tensor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import torch

from .config import LossConfig
from .hints import HintSource
from .pair_preference import ReferenceLogps, pair_preference_loss
from .pairs import EncodedPair
from .sdpo import sdpo_loss
from .teacher_context import HintRenderer

__all__ = ["ChannelOutputs", "compute_channels"]


@dataclass
class ChannelOutputs:
    total: torch.Tensor
    grpo: torch.Tensor
    sdpo: torch.Tensor  # unweighted channel-2 value (0 when off)
    replay: torch.Tensor  # unweighted channel-3 value (0 when off), logged as channels/replay
    alpha: float  # effective (scheduled) weights used this step
    beta: float
    n_error_sites: int = 0
    n_sdpo_tokens: int = 0
    n_pairs: int = 0
    pref_margin: float | None = None
    extra: dict[str, float] = field(default_factory=dict)

    def metrics(self) -> dict[str, float]:
        """Flat, loggable numbers (prefix `channels/`)."""
        out = {
            "channels/grpo": float(self.grpo.detach()),
            "channels/sdpo": float(self.sdpo.detach()),
            "channels/replay": float(self.replay.detach()),
            "channels/total": float(self.total.detach()),
            "channels/alpha": self.alpha,
            "channels/beta": self.beta,
            "channels/error_sites": float(self.n_error_sites),
            "channels/sdpo_tokens": float(self.n_sdpo_tokens),
            "channels/pairs": float(self.n_pairs),
        }
        if self.pref_margin is not None:
            out["channels/pref_margin"] = self.pref_margin
        out.update(self.extra)
        return out


def has_error_sites(batch: Mapping[str, Any]) -> bool:
    sites = batch.get("error_sites")
    return sites is not None and any(len(s or []) for s in sites)


def compute_channels(
    model: Any,
    batch: Mapping[str, Any],
    config: LossConfig,
    *,
    step: int = 0,
    grpo_loss: torch.Tensor | None = None,
    hint_source: HintSource | None = None,
    renderer: HintRenderer | None = None,
    pairs: Sequence[EncodedPair] | None = None,
    reference: ReferenceLogps | None = None,
    taid_t: float | None = None,
    gradient_accumulation_steps: int = 1,
    pad_token_id: int = 0,
    student_hidden: torch.Tensor | None = None,
) -> ChannelOutputs:
    """Channels 2 and 3 for `batch` (GRPO-style dict with `error_sites`) and `pairs`.

    Channels 2/3 are divided by `gradient_accumulation_steps` before they are added (TRL's
    GRPO loss is already scaled for accumulation). `student_hidden`: the (B, P + C, H) final
    hidden states of the forward that produced `grpo_loss`; channel 2 then reads its student
    side from them instead of running the student again (see `sdpo_loss`).
    """
    device = next(model.parameters()).device
    grpo = grpo_loss if grpo_loss is not None else torch.zeros((), device=device)
    zero = torch.zeros((), device=device)
    alpha, beta = config.alpha_at(step), config.beta_at(step)
    out = ChannelOutputs(total=grpo, grpo=grpo, sdpo=zero, replay=zero, alpha=alpha, beta=beta)
    total = grpo
    if alpha > 0 and has_error_sites(batch):
        if hint_source is None or renderer is None:
            raise ValueError("channel 2 needs a hint_source and a HintRenderer")
        s = sdpo_loss(
            model, batch, config, hint_source, renderer, taid_t=taid_t, pad_token_id=pad_token_id,
            student_hidden=student_hidden,
        )
        out.sdpo, out.n_error_sites, out.n_sdpo_tokens = s.loss, s.n_sites, s.n_tokens
        if s.n_tokens:
            total = total + alpha * s.loss / gradient_accumulation_steps
    if beta > 0 and pairs:
        r = pair_preference_loss(model, pairs, config, reference=reference, pad_token_id=pad_token_id)
        out.replay, out.n_pairs, out.pref_margin = r.loss, r.n_pairs, float(r.margin)
        total = total + beta * r.loss / gradient_accumulation_steps
    out.total = total
    return out
