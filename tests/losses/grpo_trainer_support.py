"""A plain TRL GRPOTrainer with the loss channels, and a constant reward (loss tests only)."""

from __future__ import annotations

from trl import GRPOTrainer

from trainer_client.losses import LossChannelsMixin


class LossTrainer(LossChannelsMixin, GRPOTrainer):
    """GRPOTrainer + LossChannelsMixin, configured by `loss_settings`."""

    def __init__(self, *args, loss_settings=None, **kwargs):
        self.loss_settings = loss_settings
        super().__init__(*args, **kwargs)


def zero_reward(completions, **kwargs):
    return [0.0] * len(completions)
