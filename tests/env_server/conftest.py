"""Fixtures: the demo task (real sdist, real sandbox) and a real uvicorn server on a free port."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
from support.servers import server_factory

from task_factory.demo_task import demo_tasks_file
from verifier.task import TaskInstance, load_tasks


@pytest.fixture(scope="session")
def demo_tasks_path() -> Path:
    return demo_tasks_file()


@pytest.fixture(scope="session")
def demo_task(demo_tasks_path: Path) -> TaskInstance:
    return load_tasks(demo_tasks_path)[0]


@pytest.fixture
def make_server(tmp_path: Path, demo_tasks_path: Path) -> Iterator[Any]:
    """Start servers with config overrides: ``with make_server(max_sessions=2) as srv: ...``."""
    yield server_factory(demo_tasks_path, lambda: tmp_path / "data")  # one data dir: a restart reads it
