"""Helpers shared by the env-server tests (a uniquely named module: `conftest` names collide
across test directories): the loopback server of tests/support/servers.py, `requires_sandbox`, `run`."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from support.servers import RunningServer, call, free_port, run_server, tool  # noqa: F401  (re-exported)

from sandbox import DockerBackend

# The bwrap sandbox backend: the `bwrap` fixture of tests/conftest.py skips without bubblewrap,
# or fails under CI / SWE_REQUIRE_BWRAP=1.
requires_sandbox = pytest.mark.usefixtures("bwrap")


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def docker_or_fail() -> None:
    """The docker backend's engine and image, or: fail in CI (SWE_REQUIRE_DOCKER), skip elsewhere."""
    from support.requirements import missing

    try:
        from sandbox.docker import docker_client

        client = docker_client(None)
        client.images.get(DockerBackend().image)
    except Exception as exc:  # no SDK, no engine, no image
        missing("docker", f"the docker backend is unavailable: {exc}")
