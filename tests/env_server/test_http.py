"""HTTP side: OpenEnv's validator, /mcp JSON-RPC, auth, metrics, idle timeout, the CLI."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import websockets
from env_support import requires_sandbox, run
from test_ws import call, tool

from env_client.local_server import local_env_server

pytestmark = requires_sandbox
OPENENV = Path(sys.executable).with_name("openenv")


def test_openenv_validate_passes(make_server):
    with make_server() as srv:
        proc = subprocess.run([str(OPENENV), "validate", "--url", srv.url, "--json"], capture_output=True,
                              text=True, timeout=120)
        report = json.loads(proc.stdout)
        assert report["passed"] is True, report
        assert proc.returncode == 0


def test_mcp_over_http_sessions(make_server):
    with make_server() as srv, httpx.Client(base_url=srv.url, timeout=120) as http:
        rpc = lambda method, params=None, i=1: http.post("/mcp", json={"jsonrpc": "2.0", "id": i, "method": method,
                                                                          "params": params or {}}).json()
        assert {t["name"] for t in rpc("tools/list")["result"]["tools"]} == {"bash", "view", "str_replace",
                                                                             "create", "submit"}
        assert rpc("tools/call", {"name": "bash", "arguments": {"command": "ls"}})["error"]["code"] == -32602
        created = rpc("openenv/session/create", {"instance_id": "six__demo-1"})["result"]
        sid = created["session_id"]
        out = rpc("tools/call", {"session_id": sid, "name": "bash", "arguments": {"command": "echo hi"}})["result"]
        assert out["content"][0]["text"].strip() == "hi" and out["isError"] is False
        bad = rpc("tools/call", {"session_id": sid, "name": "view", "arguments": {"path": "zzz"}})["result"]
        assert bad["isError"] is True and bad["structuredContent"]["metadata"]["error_kind"] == "file_not_found"
        assert rpc("no/such")["error"]["code"] == -32601
        assert http.post("/mcp", content=b"{oops").json()["error"]["code"] == -32700
        assert http.post("/mcp", json={}).json()["error"]["code"] == -32600
        assert rpc("openenv/session/close", {"session_id": sid})["result"]["closed"] is True
        assert not srv.service.sessions
        metrics = http.get("/metrics").text
        assert 'envserver_tool_errors_total{error_kind="file_not_found",error_source="agent"} 1.0' in metrics
        assert "envserver_step_latency_seconds_count 2.0" in metrics


def test_mcp_over_ws(make_server):
    async def main(srv):
        async with websockets.connect(srv.ws_url + "/ws") as ws:
            await call(ws, "reset")
            r = await call(ws, "mcp", {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                                       "params": {"name": "bash", "arguments": {"command": "echo via-mcp"}}})
            assert r["type"] == "mcp" and r["data"]["result"]["content"][0]["text"].strip() == "via-mcp"
            assert (await call(ws, "state"))["data"]["step_count"] == 1
    with make_server() as srv:
        run(main(srv))


def test_bearer_token(make_server):
    async def main(srv):
        with pytest.raises(websockets.InvalidStatus):
            await websockets.connect(srv.ws_url + "/ws")
        async with websockets.connect(srv.ws_url + "/mux", additional_headers={"Authorization": "Bearer s3cret"}):
            pass
    with make_server(auth_token="s3cret") as srv, httpx.Client(base_url=srv.url, timeout=120) as http:
        assert http.get("/health").status_code == 200
        r = http.get("/metadata")
        assert r.status_code == 401 and r.json()["error"]["code"] == "UNAUTHORIZED"
        assert http.get("/metadata", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        run(main(srv))


def test_idle_timeout_reaps_only_detached_sessions(make_server):
    async def main(srv, http):
        async with websockets.connect(srv.ws_url + "/ws") as ws:
            await call(ws, "reset")
            sid = http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create",
                                          "params": {}}).json()["result"]["session_id"]
            deadline = time.monotonic() + 15
            while sid in srv.service.sessions and time.monotonic() < deadline:
                await ws.ping()
                await asyncio.sleep(0.2)
            assert sid not in srv.service.sessions
            r = await call(ws, "step", tool("bash", command="echo still-here"))
            assert r["data"]["observation"]["output"].strip() == "still-here"

    with make_server(idle_timeout_s=1.0) as srv, httpx.Client(base_url=srv.url, timeout=120) as http:
        run(main(srv, http))


def test_cli_serve_runs_a_real_process(demo_tasks_path, tmp_path):
    with local_env_server(demo_tasks_path, data_dir=tmp_path, extra_args=["--max-sessions", "3"],
                          startup_timeout_s=30) as server:
        meta = httpx.get(f"{server.url}/metadata").json()
        assert meta["max_sessions"] == 3 and meta["tasks"] == 1 and meta["backend"] == "bwrap"  # its name
    assert server.returncode is not None


def test_cli_rejects_a_bad_task_file(tmp_path):
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"instance_id": "x", "problem_statement": "p", "repo_path": "nowhere"}\n')
    proc = subprocess.run([sys.executable, "-m", "env_server.cli", "serve", "--tasks", str(bad)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "instance 'x': field 'repo_path'" in proc.stderr


def test_metrics_labels_stay_bounded_under_made_up_tool_names(make_server):
    """Tool names come from the model: 50 made-up ones add one `unknown` series, not 50."""
    async def main(srv):
        async with websockets.connect(srv.ws_url + "/ws") as ws:
            await call(ws, "reset")
            for i in range(50):
                r = await call(ws, "step", tool(f"hallucinated_{i}"))
                assert r["data"]["metadata"]["error_kind"] == "unknown_tool"
            await call(ws, "step", tool("bash", command="true"))
    with make_server() as srv:
        run(main(srv))
        metrics = httpx.get(srv.url + "/metrics").text
        steps = [l for l in metrics.splitlines() if l.startswith("envserver_steps_total{")]
        assert 'envserver_steps_total{tool="unknown"} 50.0' in steps, steps
        assert 'envserver_steps_total{tool="bash"} 1.0' in steps, steps
        assert not any("hallucinated" in l for l in metrics.splitlines())
