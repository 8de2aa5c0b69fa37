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

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

from support.requirements import missing

ROOT = Path(__file__).resolve().parents[2]
VENVS = ROOT / ".cache" / "openenv-venvs"
READY = ".openenv-ready"  # written last: its presence (and content) marks a complete venv
PIP_TIMEOUT_S = 480  # under pytest-timeout's 600 s per test: a slow index fails with pip's words


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONNOUSERSITE": "1"})


def _tail(text: str, n: int = 2000) -> str:
    return text if len(text) <= n else "..." + text[-n:]


def build_venv(name: str, requirement: str) -> Path:
    """``.cache/openenv-venvs/<name>`` with ``requirement`` installed: built once (under a file lock)."""
    venv = VENVS / name
    python = venv / "bin" / "python"
    stamp = f"{requirement}\n{sys.version}\n"
    VENVS.mkdir(parents=True, exist_ok=True)
    with open(VENVS / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent test processes build it once
        marker = venv / READY
        if marker.is_file() and marker.read_text() == stamp and python.exists():
            return python
        shutil.rmtree(venv, ignore_errors=True)
        steps = [("python -m venv", [sys.executable, "-m", "venv", str(venv)]),
                 (f"pip install {requirement}", [str(python), "-m", "pip", "install", "--quiet", requirement])]
        for what, cmd in steps:
            try:
                proc = _run(cmd, PIP_TIMEOUT_S)
            except (OSError, subprocess.TimeoutExpired) as exc:
                shutil.rmtree(venv, ignore_errors=True)
                missing("openenv", f"cannot build the {requirement} venv in {venv}: {what}: {exc}")
            if proc.returncode != 0:
                shutil.rmtree(venv, ignore_errors=True)
                missing("openenv", f"cannot build the {requirement} venv in {venv}: {what} exited "
                        f"{proc.returncode}:\n{_tail(proc.stdout + proc.stderr)}")
        marker.write_text(stamp)
        return python

