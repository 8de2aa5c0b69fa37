"""What OpenEnv's clients rely on, frame by frame (no client venv needed): observations without
``null`` ``tools``, a ``result`` on ``/ws`` tool steps, and ``/ws?session_id=`` sharing an HTTP MCP
session with ``/mcp`` (openenv 0.10's ``MCPToolClient``)."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
import websockets
from support.servers import call, tool

pytestmark = pytest.mark.slow


def ws_url(server, session_id: str | None = None) -> str:
    url = server.url.replace("http", "ws", 1) + "/ws"
    return url if session_id is None else f"{url}?session_id={session_id}"


async def rpc(http: httpx.AsyncClient, method: str, **params) -> dict:
    return (await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params})).json()


async def wait_until(predicate, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return predicate()


def test_observations_leave_unset_fields_out_and_ws_tool_steps_carry_the_mcp_result(server, demo_task):
    async def main():
        async with websockets.connect(ws_url(server)) as ws:
            reset = (await call(ws, "reset", {"instance_id": demo_task.instance_id}))["data"]["observation"]
            assert {"tools", "issue"} <= set(reset) and "tool_name" not in reset and "result" not in reset
            step = (await call(ws, "step", tool("bash", command="echo hi")))["data"]
            obs = step["observation"]
            assert "tools" not in obs and "issue" not in obs and obs["tool_name"] == "bash"
            assert obs["result"] == {"content": [{"type": "text", "text": obs["output"]}], "isError": False,
                                     "structuredContent": {"done": False, "reward": None,
                                                           "metadata": step["metadata"]}}
            failed = (await call(ws, "step", tool("view", path="no/such/file")))["data"]["observation"]
            assert failed["result"]["isError"] is True and failed["metadata"]["error_kind"] == "file_not_found"
            listed = (await call(ws, "step", {"type": "list_tools"}))["data"]["observation"]
            assert len(listed["tools"]) == 5 and "tool_name" not in listed and "result" not in listed
    asyncio.run(main())


def test_ws_with_session_id_shares_the_http_mcp_session(server, demo_task):
    async def main():
        async with httpx.AsyncClient(base_url=server.url, timeout=120) as http:
            created = await rpc(http, "openenv/session/create")
            sid = created["result"]["session_id"]
            async with websockets.connect(ws_url(server, "no-such-session")) as ws:
                frame = json.loads(await ws.recv())
                assert frame["type"] == "error" and frame["data"]["code"] == "SESSION_NOT_FOUND"
                with pytest.raises(websockets.ConnectionClosed):
                    await ws.recv()

            async with websockets.connect(ws_url(server, sid)) as ws:
                reset = await call(ws, "reset", {"instance_id": demo_task.instance_id, "episode_id": "shared-1"})
                assert reset["data"]["metadata"]["episode_id"] == "shared-1"
                async with websockets.connect(ws_url(server, sid)) as second:  # one connection at a time
                    frame = json.loads(await second.recv())
                    assert frame["type"] == "error" and frame["data"]["code"] == "SESSION_ERROR"
                done = await rpc(http, "tools/call", session_id=sid, name="bash", arguments={"command": "ls"})
                assert "six.py" in done["result"]["content"][0]["text"]
                state = await call(ws, "state")  # the /mcp call landed in the episode /ws reset
                assert state["data"]["episode_id"] == "shared-1" and state["data"]["step_count"] == 1
                await ws.send(json.dumps({"type": "close"}))
            # closing the socket hands the session back: still open for /mcp, not closed with it
            assert await wait_until(lambda: not server.service.sessions[sid].attached)
            done = await rpc(http, "tools/call", session_id=sid, name="bash", arguments={"command": "true"})
            assert done["result"]["structuredContent"]["metadata"]["step"] == 2
            closed = await rpc(http, "openenv/session/close", session_id=sid)
            assert closed["result"] == {"session_id": sid, "closed": True} and sid not in server.service.sessions
    asyncio.run(main())


def test_disconnect_mid_step_closes_a_shared_session(server):
    async def main():
        async with httpx.AsyncClient(base_url=server.url, timeout=120) as http:
            sid = (await rpc(http, "openenv/session/create"))["result"]["session_id"]
        episode = server.service.sessions[sid].episode
        ws = await websockets.connect(ws_url(server, sid))
        await ws.send(json.dumps({"type": "step", "data": tool("bash", command="sleep 60")}))
        await asyncio.sleep(0.5)
        await ws.close()
        assert await wait_until(lambda: sid not in server.service.sessions and not episode.sandbox.alive)
    asyncio.run(main())
