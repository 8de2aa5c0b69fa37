"""A rollout whose env failed (get_reward -> None) is masked out of GRPO, not scored 0.

Uses an in-process environment double (no env server) whose rewards are scripted per
rollout; the trainer, model and tokenizer are real.
"""

from __future__ import annotations

import itertools

import pytest

from .trainer_support import build_trainer


class ScriptedRewardEnvDouble:
    """Environment double: rollout k (in creation order) gets REWARDS[k]; None = infra failure."""

    REWARDS: list[float | None] = []
    _ids = itertools.count()

    def __init__(self) -> None:
        self.k = next(self._ids)
        self.turns: list[dict] = []

    def reset(self, **row) -> str:
        return "Call a tool."

    def noop(self) -> str:
        """Do nothing."""
        return "ok"

    def get_reward(self) -> float | None:
        return self.REWARDS[self.k % len(self.REWARDS)]


@pytest.mark.parametrize("rewards", [[None, 1.0, 0.0, 1.0], [1.0, None, None, 0.0]])
def test_infra_failed_rollout_gets_zero_advantage_and_leaves_the_baseline(tmp_path, rewards):
    import torch

    ScriptedRewardEnvDouble.REWARDS = rewards
    ScriptedRewardEnvDouble._ids = itertools.count()
    trainer = build_trainer(tmp_path, ScriptedRewardEnvDouble, per_device_train_batch_size=4, num_generations=4,
                            max_completion_length=8)
    trainer.model.train()
    out = trainer._generate_and_score_completions([{"prompt": [{"role": "user", "content": "Go."}]}] * 4)
    adv = out["advantages"]
    scored = [i for i, r in enumerate(rewards) if r is not None]
    masked = [i for i, r in enumerate(rewards) if r is None]
    assert all(float(adv[i]) == 0.0 for i in masked), adv
    vals = torch.tensor([rewards[i] for i in scored])
    expected = (vals - vals.mean()) / (vals.std() + 1e-4)  # the baseline of the scored rollouts only
    torch.testing.assert_close(adv[scored], expected, rtol=1e-4, atol=1e-4)
    # a 0.0 in place of None would have shifted the baseline: the test tells the two apart
    as_zero = torch.tensor([0.0 if r is None else r for r in rewards])
    assert not torch.allclose(adv[scored], ((as_zero - as_zero.mean()) / (as_zero.std() + 1e-4))[scored], atol=1e-3)
    assert trainer._metrics["train"]["reward"][-1] == pytest.approx(float(vals.mean()))
