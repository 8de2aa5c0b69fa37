"""Every channel for one batch: total = grpo + sum of weight_c(step) * loss_c.

Usable without a trainer (tests, scripts); the trainer mixin calls it with TRL's GRPO loss as
`grpo_loss`. A channel whose weight is 0 or whose inputs are absent is neither computed nor added,
so the total is then exactly the GRPO tensor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import torch

from .channels import ChannelContext, LossChannel, LossSettings, StepInputs, channel_class, metric_key

__all__ = ["ChannelOutputs", "build_channels", "compute_channels"]


@dataclass
class ChannelOutputs:
    """One batch's losses: the total, GRPO's, and each channel's unweighted loss, its scheduled weight,
    its counts and other values (by channel name)."""

    total: torch.Tensor
    grpo: torch.Tensor
    losses: dict[str, torch.Tensor] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)
    counts: dict[str, dict[str, float]] = field(default_factory=dict)
    values: dict[str, dict[str, float]] = field(default_factory=dict)
    extra: dict[str, float] = field(default_factory=dict)

    def metrics(self) -> dict[str, float]:
        """Flat, loggable numbers: ``channels/grpo``, ``channels/total``, and per channel
        ``channels/<name>`` (its unweighted loss, 0 when off), ``/weight`` and its counts and values."""
        out = {metric_key("grpo"): float(self.grpo.detach()), metric_key("total"): float(self.total.detach())}
        for name, loss in self.losses.items():
            out[metric_key(name)] = float(loss.detach())
            out[metric_key(name, "weight")] = self.weights[name]
            for leaf, value in {**self.counts.get(name, {}), **self.values.get(name, {})}.items():
                out[metric_key(name, leaf)] = value
        out.update(self.extra)
        return out


def build_channels(settings: LossSettings | Mapping[str, Any] | None, context: ChannelContext) -> dict[str, LossChannel]:
    """One instance of every registered channel, with its section of `settings` (a `loss` section)."""
    settings = settings if isinstance(settings, LossSettings) else LossSettings.model_validate(settings or {})
    return {name: channel_class(name)(section, context) for name, section in settings.items()}


def compute_channels(
    model: Any,
    batch: Mapping[str, Any],
    channels: Mapping[str, LossChannel],
    *,
    step: int = 0,
    grpo_loss: torch.Tensor | None = None,
    gradient_accumulation_steps: int = 1,
    student_hidden: torch.Tensor | None = None,
    training: bool = True,
) -> ChannelOutputs:
    """Every active channel of `channels` on `batch` (GRPO-style dict; `error_sites` for hints).

    Channels are divided by `gradient_accumulation_steps` before they are added (TRL's GRPO loss is
    already scaled for accumulation). `student_hidden`: the (B, P + C, H) final hidden states of the
    forward that produced `grpo_loss`, for the channels that read them (see hints_channel).
    """
    device = next(model.parameters()).device
    grpo = grpo_loss if grpo_loss is not None else torch.zeros((), device=device)
    out = ChannelOutputs(total=grpo, grpo=grpo)
    total = grpo
    inputs = StepInputs(batch=batch, step=step, training=training, student_hidden=student_hidden)
    for name, channel in channels.items():
        weight = channel.weight_at(step)
        out.weights[name] = weight
        out.losses[name] = torch.zeros((), device=device)
        out.counts[name] = {c: 0.0 for c in channel.counts}
        if not channel.active(step, batch):
            continue
        result = channel.compute(model, inputs)
        out.counts[name].update(result.counts)
        out.values[name] = dict(result.values)
        if result.loss is not None:
            out.losses[name] = result.loss
            total = total + weight * result.loss / gradient_accumulation_steps
    out.total = total
    return out
