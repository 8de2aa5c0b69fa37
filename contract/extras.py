"""Which extra of pyproject.toml a command needs, checked before the command imports anything of it.

Every console script is installed whatever the extras (``pip install -e ".[client]"`` installs
``env-server`` too), so each entry point asks first whether its extra's key modules are there and,
when one is not, ends with one line that names the extra and how to install it::

    env-server needs the 'env' extra: pip install -e ".[env]" (missing: fastapi, uvicorn)

``importlib.util.find_spec`` only looks the modules up (nothing is imported): the check costs
milliseconds. The package is not on a package index: the line installs from the checkout.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable

__all__ = ["EXTRA_MODULES", "install_line", "missing_extra", "missing_modules"]

#: the modules that tell whether an extra is installed (top-level import names of its requirements)
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "env": ("fastapi", "uvicorn", "websockets", "prometheus_client"),
    "client": ("httpx", "websockets"),
    "train": ("torch", "transformers", "trl", "accelerate", "datasets", "tqdm"),
    "datasets": ("swebench", "pyarrow"),
}


def install_line(extra: str) -> str:
    """How to install ``extra`` from a checkout of the repository."""
    return f'pip install -e ".[{extra}]"'


def missing_modules(modules: Iterable[str]) -> list[str]:
    """The modules of ``modules`` that cannot be imported here (looked up, not imported)."""
    out = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a parent that fails, a module whose __spec__ is None
            found = False
        if not found:
            out.append(name)
    return out


def missing_extra(command: str, extra: str, modules: Iterable[str] | None = None) -> str | None:
    """None when ``command`` can run here; else the one line saying which extra it needs.
    ``modules``: the ones this command needs (default: every key module of ``extra``)."""
    missing = missing_modules(EXTRA_MODULES[extra] if modules is None else modules)
    if not missing:
        return None
    return f"{command} needs the '{extra}' extra: {install_line(extra)} (missing: {', '.join(missing)})"
