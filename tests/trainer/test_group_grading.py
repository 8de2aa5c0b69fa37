"""A GRPO group's gradings run at once: the trainer starts every rollout's auto-submit before TRL's
serial reward loop (`ConcurrentToolsMixin._calculate_rewards` -> `SweEnvironment._submit_ahead`).

Real env server (bwrap), real toolz task of the small pack: gold and empty rollouts mixed in one group.
"""

from __future__ import annotations

import shlex
import time

from verifier.task import load_tasks

TASK = "toolz__1.0.0-14640d55"


def _gold(task) -> str:
    return f"printf %s {shlex.quote(task.patch)} > /tmp/gold.patch && cd /workspace && git apply /tmp/gold.patch"


def test_a_groups_gradings_overlap_and_each_reward_is_its_own(real_env_cls, small_pack_file):
    task = next(t for t in load_tasks(small_pack_file) if t.instance_id == TASK)
    envs = [real_env_cls() for _ in range(4)]
    gold = [True, False, True, True]
    try:
        for env, fix in zip(envs, gold):
            env.reset(instance_id=TASK)
            if fix:
                assert "error" not in env.bash(_gold(task)).lower()
        started = time.perf_counter()
        for env in envs:  # what the trainer does before TRL's reward loop
            env._submit_ahead()
        pending = [env._submitting for env in envs]
        assert all(p is not None for p in pending)
        observations = [p.result(timeout=600) for p in pending]  # every grading ends before any reward is asked for
        wall = time.perf_counter() - started
        grade_s = [obs["metadata"]["grade_s"] for obs in observations]
        print(f"group of {len(envs)}: {wall:.1f} s at once; gradings {grade_s}")
        # in turn, the group would take at least the sum of its gradings; at once, less
        assert wall < 0.9 * sum(grade_s), (wall, grade_s)
        rewards = [env.get_reward() for env in envs]
        assert rewards == [1.0 if fix else 0.0 for fix in gold], rewards
        assert all(env.done and env.infra_error is None for env in envs)
        assert all(env._submitting is None and env._session is None for env in envs)  # collected and released
        # an episode whose grading started takes no more tool calls
        envs[0].reset(instance_id=TASK)
        envs[0]._submit_ahead()
        assert "the episode is over" in envs[0].bash("echo hi")
        assert envs[0].get_reward() == 0.0
    finally:
        for env in envs:
            env._release()
