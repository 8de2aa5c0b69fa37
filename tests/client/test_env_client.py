"""The /mux client against a protocol double on loopback: ids, interleaving, timeouts,
reconnect with re-send, dead replicas, typed errors."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from support.mux_double import MuxServerDouble, free_port

from env_client import (ClientConfig, EnvAuthError, EnvCapacityError, EnvConnectionError, EnvSessionError,
                        EnvTimeoutError, MuxConnection, NoLiveReplicaError, RemoteSession, ReplicaPool, mux_url,
                        split_token)

FAST = ClientConfig(reconnect_attempts=2, reconnect_backoff_s=0.05, connect_timeout_s=2, request_timeout_s=10)


@pytest.fixture
def server():
    s = MuxServerDouble()
    yield s
    s.shutdown()


def run(coro):
    return asyncio.run(coro)


def test_mux_url():
    assert mux_url("http://h:1") == "ws://h:1/mux"
    assert mux_url("https://h/base/") == "wss://h/base/mux"
    assert mux_url("ws://h:1/mux") == "ws://h:1/mux"
    assert mux_url("h:2") == "ws://h:2/mux"
    assert mux_url("http://h:1/?token=s") == "ws://h:1/mux"


def test_split_token_moves_the_token_out_of_the_url():
    assert split_token("http://h:1/b?token=s3&x=1") == ("http://h:1/b?x=1", "s3")
    assert split_token("http://h:1") == ("http://h:1", None)
    assert split_token("http://h:1?token=") == ("http://h:1", None)
    conn = MuxConnection("http://h:1?token=from-url", ClientConfig(token="from-config"))
    assert conn.url == "ws://h:1/mux" and conn._headers == {"Authorization": "Bearer from-url"}
    assert "from-config" not in repr(ClientConfig(token="from-config"))


def test_unauthorized_frame_is_a_typed_auth_error():
    """An UNAUTHORIZED error frame (e.g. a proxy in front of the replica) raises EnvAuthError, not a retry."""
    from websockets.asyncio.server import serve

    async def refuse(ws):
        async for raw in ws:
            rid = json.loads(raw)["request_id"]
            await ws.send(f'{{"request_id": "{rid}", "type": "error", '
                          '"data": {"code": "UNAUTHORIZED", "message": "no token"}}')

    async def main():
        async with serve(refuse, "127.0.0.1", 0) as srv:
            url = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}"
            pool = ReplicaPool([url], FAST)
            with pytest.raises(EnvAuthError) as info:
                await pool.open_session(instance_id="t")
            assert info.value.url == mux_url(url)
            # the library's remedy, not a CLI flag (trainer-client rewords it: tests/trainer/test_auth.py)
            assert str(info.value).endswith(f"({EnvAuthError.HINT})") and "--env-token" not in str(info.value)
            assert "token=..." in str(info.value) and "ENV_SERVER_TOKEN" in str(info.value)
            await pool.close()

    run(main())


def test_sessions_interleave_on_one_connection(server):
    async def main():
        pool = ReplicaPool([server.url], FAST)
        opened = [await pool.open_session(instance_id=f"t{i}") for i in range(4)]
        assert [obs["issue"] for _, obs in opened] == [f"Fix the bug in t{i}." for i in range(4)]
        # a slow call on session 0 does not hold back the fast ones on sessions 1..3
        t0 = time.perf_counter()
        slow = asyncio.create_task(opened[0][0].call_tool("bash", {"command": "sleep 0.6"}))
        fast = await asyncio.gather(*(s.call_tool("bash", {"command": f"echo {i}"}) for i, (s, _) in enumerate(opened[1:])))
        fast_time = time.perf_counter() - t0
        assert [o["output"] for o in fast] == ["0", "1", "2"]
        assert fast_time < 0.5
        assert (await slow)["output"] == "slept"
        assert len(pool.connections) == 1 and pool.connections[0].reconnects == 0
        state = await opened[1][0].state()
        assert state["step_count"] == 1
        await pool.close()

    run(main())


def test_timeout_is_typed_and_late_reply_is_dropped(server):
    async def main():
        conn = MuxConnection(server.url, FAST)
        session = RemoteSession(conn)
        await session.reset(instance_id="t")
        with pytest.raises(EnvTimeoutError) as info:
            await session.call_tool("bash", {"command": "sleep 0.5"}, timeout_s=0.1)
        assert isinstance(info.value, TimeoutError)
        await asyncio.sleep(0.6)  # the late reply arrives and must not be taken for the next one
        obs = await session.call_tool("bash", {"command": "echo next"})
        assert obs["output"] == "next"
        await conn.close()

    run(main())


def test_reconnect_resends_in_flight_request_without_rerunning(server):
    async def main():
        conn = MuxConnection(server.url, FAST)
        session = RemoteSession(conn)
        await session.reset(instance_id="t")
        call = asyncio.create_task(session.call_tool("bash", {"command": "sleep 0.4"}))
        await asyncio.sleep(0.1)
        await asyncio.to_thread(server.drop_connections)
        obs = await call
        assert obs["output"] == "slept"
        assert conn.reconnects == 1
        runs = [rid for sid, rid in server.executed if sid == session.session_id]
        assert len(runs) == len(set(runs)) == 2  # reset + one bash, the re-sent id was not re-executed
        assert (await session.state())["step_count"] == 1
        await conn.close()

    run(main())


def test_typed_server_errors(server):
    async def main():
        conn = MuxConnection(server.url, FAST)
        with pytest.raises(EnvSessionError) as info:
            await RemoteSession(conn, "nope").call_tool("bash", {"command": "ls"})
        assert info.value.code == "SESSION_NOT_FOUND"
        await conn.close()

    run(main())
    small = MuxServerDouble(max_sessions=1)
    try:
        async def full():
            # capacity_wait_s=0: fail at once (waiting is tests/trainer/test_capacity_and_gpu_path.py's)
            pool = ReplicaPool([small.url], FAST.model_copy(update={"capacity_wait_s": 0}))
            await pool.open_session(instance_id="a")
            with pytest.raises(EnvCapacityError):
                await pool.open_session(instance_id="b")
            await pool.close()

        run(full())
    finally:
        small.shutdown()


def test_dead_replica_leaves_rotation(server):
    other = MuxServerDouble()
    try:
        async def main():
            pool = ReplicaPool([server.url, other.url, f"http://127.0.0.1:{free_port()}"], FAST)
            sessions = [(await pool.open_session(instance_id=f"t{i}"))[0] for i in range(4)]
            urls = {s.connection.url for s in sessions}
            assert len(urls) == 2  # spread over the two live replicas; the unreachable one is dead
            assert len(pool.live) == 2
            await asyncio.to_thread(other.stop)
            victims = [s for s in sessions if s.connection.url == mux_url(other.url)]
            survivors = [s for s in sessions if s not in victims]
            with pytest.raises(EnvConnectionError):
                await victims[0].call_tool("bash", {"command": "echo x"})
            assert [c.url for c in pool.live] == [mux_url(server.url)]
            for s in survivors:  # sessions on the live replica keep working
                assert (await s.call_tool("bash", {"command": "echo ok"}))["output"] == "ok"
            new, _ = await pool.open_session(instance_id="later")
            assert new.connection.url == mux_url(server.url)
            await asyncio.to_thread(server.stop)
            with pytest.raises(EnvConnectionError):
                await survivors[0].call_tool("bash", {"command": "echo x"})
            with pytest.raises(NoLiveReplicaError):
                await pool.open_session(instance_id="none")
            await pool.close()

        run(main())
    finally:
        other.shutdown()


def test_backpressure_bounds_in_flight(server):
    async def main():
        conn = MuxConnection(server.url, ClientConfig(max_in_flight=2, request_timeout_s=10))
        sessions = [RemoteSession(conn) for _ in range(6)]
        await asyncio.gather(*(s.reset(instance_id="t") for s in sessions))
        peak = 0

        async def watch():
            nonlocal peak
            while True:
                peak = max(peak, conn.in_flight)
                await asyncio.sleep(0.01)

        watcher = asyncio.create_task(watch())
        t0 = time.perf_counter()
        await asyncio.gather(*(s.call_tool("bash", {"command": "sleep 0.2"}) for s in sessions))
        elapsed = time.perf_counter() - t0
        watcher.cancel()
        assert peak == 2
        assert elapsed >= 0.55  # 6 calls, 2 at a time, 0.2 s each
        await conn.close()

    run(main())


def test_many_sessions_timeouts_and_handover(server):
    """Replies always reach their own request: readers hand over (a request reading for itself, then the
    reader task) while requests time out, finish and queue behind `max_in_flight` at random."""
    import random

    async def main():
        conn = MuxConnection(server.url, FAST.model_copy(update={"max_in_flight": 8}))
        sessions = [RemoteSession(conn) for _ in range(24)]
        await asyncio.gather(*(s.reset(instance_id=f"t{i}") for i, s in enumerate(sessions)))
        rng = random.Random(17)
        outcomes = {"ok": 0, "timeout": 0}

        async def drive(i: int, session: RemoteSession) -> None:
            for k in range(8):
                if rng.random() < 0.2:  # a slow step that times out: its late reply must be dropped
                    with pytest.raises(EnvTimeoutError):
                        await session.call_tool("bash", {"command": "sleep 0.15"}, timeout_s=0.05)
                    outcomes["timeout"] += 1
                else:
                    out = await session.call_tool("bash", {"command": f"echo s{i}-{k}"})
                    assert out["output"] == f"s{i}-{k}"
                    outcomes["ok"] += 1
                await asyncio.sleep(rng.random() * 0.02)

        await asyncio.gather(*(drive(i, s) for i, s in enumerate(sessions)))
        assert outcomes["timeout"] > 0 and outcomes["ok"] > 100
        assert conn.in_flight == 0 and conn.reconnects == 0
        await asyncio.sleep(0.2)  # late replies arrive with nobody waiting
        for i, s in enumerate(sessions[:3]):  # and are dropped by the next reader
            assert (await s.call_tool("bash", {"command": f"echo again{i}"}))["output"] == f"again{i}"
        await conn.close()

    run(main())
