"""`pip install -e ".[client]"` alone, into a fresh venv, drives a full episode against
the real server: no torch, no server, no trainer parts.

The venv lives under the project's gitignored `.cache/client-venv/<hash of pyproject.toml>`
(built once per dependency set, under a file lock); the package itself is reinstalled there
whenever the client's sources change. pip takes its index from the machine's own
configuration. A venv that cannot be built fails the test under CI (`CI=true` or
`SWE_REQUIRE_CLIENT_VENV=1`: `missing("client-venv", ...)`) and skips it elsewhere.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from requirements import missing

from .conftest import INSTANCE

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PIP_TIMEOUT_S = 480  # under pytest-timeout's 600 s: a slow index fails with pip's words


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _run(cmd: list[str], timeout: float, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONNOUSERSITE="1")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)


def _pip(python: Path, what: str, *args: str) -> None:
    try:
        proc = _run([str(python), "-m", "pip", "install", "--quiet", *args], PIP_TIMEOUT_S, cwd=ROOT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        missing("client-venv", f"pip install {what}: {exc}")
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-2000:]
        missing("client-venv", f"pip install {what} exited {proc.returncode}:\n{tail}")


def client_venv() -> Path:
    """The python of `.cache/client-venv/<pyproject hash>` with this checkout's `[client]` install."""
    deps = _digest([ROOT / "pyproject.toml"])
    venv = ROOT / ".cache" / "client-venv" / deps
    python = venv / "bin" / "python"
    sources = _digest([*ROOT.glob("contract/**/*.py"), *ROOT.glob("env_client/**/*.py"), *ROOT.glob("env_server/*.py")])
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{deps}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent test processes build it once
        ready, stamp = venv / ".deps-ready", venv / ".sources"
        if not (ready.is_file() and ready.read_text() == sys.version and python.exists()):
            for old in venv.parent.iterdir():  # venvs of older dependency sets
                if old.is_dir() and old.name != deps:
                    shutil.rmtree(old, ignore_errors=True)
                    old.with_suffix(".lock").unlink(missing_ok=True)
            shutil.rmtree(venv, ignore_errors=True)
            proc = _run([sys.executable, "-m", "venv", str(venv)], 120)
            if proc.returncode != 0:
                missing("client-venv", f"python -m venv {venv}: {proc.stderr[-2000:]}")
            _pip(python, f"{ROOT.name}[client]", f"{ROOT}[client]")
            ready.write_text(sys.version)
            stamp.write_text(sources)
        elif not stamp.is_file() or stamp.read_text() != sources:
            _pip(python, f"{ROOT.name} (sources changed)", "--no-deps", "--force-reinstall", str(ROOT))
            stamp.write_text(sources)
    return python


def test_client_extra_alone_runs_a_full_episode(server, tmp_path):
    python = client_venv()
    script = tmp_path / "client_only_episode.py"  # run from outside the repo: only the installed copy
    shutil.copy(Path(__file__).with_name("client_only_episode.py"), script)
    proc = _run([str(python), str(script), server.url, INSTANCE, str(tmp_path)], 300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary == {
        "listing_has_setup_py": True, "reward": 1.0, "done": True, "state_t": 1,
        "trace_kinds": ["reset", "step", "step", "step"], "http_state_t": 2, "export_turns": 3,
        "served_turns": 3, "jsonl_records": 2, "same_messages": True,
        "parquet": "MissingDependencyError: Parquet export needs pyarrow, which is not installed: "
                   "pip install pyarrow (JSONL export needs nothing)",
        "ws_instance": INSTANCE, "loaded_forbidden": []}
