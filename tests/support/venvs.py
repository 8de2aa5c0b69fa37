"""The one builder of the suite's cached venvs (framework, OpenEnv client, client-only, docs' client line).

`cached_venv` builds a venv once, under a file lock (``<parent>/<name>.lock``: concurrent test
processes build it once), and marks it complete by writing ``ready`` last with ``stamp`` (what the
venv was built for: requirements, the Python version). A venv whose ready file does not hold
``stamp`` (or has no python) is a fresh build: the old one removed (and with ``prune_others``
its siblings of other keys), ``python -m venv``, then ``install``. Where ``sources`` is given
(a stamp file and the digest of the project's sources), a complete venv whose stamp differs gets
only ``reinstall`` (the project, ``--no-deps``: seconds). A venv that cannot be built fails
the test under CI and skips it elsewhere (``missing(part, ...)`` of support.requirements), with
pip's words. Each caller keeps its cache folder and stamp files where they always were.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

from support.requirements import missing

PIP_TIMEOUT_S = 480  # under pytest-timeout's 600 s per test: a slow index fails with pip's words


def clean_env() -> dict[str, str]:
    """The environment pip and a venv's python run with: no PYTHONPATH, no VIRTUAL_ENV, no user site."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONNOUSERSITE="1")
    return env


def pip(python: Path, args: list[str], part: str, what: str, cwd: Path | None = None) -> None:
    """``python -m pip ARGS``; a failure (or a timeout) is ``missing(part, what ...)`` with pip's words."""
    try:
        proc = subprocess.run([str(python), "-m", "pip", *args], capture_output=True, text=True,
                              timeout=PIP_TIMEOUT_S, env=clean_env(), cwd=cwd)
    except (OSError, subprocess.TimeoutExpired) as exc:
        missing(part, f"{what}: {exc}")
    if proc.returncode != 0:
        missing(part, f"{what} exited {proc.returncode}:\n{(proc.stdout + proc.stderr)[-2000:]}")


def cached_venv(venv: Path, *, part: str, ready: str, stamp: str, install: Callable[[Path], None],
                sources: tuple[str, str] | None = None, reinstall: Callable[[Path], None] | None = None,
                prune_others: bool = False) -> Path:
    """The python of `venv`, built (or its project reinstalled) as the module says."""
    python = venv / "bin" / "python"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        marker = venv / ready
        complete = marker.is_file() and marker.read_text() == stamp and python.exists()
        if complete:
            if sources is None:
                return python
            name, digest = sources
            if (venv / name).is_file() and (venv / name).read_text() == digest:
                return python
            reinstall(python)
            (venv / name).write_text(digest)
            return python
        if prune_others:
            for old in venv.parent.iterdir():  # venvs of older keys
                if old.is_dir() and old.name != venv.name:
                    shutil.rmtree(old, ignore_errors=True)
                    old.with_suffix(".lock").unlink(missing_ok=True)
        shutil.rmtree(venv, ignore_errors=True)
        try:
            made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True,
                                  timeout=120, env=clean_env())
            error = None if made.returncode == 0 else f"exited {made.returncode}: {made.stderr[-2000:]}"
        except (OSError, subprocess.SubprocessError) as exc:
            error = str(exc)
        if error is not None:
            shutil.rmtree(venv, ignore_errors=True)
            missing(part, f"cannot create the venv {venv}: python -m venv {error}")
        try:
            install(python)
        except BaseException:
            shutil.rmtree(venv, ignore_errors=True)  # never a half-built venv behind
            raise
        marker.write_text(stamp)
        if sources is not None:
            (venv / sources[0]).write_text(sources[1])
        return python


def venv_step(venv: Path, marker: str, stamp: str, run: Callable[[], None]) -> None:
    """One more install step into a built `venv` (e.g. a package with ``--no-deps``), under the
    venv's lock: run once, then ``venv/marker`` holds `stamp`."""
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = venv / marker
        if not (path.is_file() and path.read_text() == stamp):
            run()
            path.write_text(stamp)
