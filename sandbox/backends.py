"""The registry of sandbox backends: the one place a backend's name is bound to its class.

Entries name their class by ``"module:Class"`` (relative to this package) so that reading the
names (``SandboxConfig`` validation, CLI choices) imports no backend; a class may also be
registered directly. Adding a backend: a :class:`sandbox.jail.JailSandbox` subclass and one
line in :data:`BACKENDS`.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the backend's Sandbox class, or where to import it from ("module:Class").
BACKENDS: dict[str, str | type[Any]] = {
    "bwrap": ".bwrap:BwrapSandbox",
    "docker": ".docker:DockerSandbox",
}
DEFAULT_BACKEND = "bwrap"  # what SandboxConfig.backend is when not given


def backend_names() -> tuple[str, ...]:
    """The registered backends' names, in registration order (CLI choices, config validation)."""
    return tuple(BACKENDS)


def backend_class(name: str) -> type[Any]:
    """The Sandbox class registered as ``name`` (imported on first use); ValueError if none is."""
    try:
        entry = BACKENDS[name]
    except KeyError:
        raise ValueError(unknown_backend(name)) from None
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        entry = getattr(importlib.import_module(module, __package__), attr)
    return entry


def unknown_backend(name: object) -> str:
    """The error message for a backend name the registry does not hold."""
    return f"unknown sandbox backend {name!r}; registered backends: {', '.join(backend_names())}"
