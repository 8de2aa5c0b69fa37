"""Loss channels built the way the trainer builds them (the registry, a real tokenizer), for the tests
that drive `compute_channels` without a trainer."""

from __future__ import annotations

from typing import Any

from trainer_client.losses import ChannelContext, LossSettings, build_channels


def loss_settings(hints: dict[str, Any] | None = None, pairs: dict[str, Any] | None = None) -> LossSettings:
    """A `loss` section; a channel not given is off (weight 0)."""
    return LossSettings.model_validate({"hints": {"weight": 0.0, **(hints or {})},
                                        "pairs": {"weight": 0.0, **(pairs or {})}})


def make_channels(tokenizer: Any, hints: dict[str, Any] | None = None, pairs: dict[str, Any] | None = None, *,
                  records: list | None = None, hint_source: Any = None, reference_loader: Any = None) -> dict:
    """Every registered channel with these settings; `records` fill the pairs channel's buffer."""
    channels = build_channels(loss_settings(hints, pairs), ChannelContext(tokenizer, hint_source=hint_source,
                                                                          reference_loader=reference_loader))
    if records:
        channels["pairs"].extend(records)
    return channels
