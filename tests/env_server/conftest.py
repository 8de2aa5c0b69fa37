"""Fixtures: the demo task (real sdist, real sandbox) and a real uvicorn server on a free port."""

from __future__ import annotations

import asyncio
import shutil
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest
import uvicorn

from env_server.app import create_app, uvicorn_config
from env_server.config import ServerConfig
from env_server.demo_task import demo_tasks_file
from env_server.episode import EpisodeConfig
from env_server.task import TaskInstance, load_tasks


def _sandbox_available() -> bool:
    try:
        import sandbox.bwrap  # noqa: F401
    except ImportError:
        return False
    return shutil.which("bwrap") is not None


requires_sandbox = pytest.mark.skipif(not _sandbox_available(), reason="bwrap sandbox backend not available")


@pytest.fixture(scope="session")
def demo_tasks_path() -> Path:
    return demo_tasks_file()


@pytest.fixture(scope="session")
def demo_task(demo_tasks_path: Path) -> TaskInstance:
    return load_tasks(demo_tasks_path)[0]


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


@pytest.fixture
def make_server(tmp_path: Path, demo_tasks_path: Path) -> Iterator[Any]:
    """Start servers with config overrides: ``with make_server(max_sessions=2) as srv: ...``."""
    def factory(**overrides: Any) -> Any:
        episode = overrides.pop("episode", None) or EpisodeConfig()
        config = ServerConfig(tasks_path=demo_tasks_path, data_dir=tmp_path / "data", episode=episode, **overrides)
        return run_server(config, load_tasks(demo_tasks_path))
    yield factory


def run(coro: Any) -> Any:
    return asyncio.run(coro)
