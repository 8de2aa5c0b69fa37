"""One cached venv per RL framework, with this project installed from a snapshot of the tree.

Each framework's real package from the index is installed into its own venv under the
project's gitignored ``.cache/framework-venvs/<name>`` together with this project's client
(``<snapshot>[client]``: websockets + httpx), never into the project's venv (whose torch /
transformers / trl pins must not move). The venv is built once; when the project's sources
change, only the project is reinstalled (``--no-deps``, seconds), so the adapters under test
are always the tree's. A venv that cannot be built fails the test under CI (``CI=true`` or
``SWE_REQUIRE_<FRAMEWORK>=1``: ``missing`` of tests/support/requirements.py) and skips it elsewhere,
with pip's words.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from support.requirements import missing

ROOT = Path(__file__).resolve().parents[2]
VENVS = ROOT / ".cache" / "framework-venvs"
READY = ".framework-ready"  # written last: its content (requirements + python) marks a complete venv
INSTALLED = ".project-digest"  # the digest of the project snapshot installed in the venv
PROJECT_PARTS = ("pyproject.toml", "README.md", "contract", "env_client", "env_server", "sandbox", "task_factory",
                 "trainer_client", "verifier")
PIP_TIMEOUT_S = 480  # under pytest-timeout's 600 s per test: a slow index fails with pip's words


def _files() -> list[Path]:
    out = []
    for part in PROJECT_PARTS:
        path = ROOT / part
        if path.is_file():
            out.append(path)
        elif path.is_dir():
            out += sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                          and p.suffix != ".pyc")
    return out


def project_digest() -> str:
    digest = hashlib.sha256()
    for path in _files():
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _snapshot(dest: Path) -> Path:
    """A copy of what the project's wheel is built from (building in the tree would write build/ there)."""
    for path in _files():
        target = dest / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    return dest


def _pip(python: Path, args: list[str], part: str, what: str) -> None:
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONNOUSERSITE": "1"}
    env.pop("PYTHONPATH", None)
    try:
        proc = subprocess.run([str(python), "-m", "pip", *args], capture_output=True, text=True,
                              timeout=PIP_TIMEOUT_S, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        missing(part, f"{what}: {exc}")
    if proc.returncode != 0:
        text = proc.stdout + proc.stderr
        missing(part, f"{what} exited {proc.returncode}:\n{text[-2000:]}")


def framework_python(name: str, requirements: list[str], part: str) -> Path:
    """The python of ``.cache/framework-venvs/<name>``: ``requirements`` + this project's
    ``[client]`` extra, built once under a file lock; the project reinstalled when it changed."""
    venv = VENVS / name
    python = venv / "bin" / "python"
    stamp = "\n".join([*requirements, sys.version]) + "\n"
    VENVS.mkdir(parents=True, exist_ok=True)
    with open(VENVS / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent test processes build it once
        digest = project_digest()
        ready = venv / READY
        fresh = not (ready.is_file() and ready.read_text() == stamp and python.exists())
        if not fresh and (venv / INSTALLED).is_file() and (venv / INSTALLED).read_text() == digest:
            return python
        with tempfile.TemporaryDirectory(prefix="swe-openenv-src-") as tmp:
            src = _snapshot(Path(tmp))
            if fresh:
                shutil.rmtree(venv, ignore_errors=True)
                try:
                    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True,
                                   timeout=120)
                except (OSError, subprocess.SubprocessError) as exc:
                    shutil.rmtree(venv, ignore_errors=True)
                    missing(part, f"cannot create the venv {venv}: {exc}")
                try:
                    _pip(python, ["install", "--quiet", *requirements, f"{src}[client]"], part,
                         f"pip install {' '.join(requirements)} <project>[client] into {venv}")
                except BaseException:
                    shutil.rmtree(venv, ignore_errors=True)
                    raise
                ready.write_text(stamp)
            else:
                _pip(python, ["install", "--quiet", "--no-deps", "--force-reinstall", str(src)], part,
                     f"pip install --no-deps <project> into {venv}")
        (venv / INSTALLED).write_text(digest)
        return python


def run_script(python: Path, script: Path, args: list[str], cwd: Path, timeout_s: float = 540,
               env: dict[str, str] | None = None) -> dict:
    """Run ``script`` with a framework venv's python (no PYTHONPATH: only what that venv
    installed is importable) and return the JSON object its last stdout line holds."""
    import json

    base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([str(python), str(script), *args], cwd=cwd, env={**base, **(env or {})},
                          capture_output=True, text=True, timeout=timeout_s)
    assert proc.returncode == 0, f"{script.name} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def wait_no_sessions(server, timeout_s: float = 15.0) -> list[str]:
    """The server's sessions still open after waiting up to ``timeout_s`` for all to close."""
    import time

    deadline = time.monotonic() + timeout_s
    while server.service.sessions and time.monotonic() < deadline:
        time.sleep(0.05)
    return list(server.service.sessions)
