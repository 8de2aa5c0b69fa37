"""The trainer's environment under the bash-only profile (mini-swe-agent's protocol), against the real
env server (bwrap) and a real task of the small pack: the class has the profile's one tool, its outputs
read as mini-swe-agent's observation template, a sentinel submission is graded, and a rollout that
never printed its submission scores 0.0 without a grading (there is no submit tool to call)."""

from __future__ import annotations

import shlex

from contract import SUBMIT_SENTINEL, get_profile
from trainer_client.environment import make_environment_class
from verifier.task import load_tasks

TASK = "toolz__1.0.0-14640d55"


def test_bash_only_rollouts_through_the_trainer_environment(real_env_url, small_pack_file):
    task = next(t for t in load_tasks(small_pack_file) if t.instance_id == TASK)
    env_cls = make_environment_class([real_env_url], profile="bash-only")
    try:
        assert env_cls.tool_methods() == ["bash"] and env_cls.tool_schemas() == get_profile("bash-only").policy_tools()
        gold, lazy, silent = env_cls(), env_cls(), env_cls()
        issue = gold.reset(instance_id=TASK)
        assert issue.strip() and gold.episode_id
        out = gold.bash(f"printf %s {shlex.quote(task.patch)} > /tmp/gold.patch && git apply /tmp/gold.patch"
                        " && git diff > /tmp/patch.txt; echo applied")
        assert out == "<returncode>0</returncode>\n<output>\napplied\n</output>", out
        assert gold.bash("exit 7").startswith("<returncode>7</returncode>")
        gold.bash(f"echo {SUBMIT_SENTINEL} && cat /tmp/patch.txt")
        assert gold.done and gold.reward == 1.0
        assert gold.get_reward() == 1.0 and gold.turns[-1]["tool_name"] == "bash"

        lazy.reset(instance_id=TASK)
        lazy.bash(f"echo {SUBMIT_SENTINEL}")
        assert lazy.get_reward() == 0.0 and lazy.done and lazy.infra_error is None

        silent.reset(instance_id=TASK)  # fixes the workspace, never submits: nothing is graded
        silent.bash(f"printf %s {shlex.quote(task.patch)} > /tmp/gold.patch && git apply /tmp/gold.patch")
        silent._submit_ahead()
        assert silent._submitting is None  # no submit tool: no auto-submit
        assert silent.get_reward() == 0.0 and silent.reward is None and silent.infra_error is None
        assert silent._session is None  # the server slot is freed all the same
    finally:
        env_cls.runtime.close()
