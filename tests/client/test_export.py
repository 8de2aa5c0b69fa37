"""Rollout export: the client's own recording (token ids and log-probs per assistant turn) and
the server's records give the same training record; JSONL and Parquet round-trip; offline
SFT / DPO selection needs no server."""

from __future__ import annotations

import sys

import pytest
from pydantic import ValidationError

from env_client import (EnvClient, MissingDependencyError, PolicyTurn, RolloutRecord, preference_pairs, read_jsonl,
                        read_parquet, rollout_from_states, sft_examples, write_jsonl, write_parquet)

from .conftest import FIX, INSTANCE

CONTEXT = {"prompt": [{"role": "system", "content": "You fix bugs with tools."},
                      {"role": "user", "content": "Fix this issue:\n"}],
           "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}],
           "max_output_chars": 2000}


def play(client: EnvClient, fix: bool, context: dict | None = CONTEXT) -> RolloutRecord:
    """Three policy turns (one of two tool calls) with token ids and log-probs, then submit."""
    kwargs = {"instance_id": INSTANCE} | ({"context": context} if context else {})
    with client.open(**kwargs) as session:
        calls = [{"function": {"name": "bash", "arguments": {"command": "ls"}}},
                 {"function": {"name": "bash", "arguments": {"command": "cat nope.txt"}}}]
        session.begin_turn(content="Let me look.", tool_calls=calls, token_ids=[11, 12, 13],
                           logprobs=[-0.5, -0.25, -1.0])
        session.call_tool("bash", {"command": "ls"})
        session.call_tool("bash", {"command": "cat nope.txt"})  # same turn, fails: the turn's error site
        name, args = FIX if fix else ("bash", {"command": "true"})
        session.call_tool(name, args, turn=PolicyTurn(token_ids=[21, 22], logprobs=[-0.1, -0.2]))
        session.call_tool("submit", turn=PolicyTurn(content="Done.", token_ids=[31], logprobs=[-0.05]))
        return session.export()


def test_client_and_server_records_agree(server, tmp_path):
    with EnvClient(server.url) as client:
        mine = play(client, fix=True)
        theirs = client.export_episode(mine.episode_id)
        states = [client.episode_state(mine.episode_id, t) for t in range(mine.n_steps + 1)]
    assert (mine.recorded_by, theirs.recorded_by) == ("client", "server")
    assert (mine.reward, mine.done, mine.resolved, mine.n_steps) == (1.0, True, True, 4)
    assert (mine.instance_id, mine.task_source) == (INSTANCE, "synthetic-mutation")
    assert mine.messages[0] == CONTEXT["prompt"][0] and mine.tools == CONTEXT["tools"]
    assert [(t.steps, t.tool_names, t.token_ids, t.logprobs) for t in mine.turns] == [
        ([1, 2], ["bash", "bash"], [11, 12, 13], [-0.5, -0.25, -1.0]),
        ([3], ["str_replace"], [21, 22], [-0.1, -0.2]),
        ([4], ["submit"], [31], [-0.05])]
    assert (mine.turns[0].error_kind, mine.turns[0].hint_template_key, mine.turns[0].error_source) == \
        ("nonzero_exit", "shell.nonzero_exit", "agent")
    assert mine.turns[1].error_kind is None
    assert mine.metadata["tests_passed"] > 0 and mine.metadata["fail_to_pass"]
    # the server rebuilds the same record from its trace and state(t), minus the log-probs
    assert theirs.model_dump(exclude={"recorded_by", "turns"}) == mine.model_dump(exclude={"recorded_by", "turns"})
    assert [t.model_dump(exclude={"logprobs"}) for t in theirs.turns] == \
        [t.model_dump(exclude={"logprobs"}) for t in mine.turns]
    assert all(t.logprobs is None for t in theirs.turns)
    # and from the state(t) records alone (e.g. a saved state(t) JSONL)
    assert rollout_from_states(states) == theirs
    last_only = rollout_from_states(states[-1:])
    assert last_only.messages == theirs.messages and last_only.reward == 1.0


def test_files_round_trip_and_offline_pipelines(server, tmp_path):
    with EnvClient(server.url) as client:
        good, bad = play(client, fix=True), play(client, fix=False)
        plain = play(client, fix=True, context=None)
    assert bad.reward == 0.0 and bad.resolved is False
    # without a context the client cannot know the server's system prompt: its chat starts at the issue
    assert plain.messages[0]["role"] == "user" and plain.tools[0]["function"]["name"] == "bash"
    records = [good, bad, plain]
    assert write_jsonl(records, tmp_path / "r.jsonl") == 3
    assert read_jsonl(tmp_path / "r.jsonl") == records
    assert write_parquet(records, tmp_path / "r.parquet") == 3
    assert read_parquet(tmp_path / "r.parquet") == records
    # offline: SFT on successes, DPO pairs per shared prompt (the server is not needed any more)
    loaded = read_parquet(tmp_path / "r.parquet")
    assert [ex["messages"] for ex in sft_examples(loaded)] == [good.messages, plain.messages]
    pairs = preference_pairs(loaded)
    assert len(pairs) == 1 and pairs[0]["chosen_episode_id"] == good.episode_id
    assert pairs[0]["prompt"] == good.messages[:2] and pairs[0]["chosen"][0]["role"] == "assistant"


def test_parquet_without_pyarrow_is_a_clear_error(monkeypatch, tmp_path):
    record = RolloutRecord(episode_id="e", instance_id="i", recorded_by="client", messages=[], tools=[], turns=[])
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(MissingDependencyError, match="pip install pyarrow") as info:
        write_parquet([record], tmp_path / "x.parquet")
    assert isinstance(info.value, ImportError)
    assert write_jsonl([record], tmp_path / "x.jsonl") == 1  # JSONL needs nothing


def test_records_are_strict():
    with pytest.raises(ValidationError, match="logprobs has 1 entries for 2 token ids"):
        PolicyTurn(token_ids=[1, 2], logprobs=[-0.1])
    with pytest.raises(ValidationError, match="extra"):
        RolloutRecord(episode_id="e", instance_id="i", recorded_by="client", messages=[], tools=[], turns=[],
                      surprise=1)
