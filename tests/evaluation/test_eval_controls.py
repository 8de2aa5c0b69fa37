"""The controls, end to end: a policy double that always applies the gold patch scores 1.0, one
that submits at once and one that never calls a tool score 0.0, through the real env server,
sandbox and grader; the outputs (report.json / .md, rollouts.jsonl) say so, and the server's
state(t) of an evaluated episode is exactly the context the model was sent."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from eval_support import MODEL, plain, report, result_lines, run_eval, server_states, trainer_client
from support.policy_double import PolicyDouble

from env_client import read_jsonl, sft_examples
from env_client.processes import free_port

SAMPLES = 2


@pytest.fixture(scope="module")
def gold_run(env_url: str, gold_tasks_file: Path, tmp_path_factory: pytest.TempPathFactory):
    """The gold double through `trainer-client evaluate` (the command a user runs): (out, requests)."""
    logs = tmp_path_factory.mktemp("gold-double")
    out = tmp_path_factory.mktemp("gold-run") / "out"
    with PolicyDouble(gold_tasks_file, "gold", logs) as double:
        proc = trainer_client("evaluate", "--model", double.base_url, "--env-url", env_url, "--tasks",
                              gold_tasks_file, "--samples", SAMPLES, "--concurrency", 4, "--out", out)
        requests = double.requests()
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, requests, proc


@pytest.fixture(scope="module")
def submit_run(env_url: str, gold_tasks_file: Path, tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("submit-run") / "out"
    with PolicyDouble(gold_tasks_file, "submit", tmp_path_factory.mktemp("submit-double")) as double:
        summary = run_eval([env_url], gold_tasks_file, double.base_url, out, samples=SAMPLES)
    return out, summary


@pytest.fixture(scope="module")
def silent_run(env_url: str, gold_tasks_file: Path, tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("silent-run") / "out"
    with PolicyDouble(gold_tasks_file, "silent", tmp_path_factory.mktemp("silent-double")) as double:
        summary = run_eval([env_url], gold_tasks_file, double.base_url, out, samples=1)
        requests = double.requests()
    return out, summary, requests


def test_gold_double_resolves_every_episode(gold_run, gold_rows):
    out, _, proc = gold_run
    n_tasks = len(gold_rows)
    results = result_lines(out)
    assert sorted((r["instance_id"], r["sample"]) for r in results) == sorted(
        (row["instance_id"], s) for row in gold_rows for s in range(SAMPLES))
    assert all(r["status"] == "resolved" and r["reward"] == 1.0 and r["end_reason"] == "submitted" for r in results)
    assert all(r["turns"] == 2 and r["attempts"] == 1 and not r["lost_reasons"] for r in results)
    assert all(r["model_patch"] and "+++ " in r["model_patch"] for r in results), "the graded diff is kept"
    assert len({r["episode_id"] for r in results}) == len(results)

    data = report(out)
    assert data["model_name"] == MODEL  # the endpoint's first model (GET /v1/models): no --model-name given
    s = data["summary"]
    o = s["overall"]
    assert (o["tasks"], o["episodes"], o["scored"], o["lost"], o["resolved"]) == (
        n_tasks, n_tasks * SAMPLES, n_tasks * SAMPLES, 0, n_tasks * SAMPLES)
    assert o["resolved_rate"] == 1.0 and o["pass@1"] == 1.0
    low, high = o["ci95"]
    assert 0.0 < low < 1.0 and high == 1.0
    assert s["pass_at_k"] == {"pass@1": {"value": 1.0, "tasks": n_tasks}, "pass@2": {"value": 1.0, "tasks": n_tasks}}
    assert set(s["by_source"]) == {row["source"] for row in gold_rows}
    assert set(s["by_repo"]) == {row["repo"] for row in gold_rows}
    assert all(row["resolved_rate"] == 1.0 and row["episodes"] == SAMPLES for row in s["by_repo"].values())
    assert s["turns"]["mean"] == 2.0 and s["turns"]["max"] == 2
    assert s["end_reasons"] == {"submitted": n_tasks * SAMPLES}
    assert s["tokens"]["prompt"] == sum(r["prompt_tokens"] for r in results) > 0
    assert s["tokens"]["completion"] == sum(r["completion_tokens"] for r in results) > 0
    assert s["retried_episodes"] == 0 and s["lost_reasons"] == {}
    assert {iid: (t["n"], t["c"], t["rate"]) for iid, t in data["tasks"].items()} == {
        row["instance_id"]: (SAMPLES, SAMPLES, 1.0) for row in gold_rows}

    md = (out / "report.md").read_text(encoding="utf-8")
    assert f"Resolved {n_tasks * SAMPLES} / {n_tasks * SAMPLES} episodes = 100.0%" in md
    # one row per task: which resolved, how its episodes ended (without reading results.jsonl)
    table = md.split("### By task\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert table[0] == "| task | source | resolved | lost | ended | failed tool calls |"
    assert sorted(table[2:]) == sorted(f"| {row['instance_id']} | {row['source']} | {SAMPLES}/{SAMPLES} | 0 | "
                                       f"submitted {SAMPLES} | - |" for row in gold_rows), table
    assert f"resolved {n_tasks * SAMPLES}/{n_tasks * SAMPLES} = 100.0%" in proc.stdout
    assert not (out / "predictions.jsonl").exists(), "no SWE-bench task: no predictions file"


def test_submit_and_silent_doubles_score_zero(submit_run, silent_run, gold_rows):
    n_tasks = len(gold_rows)
    out, summary = submit_run
    assert summary["overall"]["resolved_rate"] == 0.0 and summary["overall"]["scored"] == n_tasks * SAMPLES
    assert summary["pass_at_k"]["pass@1"]["value"] == 0.0 and summary["pass_at_k"]["pass@2"]["value"] == 0.0
    assert summary["end_reasons"] == {"submitted": n_tasks * SAMPLES}
    assert all(r["status"] == "unresolved" and r["reward"] == 0.0 and r["turns"] == 1 for r in result_lines(out))
    assert report(out)["summary"]["overall"]["resolved_rate"] == 0.0

    out, summary, requests = silent_run
    results = result_lines(out)
    assert len(results) == n_tasks
    assert all(r["status"] == "unresolved" and r["end_reason"] == "no_tool_call" and r["turns"] == 1
               for r in results)
    assert summary["overall"]["resolved_rate"] == 0.0 and summary["end_reasons"] == {"no_tool_call": n_tasks}
    assert len(requests) == n_tasks, "one request per episode: the answer without a tool call ends it"
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "0.0%" in md
    for row in gold_rows:  # each task's row says it failed, and how its episode ended
        assert f"| {row['instance_id']} | {row['source']} | 0/1 | 0 | no_tool_call 1 | - |" in md, md


def test_rollouts_hold_one_record_per_episode(gold_run, submit_run):
    gold_out, _, _ = gold_run
    submit_out, _ = submit_run
    gold = read_jsonl(gold_out / "rollouts.jsonl")
    submit = read_jsonl(submit_out / "rollouts.jsonl")
    assert sorted(r.episode_id for r in gold) == sorted(r["episode_id"] for r in result_lines(gold_out))
    assert sorted(r.episode_id for r in submit) == sorted(r["episode_id"] for r in result_lines(submit_out))
    assert all(r.recorded_by == "client" and r.reward == 1.0 and r.resolved is True and len(r.turns) == 2
               for r in gold)
    assert all(t.token_ids is None and t.logprobs is None for r in gold for t in r.turns), "none asked (no --logprobs)"
    assert all(r.reward == 0.0 for r in submit)
    sft = sft_examples(submit + gold)
    assert [e["messages"] for e in sft] == [r.messages for r in gold], "SFT keeps the gold episodes, only them"
    for e in sft:
        calls = [c["function"]["name"] for m in e["messages"] if m["role"] == "assistant" for c in m["tool_calls"]]
        assert calls == ["bash", "submit"]


def test_server_state_is_the_context_the_model_saw(gold_run, env_url):
    """For every turn of every evaluated episode, the env server's state(t) just before the turn
    holds exactly the messages and tools the double received in a request."""
    out, requests, _ = gold_run
    received = [(json.dumps(plain(r["messages"]), sort_keys=True), json.dumps(r["tools"], sort_keys=True))
                for r in requests]
    records = read_jsonl(out / "rollouts.jsonl")
    assert len(requests) == sum(len(r.turns) for r in records), "one request per policy turn, no retries"
    matched = 0
    for record in records:
        before = [turn.steps[0] - 1 for turn in record.turns]
        states = asyncio.run(server_states(env_url, record.episode_id, before))
        for turn, t in zip(record.turns, before):
            state = states[t]
            assert state["episode_id"] == record.episode_id and state["t"] == t
            key = (json.dumps(plain(state["messages"]), sort_keys=True), json.dumps(state["tools"], sort_keys=True))
            assert key in received, f"state({t}) of {record.episode_id} is not a context the model was sent"
            assert plain(state["messages"]) == plain(record.messages[:turn.message_index])
            matched += 1
    assert matched == len(requests)


def test_rerun_of_a_finished_evaluation_needs_no_model_and_no_env(gold_run, gold_tasks_file, gold_rows):
    """Rerunning the finished command only rewrites the report: nothing is left to run, so neither the
    (stopped) model endpoint nor an env replica is contacted."""
    out, _, _ = gold_run
    before = result_lines(out)
    (out / "report.md").unlink()
    dead = f"http://127.0.0.1:{free_port()}"
    proc = trainer_client("evaluate", "--model", f"{dead}/v1", "--model-name", MODEL, "--env-url", dead,
                          "--tasks", gold_tasks_file, "--samples", SAMPLES, "--concurrency", 4, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"({len(before)} episodes already in" in proc.stderr and ", 0 to run," in proc.stderr
    assert result_lines(out) == before
    n = len(gold_rows) * SAMPLES
    assert f"Resolved {n} / {n} episodes = 100.0%" in (out / "report.md").read_text(encoding="utf-8")
