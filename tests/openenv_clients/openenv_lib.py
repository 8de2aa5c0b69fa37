"""Helpers of the OpenEnv client tests (a uniquely named module: ``conftest`` names collide across
test directories): one venv per OpenEnv client release, and the real server on loopback.

Each client generation is installed, unmodified, into its own venv under the project's
gitignored ``.cache/openenv-venvs/<name>`` (built once, then reused) and run from there in a
subprocess: the two releases both own the ``openenv`` import name, so they cannot share the
project's venv. A venv that cannot be built fails the test under CI (``CI=true`` or
``SWE_REQUIRE_OPENENV=1``: ``missing("openenv", ...)`` of tests/requirements.py) and skips it
elsewhere, with pip's reason.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import uvicorn
from requirements import missing

from env_server.app import create_app, uvicorn_config
from env_server.config import ServerConfig
from env_server.task import TaskInstance

ROOT = Path(__file__).resolve().parents[2]
VENVS = ROOT / ".cache" / "openenv-venvs"
READY = ".openenv-ready"  # written last: its presence (and content) marks a complete venv
PIP_TIMEOUT_S = 480  # under pytest-timeout's 600 s per test: a slow index fails with pip's words


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONNOUSERSITE": "1"})


def _tail(text: str, n: int = 2000) -> str:
    return text if len(text) <= n else "..." + text[-n:]


def build_venv(name: str, requirement: str) -> Path:
    """``.cache/openenv-venvs/<name>`` with ``requirement`` installed: built once (under a file lock)."""
    venv = VENVS / name
    python = venv / "bin" / "python"
    stamp = f"{requirement}\n{sys.version}\n"
    VENVS.mkdir(parents=True, exist_ok=True)
    with open(VENVS / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent test processes build it once
        marker = venv / READY
        if marker.is_file() and marker.read_text() == stamp and python.exists():
            return python
        shutil.rmtree(venv, ignore_errors=True)
        steps = [("python -m venv", [sys.executable, "-m", "venv", str(venv)]),
                 (f"pip install {requirement}", [str(python), "-m", "pip", "install", "--quiet", requirement])]
        for what, cmd in steps:
            try:
                proc = _run(cmd, PIP_TIMEOUT_S)
            except (OSError, subprocess.TimeoutExpired) as exc:
                shutil.rmtree(venv, ignore_errors=True)
                missing("openenv", f"cannot build the {requirement} venv in {venv}: {what}: {exc}")
            if proc.returncode != 0:
                shutil.rmtree(venv, ignore_errors=True)
                missing("openenv", f"cannot build the {requirement} venv in {venv}: {what} exited "
                        f"{proc.returncode}:\n{_tail(proc.stdout + proc.stderr)}")
        marker.write_text(stamp)
        return python


# ---------------------------------------------------------------- the server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RunningServer:
    def __init__(self, app: Any, port: int) -> None:
        self.app = app
        self.url = f"http://127.0.0.1:{port}"

    @property
    def service(self) -> Any:
        return self.app.state.service


@contextmanager
def run_server(config: ServerConfig, tasks: list[TaskInstance]) -> Iterator[RunningServer]:
    """The real app under uvicorn in a thread on loopback (as tests/env_server/envlib.py does)."""
    app = create_app(config, tasks)
    port = _free_port()
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
