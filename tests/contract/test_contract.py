"""One contract between env and trainer (the contract package), checked from both sides.

Every hint key the env can emit has its own hint in the trainer's table and every hint is
reachable; the trainer's tools are described to the policy exactly as the env serves them;
the state(t) record, the pair record and the task record round-trip between the two sides.
"""

from __future__ import annotations

import json

import pytest
from transformers.utils import get_json_schema

from contract import (AGENT_HINT_KEYS, ERROR_KIND_TABLE, HINT_KEYS, PROFILES, TOOL_SPECS, ChatMessage, ErrorKind,
                      NextAction, StateRecord, SWEObservation, get_profile)
from env_server.markers import KIND_TABLE, failure
from trainer_client.environment import environment_class
from trainer_client.losses import ErrorSite, load_hint_source
from trainer_client.losses.pairs import load_pairs
from trainer_client.pair_records import PairProvenance, PairRecord, ToolCall
from trainer_client.replay.models import FrozenState as ReplayState
from verifier.task import TaskInstance, TaskRecord


def test_every_key_the_env_emits_has_its_own_hint_and_every_hint_is_reachable():
    src = load_hint_source()
    for kind in ErrorKind:  # what the env puts on the wire for each kind
        meta = failure(kind, "boom").metadata()
        assert meta["hint_template_key"] == ERROR_KIND_TABLE[kind].hint_template_key
        site = ErrorSite(turn=1, error_kind=meta["error_kind"], hint_template_key=meta["hint_template_key"],
                         token_start=1, tool_name="bash")
        assert src.resolve_key(site) == meta["hint_template_key"], kind
        assert "{" not in src.hint(site)
    table = set(src.templates) - {"default"}
    assert table <= HINT_KEYS, f"unreachable hints: {sorted(table - HINT_KEYS)}"
    assert AGENT_HINT_KEYS <= table
    assert len({src.templates[k] for k in HINT_KEYS}) == len(HINT_KEYS)  # each its own text


def test_the_env_markers_are_the_contract_table():
    assert set(KIND_TABLE) == set(ErrorKind) == set(ERROR_KIND_TABLE)
    for kind, (key, source) in KIND_TABLE.items():
        assert (key, source) == (ERROR_KIND_TABLE[kind].hint_template_key, ERROR_KIND_TABLE[kind].error_source)


@pytest.mark.parametrize("profile", list(PROFILES))
def test_the_trainer_describes_each_tool_exactly_as_the_env_serves_it(profile):
    specs = TOOL_SPECS if profile == "default" else get_profile(profile).specs()
    served = {spec.name: spec.openai()["function"] for spec in specs}
    env_class = environment_class(profile)
    methods = {name for name in served if callable(getattr(env_class, name, None))}
    assert methods == set(served) == set(env_class.tool_methods())
    for name, spec in served.items():
        schema = get_json_schema(getattr(env_class, name))  # what TRL shows the policy
        assert schema["function"]["name"] == name
        assert schema["function"]["description"] == spec["description"], name
        params = schema["function"]["parameters"]
        assert set(params.get("properties", {})) == set(spec["parameters"].get("properties", {})), name
        assert set(params.get("required", [])) == set(spec["parameters"].get("required", [])), name
        for arg, prop in spec["parameters"].get("properties", {}).items():
            got = params["properties"][arg]
            assert got["type"] == prop["type"], (name, arg)
            assert got["description"].rstrip(".").lower() == prop["description"].rstrip(".").lower(), (name, arg)


def test_a_state_record_round_trips_to_the_trainer():
    record = StateRecord(
        episode_id="e1", instance_id="pkg__1", t=1,
        messages=[ChatMessage(role="system", content="s"), ChatMessage(role="user", content="fix it"),
                  ChatMessage(role="assistant", content="", tool_calls=[{"id": "call_1", "type": "function",
                              "function": {"name": "bash", "arguments": json.dumps({"command": "ls"})}}]),
                  ChatMessage(role="tool", content="a.py", name="bash", tool_call_id="call_1")],
        tools=[s.openai() for s in TOOL_SPECS],
        observation=SWEObservation(output="a.py", tool_name="bash",
                                   metadata={"error_kind": "nonzero_exit", "hint_template_key": "shell.nonzero_exit"}),
        diff="diff --git a/a.py b/a.py\n", next_action=NextAction(tool_name="submit"))
    wire = record.model_dump_json()
    seen = ReplayState.model_validate_json(wire)
    assert seen.state_id == "e1:1" and seen.next_action == ToolCall(tool_name="submit")
    assert seen.messages == json.loads(wire)["messages"] and seen.tools == json.loads(wire)["tools"]
    assert seen.obs_metadata["hint_template_key"] in HINT_KEYS
    assert StateRecord.model_validate_json(seen.model_dump_json()) == record


def test_a_pair_record_round_trips_to_the_loss(tmp_path):
    pair = PairRecord(
        state_id="e1:1",
        messages=[{"role": "user", "content": "fix it"}],
        tools=[s.openai() for s in TOOL_SPECS],
        chosen=ToolCall(tool_name="view", arguments={"path": "a.py"}),
        rejected=ToolCall(tool_name="bash", arguments={"command": "rm -rf tests"}),
        n_teachers_agreeing=2,
        provenance=PairProvenance(episode_id="e1", t=1, teachers=["a", "b", "c"], agreeing=["a", "b"]))
    path = tmp_path / "pairs.jsonl"
    path.write_text(pair.model_dump_json() + "\n")
    (loaded,) = load_pairs(path)
    assert (loaded.state_id, loaded.chosen.tool_name, loaded.chosen.arguments) == ("e1:1", "view", {"path": "a.py"})
    assert loaded == pair  # the one pair type, from the file to the loss
    bad = json.loads(pair.model_dump_json())
    del bad["provenance"]["episode_id"]
    path.write_text(json.dumps(bad) + "\n")
    try:
        load_pairs(path)
    except ValueError as exc:
        assert "pairs.jsonl:1" in str(exc) and "episode_id" in str(exc)
    else:
        raise AssertionError("a pair without provenance was accepted")


def test_a_task_record_loads_as_the_servers_task(tmp_path):
    (tmp_path / "repo").mkdir()
    record = TaskRecord(instance_id="pkg__1", source="synthetic-mutation", repo="pypi/pkg", base_commit="abc", problem_statement="broken",
                        patch="diff", FAIL_TO_PASS=["t.py::test_a"], PASS_TO_PASS=[], version="1.0",
                        environment_setup_commit="abc", repo_path="repo")
    task = TaskInstance.model_validate(record.model_dump()).resolved(tmp_path)
    assert task.repo_path == (tmp_path / "repo").resolve() and task.tests == ["t.py::test_a"]
    shared = set(TaskRecord.model_fields) - {"repo_path", "python_env"}
    assert all(getattr(task, f) == getattr(record, f) for f in shared)


def test_every_error_code_the_env_can_send_has_a_client_class():
    """A code is mapped to its own exception class, is UNAUTHORIZED (EnvAuthError), or is one of the
    few declared generic ones; a new code in the contract fails here until the client decides."""
    from contract import ErrorCode
    from env_client.errors import _ERRORS_BY_CODE, GENERIC_CODES, EnvAuthError, EnvServerError, server_error

    for code in ErrorCode:
        if code is ErrorCode.UNAUTHORIZED:
            continue
        assert (code.value in _ERRORS_BY_CODE) != (code.value in GENERIC_CODES), code
        err = server_error({"code": code.value, "message": "m"})
        assert isinstance(err, EnvServerError) and err.code == code.value
        assert (type(err) is EnvServerError) == (code.value in GENERIC_CODES), code
    assert issubclass(EnvAuthError, PermissionError)


def test_a_live_pair_records_where_it_came_from():
    """The live loop's provenance fields (source, train_step, fork verification) survive the loss's reader."""
    pair = PairRecord(
        state_id="e1:2", messages=[{"role": "user", "content": "fix"}], tools=[],
        chosen=ToolCall(tool_name="str_replace", arguments={"path": "a.py", "old": "-", "new": "+"}),
        rejected=ToolCall(tool_name="submit"), n_teachers_agreeing=1,
        provenance=PairProvenance(episode_id="e1", t=2, teachers=["a", "b"], agreeing=["a"], verification="fork",
                                  rewards={"a": 1.0, "student": 0.0}, forks={"a": "f1", "student": "f2"},
                                  source="live", train_step=3))
    assert PairRecord.model_validate_json(pair.model_dump_json()) == pair
    old = json.loads(pair.model_dump_json())
    for key in ("verification", "rewards", "forks", "source", "train_step"):
        del old["provenance"][key]
    assert PairRecord.model_validate(old).provenance.source == "offline"  # records written before still load
