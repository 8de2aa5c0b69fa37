"""Fixtures: each framework's cached venv (``framework_support``) and the real server on loopback
(the default bwrap sandbox) serving the demo task."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
from support.servers import RunningServer, run_server

from env_server.config import ServerConfig
from task_factory.demo_task import demo_tasks_file
from verifier.task import TaskInstance, load_tasks


@pytest.fixture(scope="session")
def demo_task() -> TaskInstance:
    return load_tasks(demo_tasks_file())[0]


@pytest.fixture(scope="module")
def server(bwrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One server (default config: the bwrap sandbox) for the module's episodes, behind a bearer
    token (``server.token``) that the adapters read from $ENV_SERVER_TOKEN."""
    tasks_path = demo_tasks_file()
    token = secrets.token_urlsafe(16)
    config = ServerConfig(tasks_path=tasks_path, data_dir=tmp_path_factory.mktemp("frameworks") / "data",
                          auth_token=token)
    with run_server(config, load_tasks(tasks_path)) as srv:
        srv.token = token
        yield srv
