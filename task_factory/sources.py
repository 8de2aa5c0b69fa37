"""Fetch a pinned sdist with pip (cached) and unpack it into a pristine source tree."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from .models import PackageSpec


class TaskgenError(RuntimeError):
    """An infrastructure failure of the task builder (download, venv, git)."""


# Build artefacts in sdists that are not the project's source.
_DROP_DIRS = ("__pycache__", ".pytest_cache")
_DROP_SUFFIXES = (".egg-info", ".pyc")


def download_sdist(spec: PackageSpec, cache_dir: Path) -> Path:
    """The sdist archive of ``spec`` under ``cache_dir/sdists/<key>/``; downloads it once."""
    dest = cache_dir / "sdists" / spec.key
    found = _archives(dest)
    if not found:
        dest.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
               "--disable-pip-version-check", f"{spec.name}=={spec.version}", "-d", str(dest)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        found = _archives(dest)
        if proc.returncode != 0 or not found:
            raise TaskgenError(f"pip download {spec.name}=={spec.version} failed: {proc.stderr.strip()[-800:]}")
    return found[0]


def _archives(d: Path) -> list[Path]:
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir() if p.name.endswith((".tar.gz", ".zip", ".tgz")))


def pristine_tree(spec: PackageSpec, cache_dir: Path) -> Path:
    """Unpacked sdist (top folder stripped, build artefacts dropped), cached under ``cache_dir/src``."""
    dest = cache_dir / "src" / spec.key
    marker = dest.with_name(dest.name + ".complete")
    if marker.exists() and dest.is_dir():
        return dest
    archive = download_sdist(spec, cache_dir)
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            for name in zf.namelist():
                if name.startswith("/") or ".." in Path(name).parts:
                    raise TaskgenError(f"unsafe member {name!r} in {archive.name}")
            zf.extractall(tmp)
    else:
        with tarfile.open(archive) as tf:
            tf.extractall(tmp, filter="data")
    tops = list(tmp.iterdir())
    root = tops[0] if len(tops) == 1 and tops[0].is_dir() else tmp
    _scrub(root)
    shutil.rmtree(dest, ignore_errors=True)
    if root is tmp:
        tmp.rename(dest)
    else:
        root.rename(dest)
        shutil.rmtree(tmp)
    for f in spec.source_files + spec.test_paths:
        if not (dest / f).exists():
            raise TaskgenError(f"{spec.key}: {f} missing from the sdist")
    marker.write_text(archive.name + "\n")
    return dest


def _scrub(root: Path) -> None:
    for p in sorted(root.rglob("*"), reverse=True):
        if p.name in _DROP_DIRS or p.name.endswith(_DROP_SUFFIXES):
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink()
