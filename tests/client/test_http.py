"""The HTTP side against the real server: routes, typed errors from error bodies, auth, the
blocking variants finding an episode's replica, and the replay reader built on it."""

from __future__ import annotations

import asyncio
import logging

import pytest
from support.servers import free_port

from contract import StateRecord
from env_client import (AsyncHttpClient, ClientConfig, EnvAuthError, EnvClient, EnvConnectionError, EnvNotFoundError,
                        EnvServerError, ReplicaPool)
from trainer_client.replay import traces

from .conftest import FIX, INSTANCE, TOKEN


async def episode(url: str, token: str | None = None, steps: int = 2) -> str:
    """A short episode over /mux (closed, so only the HTTP side can read it afterwards)."""
    pool = ReplicaPool([url], ClientConfig(token=token))
    try:
        session, obs = await pool.open_session(instance_id=INSTANCE)
        for k in range(steps):
            await session.call_tool("bash", {"command": f"echo {k}"} if k % 2 == 0 else {"command": "false"})
        await pool.release(session)
        return obs["metadata"]["episode_id"]
    finally:
        await pool.close()


async def test_routes(server):
    eid = await episode(server.url)
    async with AsyncHttpClient(server.ws_url + "/mux") as http:  # any address of the replica will do
        assert http.url == server.url
        assert await http.health() == {"status": "healthy"}
        meta = await http.metadata()
        assert meta["name"] == "swe-openenv" and meta["max_sessions"] == 64
        assert set(await http.schema()) >= {"action", "observation", "state", "state_record"}
        assert eid in await http.episodes()
        record = await http.state(eid, 2)
        assert isinstance(record, StateRecord) and record.t == 2 and record.observation.metadata["step"] == 2
        kinds = [r["kind"] async for r in http.trace(eid)]
        assert kinds == ["reset", "step", "step"]
        trace = await http.trace_records(eid)
        assert trace[2]["observation"]["metadata"]["error_kind"] == "nonzero_exit"


async def test_error_bodies_are_typed(server):
    eid = await episode(server.url, steps=1)
    async with AsyncHttpClient(server.url) as http:
        with pytest.raises(EnvNotFoundError) as missing:
            await http.state("no-such-episode", 0)
        assert (missing.value.code, missing.value.status) == ("EPISODE_NOT_FOUND", 404)
        with pytest.raises(EnvNotFoundError) as past:
            await http.state(eid, 5)
        assert past.value.code == "STEP_OUT_OF_RANGE"
        with pytest.raises(EnvNotFoundError):
            await http.trace_records("no-such-episode")
        with pytest.raises(EnvServerError) as other:
            await http.state("bad id!", 0)
        assert other.value.status == 404
    async with AsyncHttpClient(f"http://127.0.0.1:{free_port()}", config=ClientConfig(connect_timeout_s=2)) as http:
        with pytest.raises(EnvConnectionError):
            await http.health()


async def test_auth_header_only(auth_server, caplog):
    caplog.set_level(logging.DEBUG)
    url = auth_server.url
    eid = await episode(url, token=TOKEN, steps=1)
    async with AsyncHttpClient(url) as http:
        assert (await http.health())["status"] == "healthy"  # /health needs no token
        for call in (http.metadata(), http.state(eid, 0), http.trace_records(eid)):
            with pytest.raises(EnvAuthError) as info:
                await call
            assert info.value.url == url and isinstance(info.value, PermissionError)
    async with AsyncHttpClient(url, token="wrong-51c0") as http:
        with pytest.raises(EnvAuthError) as info:
            await http.episodes()
        assert "wrong-51c0" not in f"{info.value} {info.value!r}"
    for http in (AsyncHttpClient(f"{url}?token={TOKEN}"), AsyncHttpClient(url, token=TOKEN),
                 AsyncHttpClient(url, config=ClientConfig(token=TOKEN))):
        async with http:
            assert http.url == url  # the token left the URL
            assert eid in await http.episodes()
            assert (await http.state(eid, 1)).t == 1
    assert TOKEN not in caplog.text and "wrong-51c0" not in caplog.text


def test_blocking_variants_find_the_episode_replica(server, make_server):
    with make_server() as other:
        far = asyncio.run(episode(other.url, steps=1))  # recorded on the second replica only
        with EnvClient([server.url, other.url]) as client:
            assert client.health(1) == {"status": "healthy"}
            assert client.metadata(other.url)["tasks"] == 1
            assert far in client.episodes(1) and far not in client.episodes(0)
            assert client.episode_state(far, 1).episode_id == far  # found on replica 1
            assert [r["kind"] for r in client.trace(far)] == ["reset", "step"]
            with client.open(instance_id=INSTANCE) as session:
                session.call_tool(*FIX)
                near = session.episode_id
            assert client.export_episode(near).turns[0].tool_names == ["str_replace"]
            with pytest.raises(EnvNotFoundError):
                client.episode_state("no-such-episode", 0)


async def test_replay_traces_read_through_the_client(auth_server):
    """trainer_client.replay.traces keeps its functions; the HTTP work is env_client's."""
    url = auth_server.url
    eid = await episode(url, token=TOKEN, steps=2)
    async with traces.env_client(TOKEN) as client:
        states = await traces.fetch_trace(client, url, eid)
        assert [s.t for s in states] == [0, 1] and states[0].episode_id == eid
        assert (await traces.fetch_state(client, url, eid, 2)).t == 2
        with pytest.raises(traces.TraceReadError, match="EPISODE_NOT_FOUND"):
            await traces.fetch_trace(client, url, "no-such-episode")
    async with traces.env_client("wrong-77a1") as client:
        with pytest.raises(EnvAuthError, match=f"env replica {url} refused the connection"):
            await traces.fetch_trace(client, url, eid)


async def test_per_client_tokens_through_the_client(make_server):
    """A server with per-client tokens: the client moves a URL's `?token=` into the header (the
    server refuses it in an HTTP URL), and sees only its own episodes; another client's is an
    `EnvNotFoundError` like a missing one; the operator's client reads all of them."""
    alice, bob, ops = "alice-tok-0b7c2e55", "bob-tok-94d1a3f0", "ops-tok-6e28c7b1"
    with make_server(client_tokens={"alice": alice, "bob": bob}, operator_tokens={"ops": ops}) as srv:
        mine = await episode(f"{srv.url}?token={alice}", steps=1)  # /mux, the token from the URL
        theirs = await episode(srv.ws_url + "/mux", token=bob, steps=1)
        async with AsyncHttpClient(f"{srv.url}?token={alice}") as a, AsyncHttpClient(srv.url, token=ops) as op:
            assert a.url == srv.url and await a.episodes() == [mine]
            assert (await a.state(mine, 1)).t == 1
            for read in (lambda e: a.state(e, 0), a.trace_records):
                with pytest.raises(EnvNotFoundError) as hidden:
                    await read(theirs)
                with pytest.raises(EnvNotFoundError) as missing:
                    await read("no-such-episode")
                assert (hidden.value.code, hidden.value.status) == (missing.value.code, missing.value.status)
                assert hidden.value.code == "EPISODE_NOT_FOUND"
            assert set(await op.episodes()) == {mine, theirs}
            assert (await op.state(theirs, 1)).episode_id == theirs
