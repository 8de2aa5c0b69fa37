"""README names exactly the transports the server speaks: every route it names (outside the
Sandbox section, whose paths are the jail's) answers on a real server, as HTTP or as a WebSocket
handshake, and what it must not claim is absent: OpenEnv's production mode has no HTTP
`/reset`, `/step` or `/state` (they answer 404 here), so README does not say reset/step/state
work "over HTTP"."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
from support.servers import run_server
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from env_server.config import ServerConfig
from task_factory.demo_task import demo_tasks_file
from verifier.task import load_tasks

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_routes() -> set[tuple[str | None, str]]:
    """(method or None, path) of every route-like code span of README but its Sandbox section."""
    text = re.sub(r"^## Sandbox\n.*?(?=^## )", "", README.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {(m.group(1), m.group(2)) for m in re.finditer(r"`(?:(GET|POST|WS) )?(/[a-z][\w/{}.-]*)`", text)}


def _ws_status(url: str) -> int:
    try:
        with connect(url, open_timeout=20):
            return 101
    except InvalidStatus as exc:
        return exc.response.status_code


def test_readme_names_the_transports_the_server_speaks(bwrap, tmp_path):
    routes = readme_routes()
    assert {"/ws", "/mux", "/mcp"} <= {path for _, path in routes}, routes
    text = " ".join(README.read_text(encoding="utf-8").split())
    assert not re.search(r"reset\W+step\W+state[^.;)]*\bover HTTP\b", text), "README: reset/step/state over HTTP"
    path = demo_tasks_file()
    with run_server(ServerConfig(tasks_path=path, data_dir=tmp_path), load_tasks(path)) as srv, \
            httpx.Client(base_url=srv.url, timeout=30) as http:
        answers = {}
        for method, route in sorted(routes, key=str):
            if method == "WS":
                answers[route] = _ws_status(srv.ws_url + route)
                continue
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"} if method == "POST" else None
            status = http.request(method or "GET", route, content=json.dumps(body) if body else None).status_code
            if status == 404 and method is None:  # a WebSocket route: HTTP GET does not match it
                status = _ws_status(srv.ws_url + route)
            answers[route] = status
        assert all(status != 404 for status in answers.values()), answers
        assert answers["/ws"] == answers["/mux"] == 101 and answers["/mcp"] == 200, answers
        refused = {route: http.post(route, json={}).status_code for route in ("/reset", "/step", "/state")}
        assert refused == {"/reset": 404, "/step": 404, "/state": 404}, refused
