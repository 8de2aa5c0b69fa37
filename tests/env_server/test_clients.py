"""Clients are separated: per-client tokens on one real server (bwrap sandboxes, the demo task) on
loopback. Clients alice and bob list, read, fork and drive only their own episodes and sessions
(another's is answered exactly like a missing one); the operator sees all of them; `?token=` is
refused on HTTP routes and accepted on WebSocket upgrades; no token reaches the server's log;
the single `auth_token` works as before (an operator)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import httpx
import pytest
import websockets
from env_support import call, requires_sandbox, run, tool

from env_client.local_server import local_env_server

pytestmark = requires_sandbox

ALICE, BOB, OPS = "tok-alice-3f9a61c2e07b", "tok-bob-8d04e5a17c93", "tok-ops-52b6f0e9a4d1"
IDENTITIES = {"client_tokens": {"alice": ALICE, "bob": BOB}, "operator_tokens": {"ops": OPS}}
MISSING = "ep-missing"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def same_answer(hidden: Any, hidden_id: str, missing: Any, missing_id: str = MISSING) -> bool:
    """Two answers equal once each names its own id the same way (not-found reveals nothing else)."""
    return json.dumps(hidden).replace(hidden_id, "<id>") == json.dumps(missing).replace(missing_id, "<id>")


@asynccontextmanager
async def ws_as(srv: Any, token: str, path: str = "/ws", via_query: bool = False) -> AsyncIterator[Any]:
    """A WebSocket of one client: the token in the header, or as `?token=` (path may carry a query)."""
    if via_query:
        sep = "&" if "?" in path else "?"
        async with websockets.connect(f"{srv.ws_url}{path}{sep}token={token}") as ws:
            yield ws
    else:
        async with websockets.connect(srv.ws_url + path, additional_headers=bearer(token)) as ws:
            yield ws


async def record(srv: Any, token: str, episode_id: str, instance_id: str, via_query: bool = False) -> None:
    """An episode of one step (`echo`) over /ws, owned by the token's client."""
    async with ws_as(srv, token, via_query=via_query) as ws:
        r = await call(ws, "reset", {"instance_id": instance_id, "episode_id": episode_id})
        assert r["type"] == "observation", r
        r = await call(ws, "step", tool("bash", command=f"echo {episode_id}"))
        assert r["data"]["observation"]["output"].strip() == episode_id


async def mux(ws: Any, request_id: str, session_id: str, type_: str, data: dict | None = None) -> dict:
    await ws.send(json.dumps({"request_id": request_id, "session_id": session_id, "type": type_, "data": data or {}}))
    return json.loads(await asyncio.wait_for(ws.recv(), 60))


def listed(http: httpx.Client, token: str) -> set[str]:
    r = http.get("/episodes", headers=bearer(token))
    assert r.status_code == 200, r.text
    return set(r.json()["episodes"])


def rpc(http: httpx.Client, token: str, method: str, params: dict) -> dict:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    return http.post("/mcp", json=body, headers=bearer(token)).json()


# ------------------------------------------------------------------ list and read
def test_each_client_lists_and_reads_only_its_own_episodes(make_server, demo_task):
    with make_server(**IDENTITIES) as srv:
        run(record(srv, ALICE, "ep-a", demo_task.instance_id))
        run(record(srv, BOB, "ep-b", demo_task.instance_id, via_query=True))  # ?token= names bob on a WS upgrade
        with httpx.Client(base_url=srv.url, timeout=120) as http:
            assert listed(http, ALICE) == {"ep-a"}
            assert listed(http, BOB) == {"ep-b"}
            assert listed(http, OPS) == {"ep-a", "ep-b"}
            for reader, other in ((ALICE, "ep-b"), (BOB, "ep-a")):
                for path in ("/episodes/{}/state/0", "/episodes/{}/state/1", "/episodes/{}/state/99",
                             "/episodes/{}/trace"):
                    hidden = http.get(path.format(other), headers=bearer(reader))
                    missing = http.get(path.format(MISSING), headers=bearer(reader))
                    assert hidden.status_code == missing.status_code == 404, (path, hidden.text)
                    assert hidden.json()["error"]["code"] == "EPISODE_NOT_FOUND"
                    assert same_answer(hidden.json(), other, missing.json()), (hidden.text, missing.text)
            assert http.get("/episodes/ep-a/state/1", headers=bearer(ALICE)).json()["t"] == 1
            for episode, owner in (("ep-a", "alice"), ("ep-b", "bob")):  # the operator reads everything
                assert http.get(f"/episodes/{episode}/state/1", headers=bearer(OPS)).json()["episode_id"] == episode
                head = json.loads(http.get(f"/episodes/{episode}/trace", headers=bearer(OPS)).text.splitlines()[0])
                assert head["kind"] == "reset" and head["owner"] == owner
    with make_server(**IDENTITIES) as again, httpx.Client(base_url=again.url, timeout=120) as http:  # a restart: from disk
        assert listed(http, ALICE) == {"ep-a"} and listed(http, BOB) == {"ep-b"}
        assert listed(http, OPS) == {"ep-a", "ep-b"}
        assert http.get("/episodes/ep-b/trace", headers=bearer(ALICE)).status_code == 404


# ------------------------------------------------------------------ fork
def test_forks_need_the_original_and_belong_to_the_forker(make_server, demo_task):
    async def main(srv: Any) -> None:
        await record(srv, BOB, "ep-b", demo_task.instance_id)
        await record(srv, ALICE, "ep-a", demo_task.instance_id)
        async with ws_as(srv, ALICE, "/mux") as ws:
            for t in (1, 99):  # 99: past bob's steps, still not found (not STEP_OUT_OF_RANGE)
                hidden = await mux(ws, f"h{t}", f"fh{t}", "reset", {"fork_of": "ep-b", "t": t})
                missing = await mux(ws, f"m{t}", f"fm{t}", "reset", {"fork_of": MISSING, "t": t})
                assert hidden["type"] == "error" and hidden["data"]["code"] == "EPISODE_NOT_FOUND", hidden
                assert same_answer(hidden["data"], "ep-b", missing["data"])
            own = await mux(ws, "own", "f-own", "reset", {"fork_of": "ep-a", "t": 1, "episode_id": "fork-a"})
            assert own["type"] == "observation" and own["data"]["observation"]["metadata"]["fork_of"] == "ep-a"
        async with ws_as(srv, ALICE) as ws:  # the same on /ws
            hidden = await call(ws, "reset", {"fork_of": "ep-b", "t": 1})
            missing = await call(ws, "reset", {"fork_of": MISSING, "t": 1})
            assert hidden["data"]["code"] == "EPISODE_NOT_FOUND" and same_answer(hidden, "ep-b", missing)
        async with ws_as(srv, OPS) as ws:  # the operator forks anyone's episode; the fork is the operator's
            r = await call(ws, "reset", {"fork_of": "ep-b", "t": 1, "episode_id": "fork-ops"})
            assert r["type"] == "observation" and r["data"]["observation"]["metadata"]["fork_of"] == "ep-b", r

    with make_server(**IDENTITIES) as srv:
        run(main(srv))
        with httpx.Client(base_url=srv.url, timeout=120) as http:
            hidden = rpc(http, ALICE, "openenv/session/create", {"fork_of": "ep-b", "t": 1})  # and over MCP
            missing = rpc(http, ALICE, "openenv/session/create", {"fork_of": MISSING, "t": 1})
            assert hidden["error"]["data"]["code"] == "EPISODE_NOT_FOUND" and same_answer(hidden, "ep-b", missing)
            assert listed(http, ALICE) == {"ep-a", "fork-a"}
            assert listed(http, BOB) == {"ep-b"}
            assert listed(http, OPS) == {"ep-a", "ep-b", "fork-a", "fork-ops"}
        assert not srv.service.sessions  # the failed MCP forks left no session behind


# ------------------------------------------------------------------ drive
def test_a_client_cannot_drive_another_clients_session(make_server, demo_task):
    async def sockets(srv: Any, sid: str) -> None:
        for via_query in (False, True):  # OpenEnv's /ws?session_id=: attaching bob's session
            async with ws_as(srv, ALICE, f"/ws?session_id={sid}", via_query) as ws:
                hidden = json.loads(await ws.recv())
            async with ws_as(srv, ALICE, f"/ws?session_id={MISSING}", via_query) as ws:
                missing = json.loads(await ws.recv())
            assert hidden["data"]["code"] == "SESSION_NOT_FOUND" and same_answer(hidden, sid, missing)
        async with ws_as(srv, ALICE) as ws:  # MCP over alice's own /ws: bob's session stays out of reach
            hidden = await call(ws, "mcp", {"jsonrpc": "2.0", "id": 2, "method": "openenv/session/close",
                                            "params": {"session_id": sid}})
            assert hidden["data"]["error"]["data"]["code"] == "SESSION_NOT_FOUND"
        async with ws_as(srv, BOB, "/mux") as bob, ws_as(srv, ALICE, "/mux") as alice:
            assert (await mux(bob, "r", "w1", "reset", {"instance_id": demo_task.instance_id}))["type"] == "observation"
            r = await mux(alice, "s", "w1", "step", tool("bash", command="touch /workspace/from-alice"))
            assert r["type"] == "error" and r["data"]["code"] == "SESSION_NOT_FOUND"
            r = await mux(bob, "s", "w1", "step", tool("bash", command="ls /workspace/from-alice"))
            assert r["data"]["observation"]["metadata"]["error_kind"] == "nonzero_exit"

    with make_server(**IDENTITIES) as srv, httpx.Client(base_url=srv.url, timeout=120) as http:
        created = rpc(http, BOB, "openenv/session/create", {"instance_id": demo_task.instance_id})
        sid = created["result"]["session_id"]
        for method, params in (("tools/call", {"name": "bash", "arguments": {"command": "touch /workspace/pwned"}}),
                               ("openenv/session/close", {})):
            hidden = rpc(http, ALICE, method, {**params, "session_id": sid})
            missing = rpc(http, ALICE, method, {**params, "session_id": MISSING})
            assert hidden["error"]["data"]["code"] == "SESSION_NOT_FOUND", hidden
            assert same_answer(hidden, sid, missing)
        run(sockets(srv, sid))
        check = rpc(http, BOB, "tools/call", {"session_id": sid, "name": "bash",
                                              "arguments": {"command": "ls /workspace/pwned"}})
        assert check["result"]["isError"] is True  # alice's call never ran; bob's session lives on
        by_ops = rpc(http, OPS, "tools/call", {"session_id": sid, "name": "bash", "arguments": {"command": "echo op"}})
        assert by_ops["result"]["content"][0]["text"].strip() == "op"  # the operator may drive it
        assert rpc(http, BOB, "openenv/session/close", {"session_id": sid})["result"]["closed"] is True


# ------------------------------------------------------------------ ?token=
def test_query_token_is_accepted_only_on_websocket_upgrades(make_server):
    async def sockets(srv: Any) -> None:
        async with ws_as(srv, ALICE, "/ws", via_query=True) as ws:
            assert (await call(ws, "state"))["type"] == "state"
        async with ws_as(srv, OPS, "/mux", via_query=True) as ws:
            assert (await mux(ws, "p", "any", "ping"))["type"] == "pong"
        async with ws_as(srv, BOB, "/mux") as ws:  # the header, as always
            assert (await mux(ws, "p", "any", "ping"))["type"] == "pong"
        for path in ("/ws", "/mux", "/ws?token=wrong-token", "/mux?token="):
            with pytest.raises(websockets.InvalidStatus) as refused:
                await websockets.connect(srv.ws_url + path)
            assert refused.value.response.status_code == 403

    carol = "tok-carol-e4a19b07"  # configured by its digest only
    digest = f"sha256:{hashlib.sha256(carol.encode()).hexdigest()}"
    identities = {**IDENTITIES, "client_tokens": {**IDENTITIES["client_tokens"], "carol": digest}}
    with make_server(**identities) as srv, httpx.Client(base_url=srv.url, timeout=120) as http:
        for method, path in (("GET", "/metadata"), ("GET", "/episodes"), ("GET", "/metrics"), ("POST", "/mcp"),
                             ("GET", "/episodes/ep-x/trace")):
            for headers in ({}, bearer(ALICE)):  # with a valid header too: a token in a URL is refused
                r = http.request(method, f"{path}?token={ALICE}", headers=headers, json={})
                assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", (path, r.text)
                error = r.json()["error"]
                assert error["code"] == "UNAUTHORIZED" and "Authorization: Bearer" in error["message"], error
                assert ALICE not in r.text
        assert http.get("/metadata", headers=bearer(ALICE)).status_code == 200
        assert http.get("/metadata", headers=bearer("tok-nobody")).status_code == 401
        assert http.get("/metadata", headers=bearer(carol)).status_code == 200
        assert http.get("/metadata", headers=bearer(digest)).status_code == 401  # the digest is no token
        run(sockets(srv))


# ------------------------------------------------------------------ logs
def test_no_token_reaches_the_server_log(demo_tasks_path, tmp_path):
    """`env-server serve` at --log-level trace (access log, websockets' request lines, ASGI scopes):
    every request line is logged with `token=<redacted>`, and no token value anywhere."""
    legacy, wrong = "tok-legacy-0c7e2b94", "tok-wrong-61fa3d08"
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(f"clients:\n  alice: {ALICE}\noperators:\n  ops: {OPS}\n")
    log_path = tmp_path / "server.log"

    async def sockets(ws_url: str) -> None:
        for path, token in (("/ws?token=", ALICE), ("/mux?limit=1&token=", BOB), ("/ws?%74oken=", legacy)):
            async with websockets.connect(f"{ws_url}{path}{token}") as ws:
                await ws.send(json.dumps({"type": "state"} if path.startswith("/ws") else
                                         {"request_id": "p", "session_id": "s", "type": "ping"}))
                await ws.recv()
        async with websockets.connect(ws_url + "/mux", additional_headers=bearer(OPS)) as ws:
            await ws.send(json.dumps({"request_id": "p", "session_id": "s", "type": "ping"}))
            await ws.recv()
        with pytest.raises(websockets.InvalidStatus):
            await websockets.connect(f"{ws_url}/ws?token={wrong}")
        with pytest.raises(websockets.InvalidStatus):  # no "Bearer": the header's value is still hidden
            await websockets.connect(f"{ws_url}/mux", additional_headers={"Authorization": wrong})

    with local_env_server(demo_tasks_path, data_dir=tmp_path / "data", log_path=log_path,
                          extra_args=["--tokens", str(tokens), "--client-token", f"bob={BOB}", "--log-level", "trace"],
                          env={**os.environ, "ENV_SERVER_TOKEN": legacy}, startup_timeout_s=30) as server:
        with httpx.Client(base_url=server.url, timeout=120) as http:
            assert http.get(f"/metadata?token={ALICE}").status_code == 401
            assert http.get(f"/episodes?limit=5&token={OPS}").status_code == 401
            assert http.get(f"/health?token={legacy}").status_code == 200
            assert http.get("/episodes", headers=bearer(BOB)).status_code == 200
            assert http.get("/metadata", headers=bearer(wrong)).status_code == 401
        run(sockets(server.ws_url))
    log = log_path.read_text(errors="replace")
    for line in ('"GET /metadata?token=<redacted> HTTP/1.1" 401', '"GET /episodes?limit=5&token=<redacted> HTTP/1.1"',
                 '"WebSocket /ws?token=<redacted>" [accepted]', '"WebSocket /mux?limit=1&token=<redacted>" [accepted]',
                 '"WebSocket /ws?%74oken=<redacted>" [accepted]', '"WebSocket /ws?token=<redacted>" 403',
                 "< GET /ws?token=<redacted> HTTP/1.1", "< authorization: <redacted>", "b'token=<redacted>'"):
        assert line in log, f"{line!r} not in the log:\n{log[-3000:]}"
    for secret in (ALICE, BOB, OPS, legacy, wrong):
        assert secret not in log, f"a token in the server log:\n{log}"


# ------------------------------------------------------------------ the single token
def test_the_single_token_works_as_before(make_server, demo_task):
    """`auth_token` alone: an operator (every episode, those recorded before tokens too); beside
    client tokens it stays an operator, and an episode recorded without an owner is the operators'."""
    with make_server() as srv:  # no token: open, traces record no owner
        run(record(srv, "ignored", "ep-open", demo_task.instance_id))
        assert "owner" not in srv.service.store.load("ep-open")[0]
    with make_server(auth_token="s3cret") as srv, httpx.Client(base_url=srv.url, timeout=120) as http:
        r = http.get("/episodes")
        assert r.status_code == 401 and r.json()["error"] == {"code": "UNAUTHORIZED",
                                                              "message": "missing or wrong bearer token"}
        run(record(srv, "s3cret", "ep-legacy", demo_task.instance_id, via_query=True))
        assert listed(http, "s3cret") == {"ep-open", "ep-legacy"}
        assert http.get("/episodes/ep-open/state/1", headers=bearer("s3cret")).json()["t"] == 1
        assert srv.service.store.load("ep-legacy")[0]["owner"] == "operator"
    with make_server(auth_token="s3cret", client_tokens={"alice": ALICE}) as srv, \
            httpx.Client(base_url=srv.url, timeout=120) as http:
        assert listed(http, "s3cret") == {"ep-open", "ep-legacy"}
        assert listed(http, ALICE) == set()
        assert http.get("/episodes/ep-open/state/0", headers=bearer(ALICE)).status_code == 404


def test_cli_refuses_inconsistent_tokens_without_printing_them(demo_tasks_path, tmp_path):
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"clients": {"alice": ALICE}, "operators": {"ops": ALICE}}))
    cases = [(["--tokens", str(tokens)], "'alice' and 'ops' have the same token"),
             (["--client-token", f"alice={ALICE}", "--operator-token", f"alice={OPS}"], "'alice' is given twice"),
             (["--client-token", f"a b={ALICE}"], "client name 'a b'"),
             (["--client-token", ALICE], "--client-token wants NAME=TOKEN"),
             (["--tokens", str(tmp_path / "none.yaml")], "cannot read the tokens file")]
    for flags, expected in cases:
        proc = subprocess.run([sys.executable, "-m", "env_server.cli", "serve", "--tasks", str(demo_tasks_path),
                               "--data-dir", str(tmp_path / "data"), *flags],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and expected in proc.stderr, (flags, proc.stderr)
        assert ALICE not in proc.stdout + proc.stderr and OPS not in proc.stdout + proc.stderr
