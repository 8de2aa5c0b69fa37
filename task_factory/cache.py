"""The task factory's shared cache and its one lock discipline: concurrent builds and mines on one cache are safe.

The cache (``$SWE_OPENENV_TASKGEN_CACHE``, else ``~/.cache/swe-openenv/taskgen``) holds entries that
every run reuses (downloaded sdists and wheels, unpacked sources, test venvs, verdicts) and the
folders a run works in (work trees it mutates). The rules, one per kind:

- **An entry is complete or absent** for whoever reads it: it is built under an exclusive lock of its
  own (``flock`` on ``<entry>.lock`` beside it: other processes and other threads wait), into a private
  folder beside it, renamed into place, and marked complete last (``ensure_entry``). A reader that
  finds it complete needs no lock: a complete entry is never changed.
- **A file** (a verdict, a generated config) is written under a private name and renamed over its
  place (``write_atomic``): readers see the old file or the new one, never a part.
- **A work tree is never shared**: each run claims a free slot (``claim_slot``: ``work/<name>``,
  else ``<name>-1`` ...), held by a non-blocking lock for as long as it works there, so two runs never
  wait on each other's trees (nor deadlock over them) and one run always works in the same place.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path


def default_cache_dir() -> Path:
    """$SWE_OPENENV_TASKGEN_CACHE, else ``~/.cache/swe-openenv/taskgen``."""
    env = os.environ.get("SWE_OPENENV_TASKGEN_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "swe-openenv" / "taskgen"


def _lock_file(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock of the cache entry ``path`` (``flock`` on ``<path>.lock``), across processes and
    threads (each holder opens the file itself), released when the block ends or the process dies."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(_lock_file(path), "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def marker_of(dest: Path) -> Path:
    """The file that says ``dest`` is complete: ``<dest>.complete`` beside it, written last."""
    return dest.with_name(dest.name + ".complete")


def ensure_entry(dest: Path, make: Callable[[Path], tuple[Path, str]],
                 ready: Callable[[], bool] | None = None) -> Path:
    """``dest``, built once: where it is not ready (by default: its marker and the folder exist),
    ``make(work)`` builds it in ``work`` (a private folder beside ``dest``) and returns the folder to
    move into place and the marker's text. Under ``dest``'s lock, an incomplete ``dest`` left by a run
    that died is removed first; the build is renamed into place and the marker written last."""
    marker = marker_of(dest)
    is_ready = ready or (lambda: marker.is_file() and dest.is_dir())
    if is_ready():
        return dest
    with locked(dest):
        if is_ready():  # built by another run while this one waited
            return dest
        work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
        try:
            built, text = make(work)
            marker.unlink(missing_ok=True)
            if dest.is_dir() and not dest.is_symlink():
                shutil.rmtree(dest)
            elif dest.exists() or dest.is_symlink():
                dest.unlink()
            os.rename(built, dest)
            write_atomic(marker, text)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return dest


def write_atomic(path: Path, text: str) -> None:
    """Write ``path`` under a private name beside it (the umask's mode, as a plain write) and rename it
    into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def claim_slot(parent: Path, name: str) -> Iterator[Path]:
    """A work folder of this run's own under ``parent``: ``name`` when no other run holds it, else
    ``name-1``, ``name-2`` ... (held by a non-blocking lock until the block ends). What the folder
    holds is the caller's: a slot keeps whatever the last run left there."""
    parent.mkdir(parents=True, exist_ok=True)
    for n in range(1000):
        slot = parent / (name if n == 0 else f"{name}-{n}")
        fh = open(_lock_file(slot), "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            continue
        try:
            yield slot
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
            fh.close()
        return
    raise RuntimeError(f"no free work slot for {name} under {parent}")
