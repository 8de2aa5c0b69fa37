"""Config validation, the TAID scheduler, and the trainer class wiring."""

from __future__ import annotations

import pytest

from trainer_client.losses import LossConfig, TAIDScheduler, ThreeChannelLossMixin


@pytest.mark.parametrize(
    "bad",
    [
        dict(alpha=-1.0),
        dict(jsd_beta=1.5),
        dict(divergence="kl"),
        dict(taid_adaptive=True),
        dict(chunk_backend="trl", token_clip=1.0),
        dict(pref_loss="ipo"),
        dict(temperature=0.0),
    ],
)
def test_config_rejects_invalid_values(bad):
    with pytest.raises(ValueError):
        LossConfig(**bad)


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
    assert issubclass(cls, ThreeChannelLossMixin)
    assert cls._compute_loss is ThreeChannelLossMixin._compute_loss
