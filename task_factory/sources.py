"""Fetch a pinned sdist with pip (cached) and unpack it into a pristine source tree."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from .cache import ensure_entry
from .models import PackageSpec


class TaskgenError(RuntimeError):
    """An infrastructure failure of the task builder (download, venv, git)."""


# Build artefacts in sdists that are not the project's source.
_DROP_DIRS = ("__pycache__", ".pytest_cache")
_DROP_SUFFIXES = (".egg-info", ".pyc")


def download_sdist(spec: PackageSpec, cache_dir: Path) -> Path:
    """The sdist archive of ``spec`` under ``cache_dir/sdists/<key>/``; downloads it once (into a private
    folder, renamed into place under the entry's lock: ``cache.ensure_entry``)."""
    dest = cache_dir / "sdists" / spec.key

    def make(work: Path) -> tuple[Path, str]:
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
               "--disable-pip-version-check", f"{spec.name}=={spec.version}", "-d", str(work)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        found = _archives(work)
        if proc.returncode != 0 or not found:
            raise TaskgenError(f"pip download {spec.name}=={spec.version} failed: {proc.stderr.strip()[-800:]}")
        return work, found[0].name + "\n"

    ensure_entry(dest, make, ready=lambda: bool(_archives(dest)))  # an archive there: complete (renamed in whole)
    return _archives(dest)[0]


def _archives(d: Path) -> list[Path]:
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir() if p.name.endswith((".tar.gz", ".zip", ".tgz")))


def pristine_tree(spec: PackageSpec, cache_dir: Path) -> Path:
    """Unpacked sdist (top folder stripped, build artefacts dropped), cached under ``cache_dir/src``
    (unpacked in a private folder, renamed into place under the entry's lock: ``cache.ensure_entry``)."""
    dest = cache_dir / "src" / spec.key

    def make(work: Path) -> tuple[Path, str]:
        archive = download_sdist(spec, cache_dir)
        if archive.name.endswith(".zip"):
            with zipfile.ZipFile(archive) as zf:
                for name in zf.namelist():
                    if name.startswith("/") or ".." in Path(name).parts:
                        raise TaskgenError(f"unsafe member {name!r} in {archive.name}")
                zf.extractall(work)
        else:
            with tarfile.open(archive) as tf:
                tf.extractall(work, filter="data")
        tops = list(work.iterdir())
        root = tops[0] if len(tops) == 1 and tops[0].is_dir() else work
        _scrub(root)
        for f in spec.source_files + spec.test_paths:
            if not (root / f).exists():
                raise TaskgenError(f"{spec.key}: {f} missing from the sdist")
        if root is work:  # no single top folder: the unpacked files move into one of their own
            root = work / f".{spec.key}.tree"
            root.mkdir()
            for item in tops:
                item.rename(root / item.name)
        return root, archive.name + "\n"

    return ensure_entry(dest, make)


def _scrub(root: Path) -> None:
    for p in sorted(root.rglob("*"), reverse=True):
        if p.name in _DROP_DIRS or p.name.endswith(_DROP_SUFFIXES):
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink()
