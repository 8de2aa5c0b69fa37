"""Helpers shared by the env-server tests (a uniquely named module: `conftest` names collide
across test directories): a real uvicorn server on a free loopback port, and `run`."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

import pytest
import uvicorn

from env_server.app import create_app, uvicorn_config
from env_server.config import ServerConfig
from env_server.task import TaskInstance


# The bwrap sandbox backend: the `bwrap` fixture of tests/conftest.py skips without bubblewrap,
# or fails under CI / SWE_REQUIRE_BWRAP=1.
requires_sandbox = pytest.mark.usefixtures("bwrap")


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


def run(coro: Any) -> Any:
    return asyncio.run(coro)
