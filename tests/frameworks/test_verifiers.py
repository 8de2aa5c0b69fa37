"""verifiers: the real package's eval path solves the demo task through `env_client.adapters.verifiers`.

From the verifiers venv (``framework_support``; with ``uv``, which verifiers' harness runtime
uses to run its chat program), `run_eval` loads `SWETaskset` by module name, serves the
task's `SWEToolset` as an MCP server and runs the `null` harness against a scripted
OpenAI-compatible model double, against the real server on loopback (bwrap sandbox): the
harness's own tool-call handling reaches the env, a failing command's error markers land in
the trace's state, the gold edit + submit score 1.0, a submit without the fix 0.0, and the
episode id the framework recorded is the server's. The toolset's settings come from each
documented source: `tools.urls` or $SWE_OPENENV_URLS, the token from $ENV_SERVER_TOKEN or the
variable `tools.token_var` names, `tools.max_output_chars`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from framework_support import VENVS, framework_python, run_script, wait_no_sessions

from task_factory.demo_task import demo_tasks_file

pytestmark = pytest.mark.slow

VERIFIERS = "verifiers==0.4.0"  # keep in step with pyproject's `verifiers` extra
UV = "uv==0.13.9"  # verifiers' subprocess runtime prepares its harness program with `uv sync --script`
SCRIPT = Path(__file__).with_name("verifiers_episode.py")
TASKSET_MODULE = "from env_client.adapters.verifiers import SWETaskset\n\n__all__ = [\"SWETaskset\"]\n"
TOOLS = {"bash", "view", "str_replace", "create", "submit"}


@pytest.fixture(scope="module")
def verifiers_python() -> Path:
    return framework_python("verifiers-0.4.0", [VERIFIERS, UV], "verifiers")


def _rollout(server, verifiers_python: Path, tmp_path: Path, mode: str, instance_id: str) -> dict:
    (tmp_path / "swe_openenv_taskset.py").write_text(TASKSET_MODULE)  # a user's own taskset module
    env = {"PYTHONPATH": str(tmp_path), "PATH": f"{verifiers_python.parent}:{os.environ['PATH']}",
           "UV_CACHE_DIR": str(VENVS / "uv-cache"), "SCRIPTED_MODEL_KEY": "unused",
           "ENV_SERVER_TOKEN": server.token}  # the tool servers read the replicas' token from there
    if mode == "control":  # no tools.urls: $SWE_OPENENV_URLS; tools.token_var names another variable
        env.update(SWE_OPENENV_URLS=server.url, SWE_TEST_ENV_TOKEN=server.token, ENV_SERVER_TOKEN="wrong-token")
    out = run_script(verifiers_python, SCRIPT, [mode, server.url, str(demo_tasks_file()), instance_id,
                                                str(tmp_path / "runs")], tmp_path, env=env)
    assert out["version"] == VERIFIERS.split("==")[1]
    assert out["errors"] == [], out["errors"]
    # the harness offered the model the env's tools under their own names and schemas
    assert set(out["offered_tools"]) == TOOLS, out["offered_tools"]
    assert {"path", "old", "new"} <= set(out["offered_tools"]["str_replace"]["parameters"]["properties"])
    state = out["state"]
    assert state["instance_id"] == instance_id and state["done"] is True
    assert out["saved_info"]["swe_openenv"] == state  # traces.jsonl keeps the episode record
    # the episode the framework recorded is the server's: its trace holds exactly these steps
    records = server.service.store.load(state["episode_id"])
    assert records[0]["kind"] == "reset" and records[0]["episode_id"] == state["episode_id"]
    assert records[0]["instance_id"] == instance_id
    assert [r["action"].get("tool_name") for r in records[1:]] == [s["tool_name"] for s in state["steps"]]
    assert all(s["episode_id"] == state["episode_id"] for s in state["steps"])
    # graded: the rollout stopped at submit (no model call after it), the session was released
    assert out["stop"] is not None and out["model_requests"] == len(state["steps"]), out
    assert wait_no_sessions(server) == []
    out["records"] = records
    return out


def test_verifiers_fix_resolves_with_error_markers(server, demo_task, verifiers_python, tmp_path):
    out = _rollout(server, verifiers_python, tmp_path, "fix", demo_task.instance_id)
    state = out["state"]
    failed, edit, final = state["steps"]

    assert failed["tool_name"] == "bash" and failed["error_kind"] == "command_not_found"
    assert failed["hint_template_key"] == "shell.command_not_found" and failed["error_source"] == "agent"
    assert "error_kind" not in edit and "error_kind" not in final
    # the rollout stops at submit (SWETask's @stop), before the submit result joins the message graph
    assert [m["name"] for m in out["tool_messages"]] == ["bash", "str_replace"]
    assert "command_not_found" in out["tool_messages"][0]["content"] or "not found" in out["tool_messages"][0]["content"]
    assert "Edited six.py" in out["tool_messages"][1]["content"]

    assert state["reward"] == 1.0 and state["resolved"] is True and final["resolved"] is True
    assert out["reward"] == 1.0 and out["rewards"]["hidden_tests"] == 1.0
    assert out["metrics"]["tool_errors"] == 1.0
    assert out["records"][-1]["observation"]["reward"] == 1.0


def test_verifiers_submit_without_fix_scores_zero(server, demo_task, verifiers_python, tmp_path):
    out = _rollout(server, verifiers_python, tmp_path, "control", demo_task.instance_id)
    state = out["state"]
    assert [s["tool_name"] for s in state["steps"]] == ["bash", "submit"]
    text = out["tool_messages"][0]["content"]  # `ls; seq 1 2000`: ~9k characters, cut to head + tail
    assert "characters cut ...]" in text and text.rstrip().endswith("1999\n2000"), text
    assert len(text) < out["max_output_chars"] + 60, text
    assert state["reward"] == 0.0 and state["resolved"] is False
    assert out["reward"] == 0.0 and out["rewards"]["hidden_tests"] == 0.0
    assert out["metrics"]["tool_errors"] == 0.0
