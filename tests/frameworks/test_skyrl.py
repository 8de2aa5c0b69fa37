"""SkyRL: skyrl-gym's real package drives demo-task episodes through `env_client.adapters.skyrl`.

The env is made, initialised and stepped the way SkyRL's generator does it, from the
skyrl-gym venv (``framework_support``), from a dataset row that `env_client.adapters.skyrl_dataset`
wrote from the task file, against the real server on loopback (bwrap sandbox): a failing
command's error markers reach the step metadata, the gold edit + submit earn the hidden tests'
reward 1.0, a submit without the fix 0.0; at `max_turns` the episode ends in both truncation
modes (the client's submit graded by the server, or closed unsubmitted with reward 0.0); the
settings reach the env from each documented source; the episode id the framework saw is the
server's own.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from framework_support import framework_python, run_script, wait_no_sessions

from env_client.adapters.skyrl_dataset import write_dataset
from task_factory.demo_task import demo_tasks_file

pytestmark = pytest.mark.slow

SKYRL_GYM = "skyrl-gym==0.4.0"  # keep in step with pyproject's `skyrl` extra
SCRIPT = Path(__file__).with_name("skyrl_episode.py")


@pytest.fixture(scope="module")
def skyrl_python() -> Path:
    return framework_python("skyrl-gym-0.4.0", [SKYRL_GYM], "skyrl-gym")


def _episode(server, skyrl_python: Path, tmp_path: Path, mode: str, instance_id: str) -> dict:
    dataset = tmp_path / "train.jsonl"  # the task file -> SkyRL's dataset, as docs/frameworks/skyrl.md does it
    assert write_dataset(demo_tasks_file(), dataset, instance_ids=[instance_id]) == 1
    if mode == "cutoff":  # urls from $SWE_OPENENV_URLS; register(token=) wins over a wrong $ENV_SERVER_TOKEN
        env = {"SWE_OPENENV_URLS": server.url, "SKYRL_TEST_TOKEN": server.token, "ENV_SERVER_TOKEN": "wrong-token"}
    else:
        env = {"ENV_SERVER_TOKEN": server.token}  # register() takes it from there
    out = run_script(skyrl_python, SCRIPT, [mode, server.url, str(dataset)], tmp_path, env=env)
    assert out["version"] == SKYRL_GYM.split("==")[1] and out["env_type"] == "SWEOpenEnv"
    assert out["spec_id"] == "swe_openenv" and out["env_class"] == "swe_openenv"
    assert out["extras"]["instance_id"] == instance_id and out["extras"]["data_source"] == "swe_openenv"
    info = out["info"]
    assert info["instance_id"] == instance_id and info["step"] == 0
    assert out["messages"][-1]["content"].startswith("Fix this issue:\n\n") and "six.b()" in out["messages"][-1]["content"]
    # the episode the framework saw is the server's: its trace holds exactly the scripted steps
    records = server.service.store.load(info["episode_id"])
    assert records[0]["kind"] == "reset" and records[0]["episode_id"] == info["episode_id"]
    assert records[0]["instance_id"] == instance_id
    for step in out["steps"]:
        assert step["metadata"]["episode_id"] == info["episode_id"]
        assert step["metadata"]["instance_id"] == instance_id
    # a step past done stays done, with no observation, no reward and no env step
    assert out["after_done"] == {"observations": [], "reward": 0.0, "done": True}
    assert wait_no_sessions(server) == []  # the adapter released its session at submit / the limit / close
    out["records"] = records
    return out


def test_skyrl_gym_fix_resolves_with_error_markers(server, demo_task, skyrl_python, tmp_path):
    out = _episode(server, skyrl_python, tmp_path, "fix", demo_task.instance_id)
    failed, edit, final = out["steps"]

    assert failed["done"] is False and failed["reward"] == 0.0
    assert failed["metadata"]["error_kind"] == "command_not_found"
    assert failed["metadata"]["hint_template_key"] == "shell.command_not_found"
    assert failed["metadata"]["error_source"] == "agent"
    assert failed["metadata"]["tool_calls"][0]["tool_name"] == "bash"
    (obs,) = failed["observations"]
    assert obs["role"] == "user" and obs["content"].startswith("<tool_response>\n")
    assert "command_not_found" in obs["content"] or "not found" in obs["content"]

    assert "error_kind" not in edit["metadata"] and edit["done"] is False
    assert "Edited six.py" in edit["observations"][0]["content"]

    assert final["done"] is True and final["reward"] == 1.0 and final["observations"] == []
    assert final["metadata"]["resolved"] is True
    assert out["metrics"] == {"resolved": 1.0, "tool_calls": 3, "tool_errors": 1}
    assert out["aggregated"]["resolved"] == 1.0

    steps = [r["action"].get("tool_name") for r in out["records"][1:]]
    assert steps == ["bash", "str_replace", "submit"], steps
    assert out["records"][-1]["observation"]["reward"] == 1.0


def test_skyrl_gym_submit_without_fix_scores_zero(server, demo_task, skyrl_python, tmp_path):
    out = _episode(server, skyrl_python, tmp_path, "control", demo_task.instance_id)
    malformed, ls, final = out["steps"]
    # a malformed <tool_call> is answered by the adapter (no env step) and flagged in the metadata
    assert malformed["done"] is False and malformed["metadata"]["tool_calls"] == []
    assert "invalid JSON" in malformed["metadata"]["tool_call_error"]
    assert "invalid JSON" in malformed["observations"][0]["content"]
    assert "six.py" in ls["observations"][0]["content"] and "error_kind" not in ls["metadata"]
    assert final["done"] is True and final["reward"] == 0.0
    assert final["metadata"]["resolved"] is False
    assert out["metrics"]["resolved"] == 0.0
    steps = [r["action"].get("tool_name") for r in out["records"][1:]]
    assert steps == ["bash", "submit"], steps


def test_skyrl_gym_truncated_episode_is_submitted_by_the_client(server, demo_task, skyrl_python, tmp_path):
    """At max_turns (2) the episode ends: the client submits, and the reward is the server's grade
    of the fixed repository (1.0), not the policy's submit."""
    out = _episode(server, skyrl_python, tmp_path, "truncated", demo_task.instance_id)
    edit, last = out["steps"]  # done at turn 2: the three scripted replies after it are never asked for
    assert edit["done"] is False and edit["reward"] == 0.0 and "truncated" not in edit["metadata"]
    assert last["done"] is True and last["reward"] == 1.0 and last["observations"] == []
    assert last["metadata"]["truncated"] is True and last["metadata"]["resolved"] is True
    assert [c["tool_name"] for c in last["metadata"]["tool_calls"]] == ["bash", "submit"]
    assert out["metrics"]["resolved"] == 1.0
    records = out["records"]
    assert [r["action"].get("tool_name") for r in records[1:]] == ["str_replace", "bash", "submit"]
    assert records[-1]["action"]["metadata"] == {"origin": "client"}  # not the policy's: left out of state(t)
    assert records[-1]["observation"]["reward"] == last["reward"]  # what the server graded


def test_skyrl_gym_truncation_without_submit_ends_with_reward_zero(server, demo_task, skyrl_python, tmp_path):
    """submit_on_truncation=False (from the env_config): at max_turns (2) the episode ends
    unsubmitted with reward 0.0, although the gold edit is in; the session is closed and the
    server's trace ends at the last tool step, ungraded. The other settings came from their other
    sources: the URL from $SWE_OPENENV_URLS, the token from register() (over a wrong
    $ENV_SERVER_TOKEN), max_output_chars from register() (over the env_config's), the episode id
    from the row."""
    out = _episode(server, skyrl_python, tmp_path, "cutoff", demo_task.instance_id)
    assert out["info"]["episode_id"] == out["extras"]["episode_id"]  # the row's episode_id
    long, last = out["steps"]
    text = long["observations"][0]["content"]  # `seq 1 2000`: ~8.9k characters, cut to head + tail
    assert "characters cut ...]" in text and text.startswith("<tool_response>\n1\n2\n")
    assert text.endswith("1999\n2000\n\n</tool_response>") and len(text) < out["max_output_chars"] + 100, text
    assert long["done"] is False and long["reward"] == 0.0
    assert last["done"] is True and last["reward"] == 0.0 and last["observations"] == []
    assert last["metadata"]["truncated"] is True and "resolved" not in last["metadata"]
    assert [c["tool_name"] for c in last["metadata"]["tool_calls"]] == ["str_replace"]  # no submit
    assert out["metrics"] == {"resolved": 0.0, "tool_calls": 2, "tool_errors": 0}
    records = out["records"]
    assert [r["action"].get("tool_name") for r in records[1:]] == ["bash", "str_replace"], records
    assert not any(r.get("observation", {}).get("done") for r in records[1:])  # never graded
