"""What a test does when a part of the environment it needs is missing: fail or skip.

A part (``bwrap``, ``docker``, ``taskpack``, a third-party module ...) is *required* when
``CI=true`` (every part but a GPU) or when ``SWE_REQUIRE_<PART>=1`` (``SWE_REQUIRE_DOCKER=1``,
``SWE_REQUIRE_BWRAP=1``, ``SWE_REQUIRE_TASKPACK=1``, ``SWE_REQUIRE_REGISTRY=1`` for the
``docker-registry`` binary of tests/images ...; any name works, none is registered). Where
it is missing, ``missing(part, reason)`` fails the test when the part is required and skips it otherwise,
so a local run without Docker skips the Docker tests while CI cannot pass without them.

The project's own modules are never optional: import them plainly (no ``importorskip``).
tests/conftest.py also turns, under CI, any other skip but a missing GPU into a failure.
"""

from __future__ import annotations

import importlib
import os
import re
from types import ModuleType
from typing import Any, NoReturn

import pytest

# Skips that may stay skips in CI: the CI machines have no GPU.
GPU_REASON = re.compile(r"\b(GPU|CUDA)\b")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def flag(part: str) -> str:
    """The environment variable that requires ``part``: SWE_REQUIRE_<PART>."""
    return "SWE_REQUIRE_" + re.sub(r"[^A-Z0-9]", "_", part.upper())


def required(part: str) -> bool:
    if part == "gpu":
        return False
    return in_ci() or os.environ.get(flag(part)) == "1"


def missing(part: str, reason: str) -> NoReturn:
    """Call where ``part`` is missing: fails the test if the part is required, else skips it."""
    if required(part):
        why = "CI=true" if in_ci() else f"{flag(part)}=1"
        pytest.fail(f"{part} is required ({why}) but {reason}", pytrace=False)
    pytest.skip(f"{part} missing: {reason} (set {flag(part)}=1 or CI=true to fail instead)")


def require_module(module: str, part: str, reason: str) -> ModuleType:
    """``module`` imported; where it is not installed, ``part`` is missing (fail when required, else skip)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        missing(part, f"{module} is not installed: {reason}")


def docker_engine_client() -> Any:
    """The project's Docker client of the default engine; no engine (or no SDK): ``docker`` is missing."""
    from sandbox.docker import docker_client  # the project's own module: never optional

    try:
        return docker_client(None)
    except Exception as exc:  # noqa: BLE001 - no SDK or no engine
        missing("docker", f"no Docker engine: {exc}")
