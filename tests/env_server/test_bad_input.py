"""Bad input over /ws: each gets a clear code, the session survives, the trace keeps every step."""

from __future__ import annotations

import json

import httpx
import websockets
from env_support import requires_sandbox, run
from test_ws import call, tool

pytestmark = requires_sandbox


def test_protocol_errors_leave_the_session_usable(make_server):
    async def main(srv):
        async with websockets.connect(srv.ws_url + "/ws", max_size=None) as ws:
            r = await call(ws, "step", tool("bash", command="ls"))
            assert r["data"]["code"] == "NO_EPISODE"
            await ws.send("{not json")
            assert json.loads(await ws.recv())["data"]["code"] == "INVALID_JSON"
            await ws.send("[1, 2]")
            assert json.loads(await ws.recv())["data"]["code"] == "INVALID_JSON"
            assert (await call(ws, "dance"))["data"]["code"] == "UNKNOWN_TYPE"
            assert (await call(ws, "reset", {"instance_id": "nope"}))["data"]["code"] == "TASK_NOT_FOUND"
            assert (await call(ws, "reset", {"index": 99}))["data"]["code"] == "TASK_NOT_FOUND"
            assert (await call(ws, "reset", {"episode_id": "../etc"}))["data"]["code"] == "VALIDATION_ERROR"
            await call(ws, "reset", {"episode_id": "ep-bad"})
            assert (await call(ws, "reset", {"episode_id": "ep-bad"}))["data"]["code"] == "VALIDATION_ERROR"
            await call(ws, "reset", {"episode_id": "ep-bad2"})
            assert (await call(ws, "step", {"type": "fly"}))["data"]["code"] == "INVALID_ACTION"
            assert (await call(ws, "step", {"tool_name": "bash"}))["data"]["code"] == "INVALID_ACTION"
            assert (await call(ws, "step", {"type": "call_tool", "tool_name": 3}))["data"]["code"] == "INVALID_ACTION"
            assert (await call(ws, "state", {"t": -1}))["data"]["code"] == "VALIDATION_ERROR"
            assert (await call(ws, "state", {"t": 50}))["data"]["code"] == "STEP_OUT_OF_RANGE"
            huge = json.dumps({"type": "step", "data": tool("create", path="big.txt", content="x" * 300_000)})
            await ws.send(huge)
            assert json.loads(await ws.recv())["data"]["code"] == "FRAME_TOO_LARGE"
            r = await call(ws, "step", tool("bash", command="echo alive"))
            assert r["data"]["observation"]["output"].strip() == "alive"
            assert (await call(ws, "state"))["data"]["step_count"] == 1
        async with httpx.AsyncClient(base_url=srv.url, timeout=120) as http:
            lines = (await http.get("/episodes/ep-bad2/trace")).text.splitlines()
            assert len(lines) == 2 and "alive" in lines[1]
    with make_server(max_frame_bytes=200_000) as srv:
        run(main(srv))


def step_meta(r: dict) -> dict:
    return r["data"]["metadata"]


def test_tool_failures_carry_markers_and_count_as_steps(make_server):
    async def main(srv):
        async with websockets.connect(srv.ws_url + "/ws") as ws:
            await call(ws, "reset")
            cases = [
                (tool("fly"), "unknown_tool"),
                (tool("bash"), "invalid_arguments"),
                (tool("bash", command="ls", color="red"), "invalid_arguments"),
                (tool("bash", command="echo \ud800"), "invalid_arguments"),  # a lone surrogate
                (tool("create", path="x\udfff.py", content="x"), "invalid_arguments"),
                (tool("bash", command="nosuchcmd"), "command_not_found"),
                (tool("bash", command="find ."), "blocked_tool"),
                (tool("bash", command="sleep 5", timeout=0.5), "timeout"),
                (tool("bash", command="python -c 'import nosuchmod'"), "python_exception"),
                (tool("bash", command="exit 3"), "shell_exited"),
                (tool("bash", command="false"), "nonzero_exit"),
                (tool("view", path="nope.py"), "file_not_found"),
                (tool("view", path="../../etc/passwd"), "path_outside_workspace"),
                (tool("view", path="six.py", start_line=99999), "invalid_arguments"),
                (tool("str_replace", path="six.py", old="no such text", new="x"), "edit_no_match"),
                (tool("str_replace", path="six.py", old="import", new="x"), "edit_multiple_matches"),
                (tool("str_replace", path="six.py", old='return s.encode("utf-8")', new="return (("),
                 "syntax_error"),
            ]
            for n, (action, kind) in enumerate(cases, 1):
                r = await call(ws, "step", action)
                meta = step_meta(r)
                assert meta.get("error_kind") == kind, (action, r)
                assert meta["error_source"] == "agent" and meta["hint_template_key"] and meta["step"] == n
            r = await call(ws, "step", tool("view", path="."))
            assert "six.py" in r["data"]["observation"]["output"] and "error_kind" not in step_meta(r)
            r = await call(ws, "step", tool("create", path="pkg/new.py", content="x = 1\n"))
            assert "error_kind" not in step_meta(r)
            r = await call(ws, "state", {"t": len(cases) + 2})
            assert "pkg/new.py" in r["data"]["diff"]
    with make_server() as srv:
        run(main(srv))


def test_step_budget_ends_and_grades(make_server):
    from env_server.episode import EpisodeConfig

    async def main(srv):
        async with websockets.connect(srv.ws_url + "/ws") as ws:
            await call(ws, "reset")
            r = await call(ws, "step", tool("bash", command="true"))
            assert r["data"]["done"] is False
            r = await call(ws, "step", tool("bash", command="true"))
            assert r["data"]["done"] is True and r["data"]["reward"] == 0.0
            assert "step budget" in r["data"]["observation"]["output"]
    with make_server(episode=EpisodeConfig(max_steps=2)) as srv:
        run(main(srv))
