"""Config validation, the TAID scheduler, and the trainer class wiring."""

from __future__ import annotations

import pytest

from trainer_client.losses import LossChannelsMixin, LossSettings, TAIDScheduler


@pytest.mark.parametrize(
    "bad",
    [
        dict(hints=dict(weight=-1.0)),
        dict(hints=dict(jsd_beta=1.5)),
        dict(hints=dict(divergence="kl")),
        dict(hints=dict(taid_adaptive=True)),
        dict(hints=dict(chunk_backend="trl", token_clip=1.0)),
        dict(pairs=dict(loss="ipo")),
        dict(hints=dict(temperature=0.0)),
        dict(pairs=dict(per_step=0)),
        dict(hints=dict(schedule=dict(kind="cosine"))),
    ],
)
def test_config_rejects_invalid_values(bad):
    with pytest.raises(ValueError) as err:
        LossSettings.model_validate(bad)
    channel, = bad
    assert f"loss.{channel}" in str(err.value)  # the message names the channel's section


def test_taid_scheduler_linear_and_adaptive():
    lin = TAIDScheduler(total_steps=10, t_start=0.4, t_end=1.0, adaptive=False)
    assert [round(lin.update(1.0, s), 6) for s in (0, 5, 10, 20)] == [0.4, 0.7, 1.0, 1.0]
    falling = TAIDScheduler(total_steps=1000, alpha=0.05)
    flat = TAIDScheduler(total_steps=1000, alpha=0.05)
    for step in range(1, 20):
        falling.update(1.0 / step, step)  # loss keeps dropping -> momentum > 0 -> faster t
        flat.update(1.0, step)
    assert falling.t > flat.t > 0.4
    assert flat.t <= 1.0


def test_swe_trainer_uses_this_mixin():
    from trainer_client import trainer as trainer_mod

    cls = trainer_mod.SweGRPOTrainer
    assert issubclass(cls, LossChannelsMixin)
    assert cls._compute_loss is LossChannelsMixin._compute_loss
