"""Fixtures: each OpenEnv client release's cached venv, and the real server (see ``openenv_support``)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Iterator

import pytest
from openenv_support import build_venv
from support.servers import RunningServer, run_server

from env_server.config import ServerConfig
from task_factory.demo_task import demo_tasks_file
from verifier.task import TaskInstance, load_tasks


@pytest.fixture(scope="session")
def openenv_python() -> Callable[[str, str], Path]:
    """``openenv_python(name, requirement)``: the python of that client's cached venv."""
    return build_venv


@pytest.fixture(scope="session")
def demo_task() -> TaskInstance:
    return load_tasks(demo_tasks_file())[0]


@pytest.fixture(scope="module")
def server(bwrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One server (default config: the bwrap sandbox; see tests/conftest.py) for the module's episodes."""
    tasks_path = demo_tasks_file()
    config = ServerConfig(tasks_path=tasks_path, data_dir=tmp_path_factory.mktemp("openenv") / "data")
    with run_server(config, load_tasks(tasks_path)) as srv:
        yield srv


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def server_errors(server: RunningServer) -> Iterator[list[logging.LogRecord]]:
    """ERROR records the server logs during the test (uvicorn's ASGI errors and env_server's own)."""
    handler = _Collect()
    loggers = [logging.getLogger(name) for name in ("uvicorn.error", "env_server")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler.records
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
