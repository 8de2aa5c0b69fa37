"""A plain TRL GRPOTrainer with the three-channel loss, and a constant reward (loss tests only)."""

from __future__ import annotations

from trl import GRPOTrainer

from trainer_client.losses import ThreeChannelLossMixin


class LossTrainer(ThreeChannelLossMixin, GRPOTrainer):
    """GRPOTrainer + ThreeChannelLossMixin, configured by `loss_config`."""

    def __init__(self, *args, loss_config=None, **kwargs):
        self.loss_config = loss_config
        super().__init__(*args, **kwargs)


def zero_reward(completions, **kwargs):
    return [0.0] * len(completions)
