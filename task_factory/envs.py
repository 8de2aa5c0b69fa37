"""Per-package test environments: a venv with pinned pytest, without the package.

The package itself is never installed (that would put the un-bugged code on the
agent's import path). Instead ``_swe_workspace.pth`` puts the sandbox's
workspace import root on ``sys.path``. The venv is built from the system
interpreter, which the sandbox sees read-only, and its scripts use
``#!/usr/bin/env python`` so the venv works wherever it is mounted.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .cache import ensure_entry, locked
from .models import PackageSpec
from .packages import PYTEST_REQUIREMENTS
from .sources import TaskgenError

WORKSPACE = "/workspace"
PTH_NAME = "_swe_workspace.pth"
ENV_RECIPE = "bytecode-1"  # part of a venv's cache key: bump when how a venv is made changes


def base_python() -> str:
    """Interpreter task venvs are built from: $SWE_OPENENV_TASK_PYTHON, else the system python3."""
    explicit = os.environ.get("SWE_OPENENV_TASK_PYTHON")
    if explicit:
        return explicit
    found = shutil.which("python3", path=os.defpath) or sys._base_executable  # type: ignore[attr-defined]
    return os.path.realpath(found)


def _run(cmd: list[str], what: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise TaskgenError(f"{what} failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()[-800:]}")
    return proc.stdout


def requirements(spec: PackageSpec) -> list[str]:
    return list(PYTEST_REQUIREMENTS) + list(spec.test_deps)


def _wheels(reqs: list[str], cache_dir: Path) -> Path:
    """Download the pinned wheels once into ``cache_dir/wheels`` (under its lock; each wheel renamed into place)."""
    wheels = cache_dir / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)

    def missing() -> list[str]:
        have = {p.name.split("-")[0].lower().replace("_", "-") + "==" + p.name.split("-")[1]
                for p in wheels.glob("*.whl")}
        return [r for r in reqs if r.lower().replace("_", "-") not in have]

    if missing():
        with locked(wheels):
            todo = missing()
            if todo:
                with tempfile.TemporaryDirectory(prefix=".wheels.", dir=wheels.resolve().parent) as tmp:
                    _run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                          "--no-deps", "--only-binary", ":all:", "-d", tmp, *todo], f"pip download {todo}")
                    for wheel in Path(tmp).glob("*.whl"):
                        os.replace(wheel, wheels.resolve() / wheel.name)
    return wheels


def cached_env(spec: PackageSpec, cache_dir: Path) -> Path:
    """The package's venv under ``cache_dir/envs``, built once per (requirements, interpreter): in a
    private folder, renamed into place under the entry's lock (``cache.ensure_entry``), so concurrent
    runs on one cache never use a venv another is building or replacing."""
    python = base_python()
    version = _run([python, "-c", "import sys; print(sys.version.split()[0])"], "probe python").strip()
    reqs = requirements(spec)
    digest = hashlib.sha256("\n".join([python, version, spec.import_root, *reqs, ENV_RECIPE]).encode()
                            ).hexdigest()[:12]

    def make(work: Path) -> tuple[Path, str]:
        wheels = _wheels(reqs, cache_dir)
        env = work / "venv"
        _run([python, "-m", "venv", "--without-pip", str(env)], "create venv")
        _run([sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "install", "--quiet",
              "--disable-pip-version-check", "--no-index", "--no-deps", "--no-compile", "--find-links",
              str(wheels), *reqs], f"install {reqs}")
        purelib = Path(_run([str(env / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                            "probe site-packages").strip())
        root = WORKSPACE if spec.import_root in ("", ".") else f"{WORKSPACE}/{spec.import_root.strip('/')}"
        (purelib / PTH_NAME).write_text(root + "\n")
        _portable_scripts(env / "bin")
        # Bytecode beside the sources, by the venv's own interpreter: the sandbox's bytecode layer links
        # it (sandbox/bytecode.py), so no session compiles pytest again (0.5 s of CPU in every grading's
        # test run and in every episode's first python, when these venvs held none).
        _run([str(env / "bin" / "python"), "-m", "compileall", "-q", str(purelib)], "compile site-packages")
        return env, " ".join(reqs) + "\n"

    return ensure_entry(cache_dir / "envs" / f"{spec.key}-{digest}", make)


def _portable_scripts(bindir: Path) -> None:
    """Point console scripts at whichever ``python`` is first on PATH (the venv's own)."""
    for script in bindir.iterdir():
        if script.is_symlink() or not script.is_file():
            continue
        data = script.read_bytes()
        if data.startswith(b"#!") and b"python" in data.split(b"\n", 1)[0]:
            rest = data.split(b"\n", 1)[1] if b"\n" in data else b""
            script.write_bytes(b"#!/usr/bin/env python\n" + rest)


def install_env(spec: PackageSpec, cache_dir: Path, dest: Path) -> Path:
    """Copy the cached venv to ``dest`` (replacing what is there) and return it."""
    src = cached_env(spec, cache_dir)
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, dest, symlinks=True)
    return dest
