"""/mux: interleaving across sessions, order within one, retries from cache, errors per frame."""

from __future__ import annotations

import asyncio
import json
import time

import websockets
from env_support import requires_sandbox, run, tool

pytestmark = requires_sandbox


class Mux:
    def __init__(self, ws):
        self.ws = ws
        self.frames: list[dict] = []

    async def send(self, request_id, session_id, type_, data=None):
        await self.ws.send(json.dumps({"request_id": request_id, "session_id": session_id, "type": type_,
                                       "data": data or {}}))

    async def recv(self) -> dict:
        frame = json.loads(await asyncio.wait_for(self.ws.recv(), 30))
        self.frames.append(frame)
        return frame

    async def call(self, request_id, session_id, type_, data=None) -> dict:
        await self.send(request_id, session_id, type_, data)
        return await self.recv()


def test_sessions_interleave_and_keep_order(make_server):
    async def main(srv):
        async with websockets.connect(srv.ws_url + "/mux") as ws:
            mux = Mux(ws)
            assert (await mux.call("r1", "slow", "reset"))["type"] == "observation"
            assert (await mux.call("r2", "fast", "reset"))["type"] == "observation"
            started = time.monotonic()
            await mux.send("s1", "slow", "step", tool("bash", command="sleep 2; echo slow"))
            await mux.send("s2", "slow", "step", tool("bash", command="echo after-slow"))
            await mux.send("f1", "fast", "step", tool("bash", command="echo fast"))
            first = await mux.recv()
            assert first["request_id"] == "f1" and first["session_id"] == "fast"
            assert time.monotonic() - started < 1.5  # not held up by the slow session
            second, third = await mux.recv(), await mux.recv()
            assert [second["request_id"], third["request_id"]] == ["s1", "s2"]
            assert third["data"]["observation"]["output"].strip() == "after-slow"
            st = await mux.call("st", "slow", "state")
            assert st["type"] == "state" and st["data"]["step_count"] == 2
            pong = await mux.call("p", "any", "ping")
            assert pong["type"] == "pong" and pong["request_id"] == "p"
    with make_server() as srv:
        run(main(srv))


def test_retried_request_id_is_answered_from_cache(make_server):
    async def main(srv):
        async with websockets.connect(srv.ws_url + "/mux") as ws:
            mux = Mux(ws)
            await mux.call("r", "s", "reset")
            a = await mux.call("x", "s", "step", tool("bash", command="echo $RANDOM$RANDOM"))
            b = await mux.call("x", "s", "step", tool("bash", command="echo $RANDOM$RANDOM"))
            assert a == b
            st = await mux.call("st", "s", "state")
            assert st["data"]["step_count"] == 1  # executed once
    with make_server() as srv:
        run(main(srv))


def test_mux_errors_and_closed_sessions(make_server):
    async def main(srv):
        async with websockets.connect(srv.ws_url + "/mux") as ws:
            mux = Mux(ws)
            await ws.send("{nope")
            assert (await mux.recv())["data"]["code"] == "INVALID_JSON"
            r = await mux.call("1", "s", "dance")
            assert r["type"] == "error" and r["data"]["code"] == "UNKNOWN_TYPE" and r["request_id"] == "1"
            await ws.send(json.dumps({"session_id": "s", "type": "step"}))
            assert (await mux.recv())["data"]["code"] == "VALIDATION_ERROR"
            assert (await mux.call("2", "ghost", "step", tool("bash", command="ls")))["data"]["code"] == \
                "SESSION_NOT_FOUND"
            await mux.call("3", "s", "reset")
            assert (await mux.call("4", "s", "close"))["type"] == "closed"
            r = await mux.call("5", "s", "step", tool("bash", command="ls"))
            assert r["data"]["code"] == "SESSION_CLOSED"
            assert not srv.service.sessions
            r = await mux.call("6", "t", "reset", {"instance_id": "nope"})
            assert r["data"]["code"] == "TASK_NOT_FOUND"
            assert (await mux.call("7", "t", "reset"))["type"] == "observation"  # the id stays usable
    with make_server() as srv:
        run(main(srv))


def test_mux_capacity_and_disconnect_closes_all_sessions(make_server):
    async def main(srv):
        ws = await websockets.connect(srv.ws_url + "/mux")
        mux = Mux(ws)
        assert (await mux.call("1", "a", "reset"))["type"] == "observation"
        assert (await mux.call("2", "b", "reset"))["type"] == "observation"
        r = await mux.call("3", "c", "reset")
        assert r["data"]["code"] == "CAPACITY_REACHED" and r["data"]["active_sessions"] == 2
        await mux.send("4", "a", "step", tool("bash", command="sleep 60"))
        await asyncio.sleep(0.3)
        await ws.close()
        deadline = time.monotonic() + 10
        while srv.service.sessions and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not srv.service.sessions
    with make_server(max_sessions=2) as srv:
        run(main(srv))


def test_compression_offers_are_declined_on_both_sockets(make_server):
    """Clients offering permessage-deflate (the websockets default) get plain frames (docs/protocol.md)."""
    from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory

    async def main(srv):
        for path in ("/ws", "/mux"):
            async with websockets.connect(srv.ws_url + path,
                                          extensions=[ClientPerMessageDeflateFactory()]) as ws:
                assert ws.request.headers.get("Sec-WebSocket-Extensions"), "probe broken: no offer sent"
                assert ws.response.headers.get("Sec-WebSocket-Extensions") is None, path
                assert ws.protocol.extensions == [], path
    with make_server() as srv:
        run(main(srv))


def test_closed_sessions_leave_only_a_bounded_trace_on_the_connection(make_server, monkeypatch):
    """A trainer opens a new session id per episode on one long-lived connection: closing a session
    drops its cached replies; a retried close is still answered from cache for the last
    `mux_closed_replies` sessions, older ones get SESSION_CLOSED (their state is gone)."""
    from env_server import mux as mux_module

    conns = []
    real_init = mux_module.MuxConnection.__init__

    def spy(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        conns.append(self)

    async def main(srv):
        async with websockets.connect(srv.ws_url + "/mux") as ws:
            mux = Mux(ws)
            for i in range(5):
                assert (await mux.call(f"r{i}", f"s{i}", "reset"))["type"] == "observation"
                for k in range(3):
                    await mux.call(f"x{i}-{k}", f"s{i}", "step", tool("bash", command="echo hi"))
                closed = await mux.call(f"c{i}", f"s{i}", "close")
                assert closed["type"] == "closed"
            (conn,) = conns
            assert not conn.sessions and not conn.tails
            assert sorted(conn.replies) == ["s3", "s4"]  # the horizon: 2 close replies, nothing else
            assert all(list(c) == [f"c{s[1]}"] for s, c in conn.replies.items())
            again = await mux.call("c4", "s4", "close")  # a retried close: the same reply, not re-run
            assert again == {**closed, "request_id": "c4"} and again["type"] == "closed"
            old = await mux.call("c0", "s0", "close")
            assert old["type"] == "error" and old["data"]["code"] == "SESSION_CLOSED"
            for i in range(3):  # requests on closed ids are answered and leave nothing behind
                r = await mux.call(f"late{i}", "s1", "step", tool("bash", command="ls"))
                assert r["data"]["code"] == "SESSION_CLOSED"
            assert sorted(conn.replies) == ["s3", "s4"] and not conn.inflight

    monkeypatch.setattr(mux_module.MuxConnection, "__init__", spy)
    with make_server(mux_closed_replies=2) as srv:
        run(main(srv))
