"""Fixtures of the client-library tests: the real env server (bwrap sandbox, the demo task) on
loopback, driven through env_client over real sockets (the /mux protocol double of the
trainer tests is used only by test_env_client.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
from support.servers import RunningServer, server_factory

from task_factory.demo_task import demo_tasks_file
from verifier.task import TaskInstance, load_tasks

INSTANCE = "six__demo-1"
#: the demo task's gold fix, as one tool call
FIX = ("str_replace", {"path": "six.py", "old": 'return s.encode("utf-8")', "new": 'return s.encode("latin-1")'})
TOKEN = "client-tok-7d2e91c4a0b35f68"


@pytest.fixture(scope="session")
def demo_tasks(bwrap: str) -> tuple[Path, list[TaskInstance]]:
    """(tasks file, tasks) of the demo task; needs bubblewrap (fails under CI without it)."""
    path = demo_tasks_file()
    return path, load_tasks(path)


@pytest.fixture(scope="session")
def make_server(demo_tasks, tmp_path_factory) -> Any:
    """`with make_server(max_sessions=1) as srv:` a real server with config overrides."""
    path, tasks = demo_tasks
    return server_factory(path, lambda: tmp_path_factory.mktemp("env-data"), tasks)  # a data dir per server


@pytest.fixture(scope="module")
def server(make_server) -> Iterator[RunningServer]:
    with make_server() as srv:
        yield srv


@pytest.fixture(scope="module")
def auth_server(make_server) -> Iterator[RunningServer]:
    with make_server(auth_token=TOKEN) as srv:
        yield srv
