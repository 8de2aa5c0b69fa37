"""The loss side of the trainer: total = grpo + alpha * hints + beta * pairs.

Each loss channel beside GRPO is one registered plug-in (``channels.py``, the registry):

- ``hints`` (channel 2, ``hints_channel.py``): the same model with a hint at the env's error sites as
  teacher, a chunked generalized JSD / TAID / entropy-aware OPD between the model with and without
  the hint (the teacher context: ``hint_context.py``; the hint templates: ``hints.py``);
- ``pairs`` (channel 3, ``pairs_channel.py``): DPO (cached reference) or SimPO on the preference
  pairs teachers mine by replaying frozen traces (trainer_client/replay/); ``pairs.py`` renders them;
- ``compute_channels`` (no trainer needed) and ``LossChannelsMixin`` (GRPOTrainer).

Names are imported on first use, so that reading the registry and the config's ``loss`` section
(``channels.py``) imports no torch.
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> the module (in this package) defining it
_EXPORTS = {
    "CHANNELS": "channels", "ChannelContext": "channels", "ChannelLoss": "channels", "ChannelSettings": "channels",
    "LossChannel": "channels", "LossSettings": "channels", "WeightSchedule": "channels", "channel_class": "channels",
    "channel_names": "channels", "register_channel": "channels", "StepInputs": "channels",
    "ChannelOutputs": "compose", "build_channels": "compose", "compute_channels": "compose",
    "entropy_aware_opd": "divergences", "generalized_jsd": "divergences", "masked_mean": "divergences",
    "per_token_divergence": "divergences", "taid_forward_kl": "divergences",
    "ERROR_KINDS": "hints", "ErrorSite": "hints", "HintSource": "hints", "TemplateHintSource": "hints",
    "load_hint_source": "hints",
    "HintsChannel": "hints_channel", "HintsSettings": "hints_channel", "hints_loss": "hints_channel",
    "HintRenderer": "hint_context", "build_hint_batch": "hint_context",
    "LossChannelsMixin": "mixin",
    "PairsChannel": "pairs_channel", "PairsSettings": "pairs_channel", "ReferenceLogps": "pairs_channel",
    "pairs_loss": "pairs_channel",
    "EncodedPair": "pairs", "PairSampler": "pairs", "collate_pairs": "pairs", "encode_pair": "pairs",
    "load_pairs": "pairs",
    "dpo_sigmoid_loss": "preference", "response_logps": "preference", "simpo_loss": "preference",
    "TAIDScheduler": "taid",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
