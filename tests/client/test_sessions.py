"""Sessions against the real env server on loopback: /mux and /ws, async and blocking, typed
errors, capacity, timeouts, dead replicas, auth."""

from __future__ import annotations

import asyncio
import time

import pytest
from support.servers import free_port

from env_client import (ClientConfig, EnvAuthError, EnvCapacityError, EnvClient, EnvConnectionError, EnvNotFoundError,
                        EnvRequestError, EnvSessionError, EnvTimeoutError, RemoteSession, ReplicaPool, WsSession,
                        mux_url, ws_url)

from .conftest import FIX, INSTANCE, TOKEN

FAST = ClientConfig(reconnect_attempts=1, reconnect_backoff_s=0.05, connect_timeout_s=3, capacity_wait_s=0)


def test_blocking_mux_episode_to_reward(server):
    with EnvClient(server.url, FAST) as client:
        session = client.open(instance_id=INSTANCE)
        assert session.observation["issue"].startswith("six.b()") and session.episode_id
        assert "CHANGES" in session.call_tool("bash", {"command": "ls"})["output"]
        failed = session.call_tool("bash", {"command": "cat nope.txt"})
        assert failed["metadata"]["error_kind"] == "nonzero_exit"  # an agent mistake is data, not an exception
        assert failed["metadata"]["hint_template_key"] == "shell.nonzero_exit"
        session.call_tool(*FIX)
        final = session.call_tool("submit")
        assert (final["reward"], final["done"], final["metadata"]["resolved"]) == (1.0, True, True)
        assert session.state() == {"episode_id": session.episode_id, "step_count": 4, "instance_id": INSTANCE,
                                   "done": True, "reward": 1.0}
        record = session.state(t=2)
        assert record["t"] == 2 and [m["role"] for m in record["messages"]][-1] == "tool"
        assert record["next_action"] == {"tool_name": FIX[0], "arguments": FIX[1]}
        with pytest.raises(EnvSessionError) as info:  # the episode is over: a typed server error
            session.call_tool("bash", {"command": "ls"})
        assert info.value.code == "EPISODE_DONE"
        session.close()


async def test_async_mux_sessions_share_one_socket(server):
    pool = ReplicaPool([server.url], FAST)
    try:
        (a, obs_a), (b, obs_b) = await asyncio.gather(pool.open_session(instance_id=INSTANCE),
                                                      pool.open_session(instance_id=INSTANCE))
        assert isinstance(a, RemoteSession) and a.connection is b.connection
        assert obs_a["metadata"]["episode_id"] != obs_b["metadata"]["episode_id"]
        outs = await asyncio.gather(a.call_tool("bash", {"command": "echo A"}),
                                    b.call_tool("bash", {"command": "echo B"}))
        assert [o["output"].strip() for o in outs] == ["A", "B"]
        assert (await a.state())["step_count"] == 1
        await asyncio.gather(pool.release(a), pool.release(b))
        with pytest.raises(EnvSessionError) as info:
            await a._request("state", {})  # the id is closed on the server
        assert info.value.code == "SESSION_CLOSED"
    finally:
        await pool.close()


async def test_async_ws_session(server):
    async with WsSession(server.url, FAST) as session:
        assert session.connection.url == ws_url(server.url)
        obs = await session.reset(instance_id=INSTANCE)
        assert obs["metadata"]["instance_id"] == INSTANCE and obs["tools"]
        out = await session.call_tool("view", {"path": "six.py", "start_line": 1, "end_line": 3})
        assert out["tool_name"] == "view" and "result" not in out  # flattened like /mux's
        tools = await session.mcp({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert {t["name"] for t in tools["result"]["tools"]} >= {"bash", "submit"}
        record = await session.state(t=1)
        assert record["episode_id"] == session.episode_id and record["t"] == 1
    assert session.closed
    with pytest.raises(EnvSessionError):
        await session.state()


def test_ws_from_the_blocking_facade(server):
    with EnvClient(server.url, FAST, transport="ws") as client:
        assert client.pool.connections[0].url == ws_url(server.url)
        with client.open(instance_id=INSTANCE) as session:
            session.call_tool(*FIX)
            assert session.call_tool("submit")["reward"] == 1.0
            assert session.export().reward == 1.0
        assert client.pool._sessions[client.pool.connections[0]] == 0  # released


async def test_typed_errors_on_both_sockets(server):
    pool = ReplicaPool([server.url], FAST)
    try:
        mux_session, _ = await pool.open_session(instance_id=INSTANCE)
        ws_session = WsSession(server.url, FAST)
        await ws_session.reset(instance_id=INSTANCE)
        for session in (mux_session, ws_session):
            with pytest.raises(EnvRequestError) as bad:
                await session.step({"type": "bogus"})
            assert bad.value.code == "INVALID_ACTION" and isinstance(bad.value, ValueError)
            with pytest.raises(EnvNotFoundError) as past:
                await session.state(t=99)
            assert past.value.code == "STEP_OUT_OF_RANGE" and isinstance(past.value, LookupError)
            unknown = await session.call_tool("frobnicate", {})  # the policy's mistake: an observation
            assert unknown["metadata"]["error_kind"] == "unknown_tool"
            assert (await session.state())["step_count"] == 1  # the session survived the errors
        with pytest.raises(EnvNotFoundError) as task:
            await pool.open_session(instance_id="no-such-task")
        assert task.value.code == "TASK_NOT_FOUND"
        await ws_session.close()
    finally:
        await pool.close()


async def test_capacity_is_typed_on_both_transports(make_server):
    with make_server(max_sessions=1) as srv:
        for transport in ("mux", "ws"):
            pool = ReplicaPool([srv.url], FAST, transport=transport)
            try:
                assert await pool.capacity() == {pool.connections[0].url: 1}
                first, _ = await pool.open_session(instance_id=INSTANCE)
                with pytest.raises(EnvCapacityError) as info:
                    await pool.open_session(instance_id=INSTANCE)
                assert info.value.code == "CAPACITY_REACHED"
                await pool.release(first)
                again, _ = await pool.open_session(instance_id=INSTANCE)  # the slot is free again
                await pool.release(again)
            finally:
                await pool.close()


async def test_timeouts(server):
    """/mux: a late reply is dropped and the session goes on; /ws: the session is closed (no ids)."""
    pool = ReplicaPool([server.url], FAST)
    try:
        session, _ = await pool.open_session(instance_id=INSTANCE)
        with pytest.raises(EnvTimeoutError):
            await session.call_tool("bash", {"command": "sleep 1"}, timeout_s=0.2)
        assert (await session.call_tool("bash", {"command": "echo next"}))["output"].strip() == "next"
    finally:
        await pool.close()
    ws = WsSession(server.url, FAST)
    await ws.reset(instance_id=INSTANCE)
    with pytest.raises(EnvTimeoutError) as info:
        await ws.call_tool("bash", {"command": "sleep 1"}, timeout_s=0.2)
    assert isinstance(info.value, TimeoutError)
    with pytest.raises(EnvSessionError, match="timed out"):
        await ws.call_tool("bash", {"command": "echo next"})
    await ws.close()


async def test_dead_replica_leaves_rotation_on_ws(server):
    pool = ReplicaPool([f"http://127.0.0.1:{free_port()}", server.url], FAST, transport="ws")
    try:
        sessions = [(await pool.open_session(instance_id=INSTANCE))[0] for _ in range(2)]
        assert {s.connection.url for s in sessions} == {ws_url(server.url)}
        assert [c.url for c in pool.live] == [ws_url(server.url)]
        for s in sessions:
            await pool.release(s)
    finally:
        await pool.close()
    with pytest.raises(EnvConnectionError):
        await WsSession(f"http://127.0.0.1:{free_port()}", FAST).reset()


async def test_auth_on_both_sockets(auth_server):
    url = auth_server.url
    for transport in ("mux", "ws"):
        for urls, config in (([url], FAST.model_copy(update={"token": TOKEN})), ([f"{url}?token={TOKEN}"], FAST)):
            pool = ReplicaPool(urls, config, transport=transport)
            try:
                await pool.connect()
                session, obs = await pool.open_session(instance_id=INSTANCE)
                assert obs["metadata"]["instance_id"] == INSTANCE
                await pool.release(session)
            finally:
                await pool.close()
        for config in (FAST, FAST.model_copy(update={"token": "wrong-2b9d"})):
            pool = ReplicaPool([url], config, transport=transport)
            t0 = time.monotonic()
            try:
                with pytest.raises(EnvAuthError) as info:
                    await pool.open_session(instance_id=INSTANCE)
            finally:
                await pool.close()
            assert time.monotonic() - t0 < 3  # no reconnect back-off for a refused token
            text = f"{info.value} {info.value!r}"
            expected = mux_url(url) if transport == "mux" else ws_url(url)
            assert info.value.url == expected and TOKEN not in text and "wrong-2b9d" not in text
            assert isinstance(info.value, PermissionError)
