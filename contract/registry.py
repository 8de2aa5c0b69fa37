"""What every registry of the project shares (tools aside, whose entries are objects): an entry is its
class, or ``"module:Class"`` relative to the registry's package, imported on first use, so that reading
a registry's names (a config's validation, a command's choices, a help page) imports none of them."""

from __future__ import annotations

import importlib
from typing import Any


def resolve(registry: dict[str, Any], name: str, package: str | None, what: str) -> Any:
    """The class registered as ``name`` (imported and kept on first use); ValueError naming the
    registered ones when there is none (``what``: "loss channel", "task source")."""
    try:
        entry = registry[name]
    except KeyError:
        raise ValueError(f"unknown {what} {name!r}; registered: {', '.join(registry)}") from None
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        entry = registry[name] = getattr(importlib.import_module(module, package), attr)
    return entry
