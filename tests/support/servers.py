"""The real env server for any test folder: in a thread of the test process (`run_server`, and
`server_factory`, the one factory behind every ``make_server`` fixture) or as its own
`env-server serve` process (`start_server_process`); and the two frame helpers every `/ws` test uses."""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import uvicorn

from env_client.processes import free_port, wait_healthy
from env_server.app import create_app, uvicorn_config
from env_server.config import ServerConfig
from verifier.task import TaskInstance, load_tasks

__all__ = ["RunningServer", "call", "free_port", "run_server", "serve_in_thread", "server_factory",
           "start_server_process", "tool"]  # free_port: env_client's


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


def server_factory(tasks_path: Path, data_dir: Callable[[], Path],
                   tasks: list[TaskInstance] | None = None) -> Callable[..., Any]:
    """``factory(**overrides)``: `run_server` (a context manager) of a `ServerConfig` on `tasks_path`
    with `overrides` (``episode=None``: the default one), its data under ``data_dir()`` (a fresh
    folder per server, or the same one each time: a restart reads the first server's traces),
    serving `tasks` (None: loaded from `tasks_path` for each server)."""
    def factory(**overrides: Any) -> Any:
        if overrides.get("episode") is None:
            overrides.pop("episode", None)
        config = ServerConfig(tasks_path=tasks_path, data_dir=data_dir(), **overrides)
        return run_server(config, load_tasks(tasks_path) if tasks is None else tasks)
    return factory


def start_server_process(tasks: Path, data_dir: Path, max_sessions: int = 16, extra_args: list[str] | None = None):
    """`env-server serve` (bwrap sandbox) as its own process on a free loopback port, healthy
    (env_client's `start_env_server`: ``.url``; stop it, its whole process group, with ``.stop()``)."""
    from env_client.local_server import start_env_server

    return start_env_server(tasks, backend="bwrap", data_dir=data_dir, startup_timeout_s=120,
                            extra_args=["--max-sessions", str(max_sessions), *(extra_args or [])])


async def call(ws: Any, type_: str, data: dict | None = None) -> dict:
    """Send one `/ws` frame and return the reply."""
    frame = {"type": type_} if data is None else {"type": type_, "data": data}
    await ws.send(json.dumps(frame))
    return json.loads(await ws.recv())


def tool(name: str, **arguments: Any) -> dict:
    """A `call_tool` action."""
    return {"type": "call_tool", "tool_name": name, "arguments": arguments}
