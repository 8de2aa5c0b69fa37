"""/ws end to end: the real server, the real sandbox, the demo task."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import websockets
from env_support import call, requires_sandbox, run, tool

pytestmark = requires_sandbox


def test_full_episode_resolves_with_the_fix(make_server, demo_task):
    async def main(srv):
        async with websockets.connect(srv.ws_url + "/ws") as ws:
            r = await call(ws, "reset", {"instance_id": demo_task.instance_id, "episode_id": "ep-full"})
            obs = r["data"]["observation"]
            assert r["type"] == "observation" and r["data"]["done"] is False
            assert "six.b()" in obs["issue"] and {t["name"] for t in obs["tools"]} >= {"bash", "submit"}
            assert obs["metadata"]["episode_id"] == "ep-full"
            assert obs["metadata"]["task_source"] == "synthetic-mutation"  # said wherever a task is shown
            # hidden tests are absent from the workspace
            r = await call(ws, "step", tool("bash", command="ls; git log --oneline | wc -l"))
            out = r["data"]["observation"]["output"]
            assert "six.py" in out and "test_six.py" not in out
            assert "error_kind" not in r["data"]["metadata"]
            r = await call(ws, "step", tool("view", path="six.py", start_line=643, end_line=645))
            assert 'encode("utf-8")' in r["data"]["observation"]["output"]
            r = await call(ws, "step", tool("str_replace", path="six.py", old='return s.encode("utf-8")',
                                            new='return s.encode("latin-1")'))
            assert "Edited six.py" in r["data"]["observation"]["output"], r
            r = await call(ws, "state")
            assert r["data"]["episode_id"] == "ep-full" and r["data"]["step_count"] == 3
            r = await call(ws, "step", tool("submit"))
            d = r["data"]
            assert d["done"] is True and d["reward"] == 1.0, d
            assert d["metadata"]["tests_passed"] == len(demo_task.tests) and d["metadata"]["resolved"] is True
            r = await call(ws, "step", tool("bash", command="ls"))
            assert r["type"] == "error" and r["data"]["code"] == "EPISODE_DONE"
            r = await call(ws, "state", {"t": 3})
            rec = r["data"]
            assert rec["t"] == 3 and 'encode("latin-1")' in rec["diff"]
            assert rec["next_action"]["tool_name"] == "submit"
            assert [m["role"] for m in rec["messages"]] == ["system", "user"] + ["assistant", "tool"] * 3
        # the trace outlives the session: readable over HTTP
        import httpx
        async with httpx.AsyncClient(base_url=srv.url, timeout=120) as http:
            rec = (await http.get("/episodes/ep-full/state/4")).json()
            assert rec["observation"]["reward"] == 1.0 and rec["next_action"] is None
            lines = (await http.get("/episodes/ep-full/trace")).text.splitlines()
            assert len(lines) == 5 and json.loads(lines[0])["kind"] == "reset"
            assert (await http.get("/episodes/ep-full/state/9")).json()["error"]["code"] == "STEP_OUT_OF_RANGE"
    with make_server() as srv:
        run(main(srv))


def test_unresolved_submission_gets_zero(make_server, demo_task):
    async def main(srv):
        async with websockets.connect(srv.ws_url + "/ws") as ws:
            await call(ws, "reset", {"index": 0})
            r = await call(ws, "step", tool("submit"))
            assert r["data"]["done"] is True and r["data"]["reward"] == 0.0
            assert r["data"]["metadata"]["fail_to_pass"] == {demo_task.FAIL_TO_PASS[0]: "failed"}
    with make_server() as srv:
        run(main(srv))


def test_capacity_reached_then_closed(make_server):
    async def main(srv):
        async with websockets.connect(srv.ws_url + "/ws") as first:
            await call(first, "state")
            async with websockets.connect(srv.ws_url + "/ws") as second:
                r = json.loads(await second.recv())
                assert r["type"] == "error" and r["data"]["code"] == "CAPACITY_REACHED"
                assert r["data"]["max_sessions"] == 1
                with pytest.raises(websockets.ConnectionClosed) as info:
                    await second.recv()
                assert info.value.rcvd.code == 1000
    with make_server(max_sessions=1) as srv:
        run(main(srv))


def test_disconnect_mid_step_frees_the_sandbox(make_server):
    async def main(srv):
        ws = await websockets.connect(srv.ws_url + "/ws")
        await call(ws, "reset", {"episode_id": "ep-cut"})
        await ws.send(json.dumps({"type": "step", "data": tool("bash", command="sleep 60")}))
        await asyncio.sleep(0.5)
        episode = next(iter(srv.service.sessions.values())).episode
        await ws.close()
        deadline = time.monotonic() + 30  # generous: a loaded 2-core machine
        while srv.service.sessions and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not srv.service.sessions
        assert not episode.sandbox.alive
    with make_server() as srv:
        run(main(srv))


def test_pings_flow_during_a_long_command(make_server):
    async def main(srv):
        async with websockets.connect(srv.ws_url + "/ws", ping_interval=0.2, ping_timeout=0.5) as ws:
            await call(ws, "reset")
            started = time.monotonic()
            r = await call(ws, "step", tool("bash", command="sleep 3; echo done"))
            assert r["data"]["observation"]["output"].strip() == "done"
            assert time.monotonic() - started >= 3
            latency = await (await ws.ping())
            assert latency < 0.5
    with make_server() as srv:
        run(main(srv))


def test_unmodified_openenv_generic_client_runs_an_episode(make_server):
    from openenv.core.generic_client import GenericEnvClient

    async def main(srv):
        async with GenericEnvClient(base_url=srv.url) as env:
            result = await env.reset(episode_id="ep-generic")
            assert result.done is False and "six.b()" in result.observation["issue"]
            result = await env.step(tool("bash", command="echo hi"))
            assert result.observation["output"].strip() == "hi"
            state = await env.state()
            assert state["episode_id"] == "ep-generic" and state["step_count"] == 1
            result = await env.step({"type": "list_tools"})
            assert len(result.observation["tools"]) == 5
            result = await env.step(tool("submit"))
            assert result.done is True and result.reward == 0.0
    with make_server() as srv:
        run(main(srv))
