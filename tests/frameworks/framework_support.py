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

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from support.venvs import cached_venv, pip

ROOT = Path(__file__).resolve().parents[2]
VENVS = ROOT / ".cache" / "framework-venvs"
READY = ".framework-ready"  # written last: its content (requirements + python) marks a complete venv
INSTALLED = ".project-digest"  # the digest of the project snapshot installed in the venv
PROJECT_PARTS = ("pyproject.toml", "README.md", "contract", "env_client", "env_server", "sandbox", "task_factory",
                 "trainer_client", "verifier")


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


def framework_python(name: str, requirements: list[str], part: str) -> Path:
    """The python of ``.cache/framework-venvs/<name>``: ``requirements`` + this project's
    ``[client]`` extra, built once (support.venvs); the project reinstalled when it changed."""
    venv = VENVS / name

    def install(python: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="swe-openenv-src-") as tmp:
            src = _snapshot(Path(tmp))
            pip(python, ["install", "--quiet", *requirements, f"{src}[client]"], part,
                f"pip install {' '.join(requirements)} <project>[client] into {venv}")

    def reinstall(python: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="swe-openenv-src-") as tmp:
            src = _snapshot(Path(tmp))
            pip(python, ["install", "--quiet", "--no-deps", "--force-reinstall", str(src)], part,
                f"pip install --no-deps <project> into {venv}")

    return cached_venv(venv, part=part, ready=READY, stamp="\n".join([*requirements, sys.version]) + "\n",
                       install=install, sources=(INSTALLED, project_digest()), reinstall=reinstall)


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
