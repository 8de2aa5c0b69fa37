"""Helpers of the OpenEnv client tests (a uniquely named module: ``conftest`` names collide across
test directories): one venv per OpenEnv client release (the server on loopback is tests/support/servers.py's).

Each client generation is installed, unmodified, into its own venv under the project's
gitignored ``.cache/openenv-venvs/<name>`` (built once, then reused) and run from there in a
subprocess: the two releases both own the ``openenv`` import name, so they cannot share the
project's venv. A venv that cannot be built fails the test under CI (``CI=true`` or
``SWE_REQUIRE_OPENENV=1``: ``missing("openenv", ...)`` of tests/support/requirements.py) and skips it
elsewhere, with pip's reason.
"""

from __future__ import annotations

import sys
from pathlib import Path

from support.venvs import cached_venv, pip

ROOT = Path(__file__).resolve().parents[2]
VENVS = ROOT / ".cache" / "openenv-venvs"
READY = ".openenv-ready"  # written last: its presence (and content) marks a complete venv


def build_venv(name: str, requirement: str) -> Path:
    """``.cache/openenv-venvs/<name>`` with ``requirement`` installed: built once (support.venvs)."""
    venv = VENVS / name

    def install(python: Path) -> None:
        pip(python, ["install", "--quiet", requirement], "openenv",
            f"cannot build the {requirement} venv in {venv}: pip install {requirement}")

    return cached_venv(venv, part="openenv", ready=READY, stamp=f"{requirement}\n{sys.version}\n", install=install)
