"""Episode limits, through the real env server: each ends the episode with its `end_reason`
(docs/evaluation.md's table) and, where the harness ends it, auto-submits: the hidden tests grade
the workspace (the double applied the gold patch on its first turn and never submits, so a
graded episode is resolved). The wall limit covers env steps: a `sleep 60` is cut at the limit."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from eval_support import result_lines, run_eval
from support.servers import start_server_process
from support.policy_double import PolicyDouble

from env_client import read_jsonl


@pytest.fixture(scope="module")
def limits_double(gold_rows, gold_tasks_file: Path, tmp_path_factory: pytest.TempPathFactory):
    """One double: task 0 applies the gold patch, then runs `ls` for ever; task 1 applies it, then
    runs `sleep 60`. Yields (double, {name: one-task file})."""
    tmp = tmp_path_factory.mktemp("limits")
    files = {}
    for name, row in (("ls", gold_rows[0]), ("sleep", gold_rows[1])):
        files[name] = tmp / f"{name}.jsonl"
        files[name].write_text(json.dumps(row) + "\n", encoding="utf-8")
    modes = {gold_rows[0]["instance_id"]: "patch-then-ls", gold_rows[1]["instance_id"]: "patch-then-sleep"}
    with PolicyDouble(gold_tasks_file, "gold", tmp, task_modes=modes) as double:
        yield double, files


def _one(out: Path) -> dict:
    (r,) = result_lines(out)
    return r


def _trace(url: str, episode_id: str) -> list[dict]:
    text = httpx.get(f"{url}/episodes/{episode_id}/trace", timeout=30, trust_env=False).text
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _auto_submitted(url: str, r: dict) -> bool:
    """The episode's last env step is the harness's submit (origin client), and it was graded."""
    last = _trace(url, r["episode_id"])[-1]
    action, meta = last["action"], last["observation"]["metadata"]
    return (action["tool_name"] == "submit" and action.get("metadata", {}).get("origin") == "client"
            and "tests_passed" in meta and last["observation"]["done"] is True)


def test_turn_limit_auto_submits(env_url, limits_double, tmp_path: Path):
    double, files = limits_double
    out = tmp_path / "out"
    summary = run_eval([env_url], files["ls"], double.base_url, out, limits={"max_turns": 2})
    r = _one(out)
    assert (r["end_reason"], r["turns"], r["steps"], r["status"], r["reward"]) == ("turn_limit", 2, 3, "resolved", 1.0)
    assert _auto_submitted(env_url, r)
    assert summary["end_reasons"] == {"turn_limit": 1}


def test_context_limit_from_usage_auto_submits(env_url, limits_double, tmp_path: Path):
    double, files = limits_double
    out = tmp_path / "out"
    run_eval([env_url], files["ls"], double.base_url, out, limits={"max_context_tokens": 1})
    r = _one(out)
    assert (r["end_reason"], r["turns"], r["steps"], r["status"]) == ("context_limit", 1, 2, "resolved")
    assert r["prompt_tokens"] + r["completion_tokens"] >= 1
    assert _auto_submitted(env_url, r)


def test_wall_limit_cuts_an_env_step_and_auto_submits(env_url, limits_double, tmp_path: Path):
    """Turn 2's `sleep 60` runs with its timeout capped at the time left of a 6 s episode: the env
    kills it there (the agent's `timeout` error), no third turn is asked for, the episode is graded."""
    double, files = limits_double
    out = tmp_path / "out"
    before = double.stats()["requests"]
    run_eval([env_url], files["sleep"], double.base_url, out, limits={"max_episode_s": 6.0})
    r = _one(out)
    assert (r["end_reason"], r["turns"], r["status"], r["error_kinds"]) == ("time_limit", 2, "resolved", {"timeout": 1})
    assert double.stats()["requests"] - before == 2, "no model call after the limit"
    assert r["wall_s"] < 60, "the sleep was cut, not waited for"
    sleep = [s for s in _trace(env_url, r["episode_id"]) if s.get("action", {}).get("arguments", {})
             .get("command") == "sleep 60"]
    assert len(sleep) == 1 and 0 < sleep[0]["action"]["arguments"]["timeout"] <= 6.0, sleep
    assert _auto_submitted(env_url, r)
    (record,) = read_jsonl(out / "rollouts.jsonl")
    calls = [c for m in record.messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    assert json.loads(calls[1]["function"]["arguments"]) == {"command": "sleep 60"}, \
        "the context keeps the call the model made (the cap is on the env step only)"


def test_step_limit_is_graded_by_the_env(gold_tasks_file: Path, limits_double, tmp_path: Path):
    double, files = limits_double
    server = start_server_process(gold_tasks_file, tmp_path / "data", extra_args=["--max-steps", "3"])
    try:
        out = tmp_path / "out"
        run_eval([server.url], files["ls"], double.base_url, out)
        r = _one(out)
        trace = _trace(server.url, r["episode_id"])
    finally:
        server.stop()
    assert (r["end_reason"], r["turns"], r["steps"], r["status"], r["reward"]) == ("step_limit", 3, 3, "resolved", 1.0)
    last = trace[-1]
    assert last["action"]["tool_name"] == "bash" and last["observation"]["done"] is True, "the env ended it"
    assert "step budget of 3 used up" in last["observation"]["output"]
