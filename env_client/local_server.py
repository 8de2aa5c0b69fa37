"""A local env server as a child process: `env-server serve` on a free loopback port, ready.

    with local_env_server(tasks="tasks.jsonl", backend="bwrap", data_dir="env-data") as server:
        EnvClient(server.url) ...        # /health answered 200 before the block began

The server runs as a command (`python -m env_server.cli serve ...`, with the interpreter of
this process unless `python=` says otherwise): the client library never imports the server.
Its output goes to a log file (`server.log_path`, `server.tail()`); a server that exits or
stays unhealthy raises `StartupError` with that log's tail; one whose port was taken between
picking and binding it is started again on another. Leaving the block stops its process group.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from .processes import ManagedProcess, StartupError, free_port

__all__ = ["LocalEnvServer", "local_env_server", "serve_command", "start_env_server"]

_PORT_IN_USE = re.compile(r"address already in use|errno 98", re.I)


class LocalEnvServer(ManagedProcess):
    """A running `env-server serve` (a `ManagedProcess`): `url`, `ws_url`, `host`, `port`,
    `log_path`, `tail()`, `stop()`. A log it made in a temporary folder goes with `stop()`."""

    def __init__(self, argv: Sequence[str], log_path: str | os.PathLike[str], *, host: str, port: int,
                 **kwargs: Any) -> None:
        bracketed = f"[{host}]" if ":" in host else host
        kwargs.setdefault("name", "env-server")
        super().__init__(argv, log_path, url=f"http://{bracketed}:{port}", **kwargs)
        self.host, self.port = host, port
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    @property
    def ws_url(self) -> str:
        """The server's base URL with the ws scheme (append `/ws` or `/mux`)."""
        assert self.url is not None
        return "ws" + self.url[len("http"):]

    def stop(self, grace_s: float | None = None) -> int | None:
        code = super().stop(grace_s)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        return code


def serve_command(port: int, *, host: str = "127.0.0.1", tasks: str | os.PathLike[str] | None = None,
                  backend: str | None = None, data_dir: str | os.PathLike[str] | None = None,
                  extra_args: Sequence[str] = (), python: str | None = None) -> list[str]:
    """The `env-server serve` command line `start_env_server` runs."""
    argv = [python or sys.executable, "-m", "env_server.cli", "serve", "--host", host, "--port", str(port)]
    if tasks is not None:
        argv += ["--tasks", str(tasks)]
    if backend is not None:
        argv += ["--backend", backend]
    if data_dir is not None:
        argv += ["--data-dir", str(data_dir)]
    return argv + [str(a) for a in extra_args]


def start_env_server(tasks: str | os.PathLike[str] | None = None, *, backend: str | None = None,
                     data_dir: str | os.PathLike[str] | None = None, extra_args: Sequence[str] = (),
                     env: Mapping[str, str] | None = None, host: str = "127.0.0.1",
                     log_path: str | os.PathLike[str] | None = None, startup_timeout_s: float = 120.0,
                     stop_grace_s: float = 20.0, port_retries: int = 2, python: str | None = None) -> LocalEnvServer:
    """Start `env-server serve` on a free port of `host`; return it once `/health` answers 200.
    The caller stops it (`server.stop()`, or `with` it); `local_env_server` does both.

    `tasks`, `backend`, `data_dir` become `--tasks`, `--backend`, `--data-dir`; `extra_args`
    are appended as they are. `env` is the server's whole environment (None: this process's).
    `log_path` keeps the server's output (None: a temporary file, removed by `stop()`). Raises
    `StartupError` (the server stopped) when it exits or is not healthy in `startup_timeout_s`."""
    tmp = None if log_path is not None else tempfile.TemporaryDirectory(prefix="env-server-")
    log = Path(log_path) if log_path is not None else Path(tmp.name) / "env-server.log"  # type: ignore[union-attr]
    for attempt in range(port_retries + 1):
        port = free_port(host)
        argv = serve_command(port, host=host, tasks=tasks, backend=backend, data_dir=data_dir,
                             extra_args=extra_args, python=python)
        server = LocalEnvServer(argv, log, host=host, port=port, env=env, stop_grace_s=stop_grace_s)
        try:
            server.start()
            server.wait_healthy(startup_timeout_s)
        except BaseException as exc:
            server.stop(0)
            last = "\n".join(exc.log_tail.splitlines()[-5:]) if isinstance(exc, StartupError) else ""
            if isinstance(exc, StartupError) and exc.exited and attempt < port_retries and _PORT_IN_USE.search(last):
                continue  # the port was taken after we picked it: another one
            if tmp is not None:
                tmp.cleanup()
            raise
        server._tmp = tmp
        return server
    raise AssertionError("unreachable")


@contextlib.contextmanager
def local_env_server(tasks: str | os.PathLike[str] | None = None, **options: Any) -> Iterator[LocalEnvServer]:
    """`with local_env_server(tasks, backend=..., data_dir=..., extra_args=[...], env=...) as server:`
    `start_env_server` with the same options; the server is stopped when the block ends."""
    server = start_env_server(tasks, **options)
    try:
        yield server
    finally:
        server.stop()
