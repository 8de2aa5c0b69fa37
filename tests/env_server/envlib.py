"""Helpers shared by the env-server tests (a uniquely named module: `conftest` names collide
across test directories): the loopback server of tests/serverlib.py, `requires_sandbox`, `run`."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from serverlib import RunningServer, call, free_port, run_server, tool  # noqa: F401  (re-exported)

# The bwrap sandbox backend: the `bwrap` fixture of tests/conftest.py skips without bubblewrap,
# or fails under CI / SWE_REQUIRE_BWRAP=1.
requires_sandbox = pytest.mark.usefixtures("bwrap")


def run(coro: Any) -> Any:
    return asyncio.run(coro)
