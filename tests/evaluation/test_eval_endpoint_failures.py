"""What the endpoint's failures make of an episode, through the real env server: an endpoint that
stays down loses the episode (retried, then reported lost, never scored as a 0; what its attempts
were billed is counted); a context that no longer fits ends it by auto-submit (scored,
`context_limit`); a tool call whose arguments are not JSON, or that has no name, is the agent's
error and the episode goes on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import uvicorn
from eval_support import report, result_lines, run_eval
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from support.servers import free_port, serve_in_thread

from env_client import read_jsonl


@pytest.fixture
def scripted_endpoint():
    """An OpenAI-compatible endpoint test double whose answers `script(nth assistant turn)` decides:
    (status, body). Yields (base_url, set_script, seen request count)."""
    app = FastAPI()
    state: dict = {"script": None, "requests": 0}

    @app.get("/health")
    def health() -> dict:
        return {"status": "healthy"}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        state["requests"] += 1
        n = sum(m.get("role") == "assistant" for m in body["messages"])
        status, payload = state["script"](n)
        return JSONResponse(payload, status_code=status)

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with serve_in_thread(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"), url):
        yield f"{url}/v1", state


def _call(name: str, arguments: str) -> tuple[int, dict]:
    message = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": name, "arguments": arguments}}]}
    return 200, {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
                 "usage": {"prompt_tokens": 50, "completion_tokens": 5}}


def _one_task(gold_rows, tmp_path: Path) -> Path:
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(gold_rows[0]) + "\n", encoding="utf-8")
    return path


def test_endpoint_down_loses_the_episode_never_scores_it(env_url, gold_rows, scripted_endpoint, tmp_path: Path):
    base_url, state = scripted_endpoint
    state["script"] = lambda n: (503, {"error": {"message": "overloaded"}})
    out = tmp_path / "out"
    summary = run_eval([env_url], _one_task(gold_rows, tmp_path), base_url, out, samples=2, max_attempts=2,
                       retry_backoff_s=0.0)
    results = result_lines(out)
    assert len(results) == 2
    for r in results:
        assert r["status"] == "lost" and r["reward"] is None and r["attempts"] == 2
        assert len(r["lost_reasons"]) == 2 and all(x.startswith("policy endpoint:") and "503" in x
                                                   for x in r["lost_reasons"])
    o = summary["overall"]
    assert (o["scored"], o["lost"], o["resolved_rate"]) == (0, 2, None)
    assert summary["lost_reasons"] == {"policy endpoint": 2}
    assert summary["end_reasons"] == {}
    # 2 episodes x 2 attempts x (1 + 4 endpoint retries) requests: a 503 is retried, then the attempt is lost
    assert state["requests"] == 2 * 2 * 5
    assert "2 episodes lost to infrastructure" in (out / "report.md").read_text(encoding="utf-8")
    assert report(out)["tasks"][gold_rows[0]["instance_id"]]["rate"] is None


def test_context_too_long_auto_submits(env_url, gold_rows, scripted_endpoint, tmp_path: Path):
    base_url, state = scripted_endpoint
    state["script"] = lambda n: (_call("bash", json.dumps({"command": "ls"})) if n == 0 else
                                 (400, {"error": {"message": "This model's maximum context length is 32768 tokens"}}))
    out = tmp_path / "out"
    summary = run_eval([env_url], _one_task(gold_rows, tmp_path), base_url, out)
    (r,) = result_lines(out)
    assert (r["status"], r["end_reason"], r["reward"], r["turns"], r["attempts"]) == (
        "unresolved", "context_limit", 0.0, 1, 1)
    assert summary["overall"]["scored"] == 1 and summary["end_reasons"] == {"context_limit": 1}
    assert state["requests"] == 2, "a context error is not retried"


def test_arguments_that_are_not_json_are_the_agents_error(env_url, gold_rows, scripted_endpoint, tmp_path: Path):
    base_url, state = scripted_endpoint
    state["script"] = lambda n: _call("bash", "{not json") if n == 0 else _call("submit", "{}")
    out = tmp_path / "out"
    run_eval([env_url], _one_task(gold_rows, tmp_path), base_url, out)
    (r,) = result_lines(out)
    assert (r["status"], r["end_reason"], r["turns"], r["attempts"]) == ("unresolved", "submitted", 2, 1)
    assert r["error_kinds"] == {"invalid_arguments": 1} and r["steps"] == 2, (r["error_kinds"], r["steps"])


def test_a_tool_call_without_a_name_is_the_agents_error(env_url, gold_rows, scripted_endpoint, tmp_path: Path):
    """A call with no function name is not dropped: it is sent under UNNAMED_TOOL, the env rejects it as
    the agent's unknown tool, the episode goes on (an answer holding only such a call is no no_tool_call)."""
    from evaluation import UNNAMED_TOOL

    base_url, state = scripted_endpoint
    nameless = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"arguments": json.dumps({"command": "ls"})}}]}
    state["script"] = lambda n: (200, {"choices": [{"index": 0, "message": nameless, "finish_reason": "tool_calls"}],
                                       "usage": {"prompt_tokens": 50, "completion_tokens": 5}}) if n == 0 \
        else _call("submit", "{}")
    out = tmp_path / "out"
    summary = run_eval([env_url], _one_task(gold_rows, tmp_path), base_url, out)
    (r,) = result_lines(out)
    assert (r["status"], r["end_reason"], r["turns"], r["steps"]) == ("unresolved", "submitted", 2, 2)
    assert r["error_kinds"] == {"unknown_tool": 1} and summary["error_kinds"] == {"unknown_tool": 1}
    (record,) = read_jsonl(out / "rollouts.jsonl")
    assert record.turns[0].tool_names == [UNNAMED_TOOL] and record.turns[0].error_kind == "unknown_tool"


def test_lost_attempts_are_billed_and_carried_into_a_rerun(env_url, gold_rows, scripted_endpoint, tmp_path: Path):
    """Each attempt is billed one answer (50 prompt + 5 completion tokens) before the endpoint goes down
    (503): the lost episode's cost is its two lost attempts'. A rerun runs it again and keeps them."""
    base_url, state = scripted_endpoint
    state["script"] = lambda n: _call("bash", json.dumps({"command": "ls"})) if n == 0 else \
        (503, {"error": {"message": "overloaded"}})
    out, tasks = tmp_path / "out", _one_task(gold_rows, tmp_path)
    prices = {"price_in": 3.0, "price_out": 15.0}
    one = (50 * 3.0 + 5 * 15.0) / 1e6
    summary = run_eval([env_url], tasks, base_url, out, max_attempts=2, retry_backoff_s=0.0, endpoint=prices)
    (r,) = result_lines(out)
    assert (r["status"], r["attempts"], r["prompt_tokens"], r["cost_usd"]) == ("lost", 2, 0, 0.0)
    assert r["lost_usage"] == {"attempts": 2, "turns": 2, "prompt_tokens": 100, "completion_tokens": 10,
                               "cost_usd": pytest.approx(2 * one)}
    assert summary["tokens"] == {"prompt": 100, "completion": 10} and summary["cost_usd"] == pytest.approx(2 * one)
    assert summary["lost_attempts"] == r["lost_usage"]

    state["script"] = lambda n: _call("submit", "{}")
    summary = run_eval([env_url], tasks, base_url, out, max_attempts=2, retry_backoff_s=0.0, endpoint=prices)
    r = result_lines(out)[-1]
    assert (r["status"], r["attempts"], len(r["lost_reasons"]), r["prompt_tokens"]) == ("unresolved", 3, 2, 50)
    assert r["lost_usage"]["cost_usd"] == pytest.approx(2 * one)
    assert summary["tokens"] == {"prompt": 150, "completion": 15} and summary["cost_usd"] == pytest.approx(3 * one)
    assert summary["retried_episodes"] == 1 and summary["overall"]["lost"] == 0
