"""The real env server on a free loopback port, for any test folder (tests/ is on sys.path),
and the two frame helpers every `/ws` test uses."""

from __future__ import annotations

import json
import socket
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

import uvicorn

from env_server.app import create_app, uvicorn_config
from env_server.config import ServerConfig
from env_server.task import TaskInstance


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RunningServer:
    def __init__(self, app: Any, port: int) -> None:
        self.app = app
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.ws_url = f"ws://127.0.0.1:{port}"

    @property
    def service(self) -> Any:
        return self.app.state.service


@contextmanager
def run_server(config: ServerConfig, tasks: list[TaskInstance]) -> Iterator[RunningServer]:
    """The real app under uvicorn in a thread on loopback; stopped (and its sessions closed) on exit."""
    app = create_app(config, tasks)
    port = free_port()
    server = uvicorn.Server(uvicorn_config(app, config, "127.0.0.1", port, "warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("server did not start")
        time.sleep(0.02)
    try:
        yield RunningServer(app, port)
    finally:
        server.should_exit = True
        thread.join(30)


async def call(ws: Any, type_: str, data: dict | None = None) -> dict:
    """Send one `/ws` frame and return the reply."""
    frame = {"type": type_} if data is None else {"type": type_, "data": data}
    await ws.send(json.dumps(frame))
    return json.loads(await ws.recv())


def tool(name: str, **arguments: Any) -> dict:
    """A `call_tool` action."""
    return {"type": "call_tool", "tool_name": name, "arguments": arguments}
