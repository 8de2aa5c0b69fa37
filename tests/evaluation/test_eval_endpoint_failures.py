"""What the endpoint's failures make of an episode, through the real env server: an endpoint that
stays down loses the episode (retried, then reported lost, never scored as a 0); a context that
no longer fits ends it by auto-submit (scored, `context_limit`); a tool call whose arguments are
not JSON is the agent's error and the episode goes on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import uvicorn
from evalkit import report, result_lines, run_eval
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from serverlib import free_port, serve_in_thread


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
