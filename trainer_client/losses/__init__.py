"""The loss side of the trainer: total = grpo + alpha * sdpo_divergence + beta * pair_preference.

- channel 2 (`sdpo`): hint-conditioned self-distillation at env error sites, a chunked
  generalized JSD / TAID / entropy-aware OPD between the model with and without the hint;
- channel 3 (`pair_preference`, logged as `channels/replay`): DPO (cached reference) or SimPO on
  the teacher pairs that replay (trainer_client/replay/) mines; `pairs` loads and encodes them;
- `compute_channels` (no trainer needed) and `ThreeChannelLossMixin` (GRPOTrainer).
"""

from .compose import ChannelOutputs, compute_channels
from .config import LossConfig, WeightSchedule
from .divergences import entropy_aware_opd, generalized_jsd, masked_mean, per_token_divergence, taid_forward_kl
from .hints import ERROR_KINDS, ErrorSite, HintSource, TemplateHintSource, load_hint_source
from .mixin import ChannelState, ThreeChannelLossMixin
from .pair_preference import ReferenceLogps, pair_preference_loss
from .pairs import EncodedPair, PairSampler, PreferencePair, ToolAction, collate_pairs, encode_pair, load_pairs
from .preference import dpo_sigmoid_loss, response_logps, simpo_loss
from .sdpo import sdpo_loss
from .taid import TAIDScheduler
from .teacher_context import HintRenderer, build_sdpo_batch

__all__ = [
    "ERROR_KINDS",
    "ChannelOutputs",
    "ChannelState",
    "EncodedPair",
    "ErrorSite",
    "HintRenderer",
    "HintSource",
    "LossConfig",
    "PairSampler",
    "PreferencePair",
    "ReferenceLogps",
    "TAIDScheduler",
    "TemplateHintSource",
    "ThreeChannelLossMixin",
    "ToolAction",
    "WeightSchedule",
    "build_sdpo_batch",
    "collate_pairs",
    "compute_channels",
    "dpo_sigmoid_loss",
    "encode_pair",
    "entropy_aware_opd",
    "generalized_jsd",
    "load_hint_source",
    "load_pairs",
    "masked_mean",
    "pair_preference_loss",
    "per_token_divergence",
    "response_logps",
    "sdpo_loss",
    "simpo_loss",
    "taid_forward_kl",
]
