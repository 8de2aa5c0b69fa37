"""The real env server on a free loopback port, for any test folder (tests/ is on sys.path),
and the two frame helpers every `/ws` test uses."""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from typing import Any, Iterator

import uvicorn

from env_client.processes import free_port, wait_healthy
from env_server.app import create_app, uvicorn_config
from env_server.config import ServerConfig
from verifier.task import TaskInstance

__all__ = ["RunningServer", "call", "free_port", "run_server", "serve_in_thread", "tool"]  # free_port: env_client's


@contextmanager
def serve_in_thread(config: uvicorn.Config, url: str, health_path: str = "/health",
                    timeout_s: float = 20.0, **run_kwargs: Any) -> Iterator[uvicorn.Server]:
    """`config`'s app under uvicorn in a daemon thread, once `url + health_path` answers 200
    (`wait_healthy`: fails at once if the thread dies); stopped on exit. `run_kwargs` go to
    `Server.run` (e.g. `sockets=[sock]`, a socket bound beforehand)."""
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs=run_kwargs, daemon=True)
    thread.start()
    try:
        wait_healthy(url, thread, timeout_s, health_path, name="the in-process server")
        yield server
    finally:
        server.should_exit = True
        thread.join(30)


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
    srv = RunningServer(app, port)
    with serve_in_thread(uvicorn_config(app, config, "127.0.0.1", port, "warning"), srv.url):
        yield srv


async def call(ws: Any, type_: str, data: dict | None = None) -> dict:
    """Send one `/ws` frame and return the reply."""
    frame = {"type": type_} if data is None else {"type": type_, "data": data}
    await ws.send(json.dumps(frame))
    return json.loads(await ws.recv())


def tool(name: str, **arguments: Any) -> dict:
    """A `call_tool` action."""
    return {"type": "call_tool", "tool_name": name, "arguments": arguments}
