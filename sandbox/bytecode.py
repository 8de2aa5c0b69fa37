"""The bytecode of the sandbox's read-only Python environment, for the jail's private pycache prefix.

Every Python process in a sandbox writes and reads bytecode only under a private prefix
(``PYTHONPYCACHEPREFIX=/tmp/.pycache``): bytecode in the workspace is never read, so no cached
or planted ``.pyc`` can stand in for the source the agent sees (``tests/sandbox/test_bytecode.py``).
With an empty prefix, though, each sandbox's first Python process compiled every module it
imported, the standard library and the task environment's packages included: about 1.4 s of a
grading's test run went to compiling pytest and what it imports (``bench/bench_grading.py``), and
so did the first ``python`` command of every episode.

The bwrap backend therefore starts the prefix with a read-only lower layer (an overlay: what
Python writes goes to the session's own upper layer, hidden from its shells): a tree of symlinks,
one per ``.pyc`` that the environment itself holds beside its sources, at the path Python looks
for it under the prefix, pointing to where the sandbox sees that ``.pyc``. Only the task's
environment (its ``site-packages``) and its interpreter's standard library are mirrored, never the
workspace: those files are readable in the sandbox anyway, read-only, and Python checks each
against its source's size and modification time before it uses it (a stale one is compiled anew).
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import uuid
from pathlib import Path

from .runtime import environment_libs, environment_pycs  # the one walk, also run in the docker jail


def environment_roots(venv: Path | None, venv_seen_as: str | None, base_prefix: Path | None
                      ) -> list[tuple[Path, str, bool]]:
    """(host directory, where the sandbox sees it, is a standard library) for the environment's
    ``site-packages`` (``venv`` is bound at ``venv_seen_as``) and its interpreter's standard library
    (bound at the same path)."""
    if venv is None or venv_seen_as is None:
        venv = None
    libs = environment_libs(str(venv) if venv is not None else None,
                            str(base_prefix) if base_prefix is not None else None)
    return [(Path(d), d if std else venv_seen_as + d[len(str(venv)):], std) for d, std in libs]


def bytecode_tree(cache: Path, roots: list[tuple[Path, str, bool]]) -> Path | None:
    """The symlink tree for ``roots`` (``environment_roots``), built once per machine under ``cache``
    and kept per process while the roots are unchanged; None when they hold no bytecode."""
    stamp = tuple((str(p), seen, std, _mtime(p)) for p, seen, std in roots)
    return _tree(cache, stamp)


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


@functools.lru_cache(maxsize=32)
def _tree(cache: Path, stamp: tuple[tuple[str, str, bool, int], ...]) -> Path | None:
    entries = sorted(e for host, seen, std, _ in stamp for e in environment_pycs(host, seen, std))
    if not entries:
        return None
    digest = hashlib.sha256("\0".join(f"{a}\0{b}" for a, b in entries).encode()).hexdigest()[:16]
    target = cache / "pycache" / f"tree-{digest}"
    if target.is_dir():
        return target
    partial = target.with_name(f"{target.name}.{uuid.uuid4().hex}.partial")
    try:
        made: set[str] = set()
        for link, points_to in entries:
            folder = os.path.dirname(link)
            if folder not in made:
                os.makedirs(partial / folder, exist_ok=True)
                made.add(folder)
            os.symlink(points_to, partial / link)
        try:
            os.rename(partial, target)  # whole or not at all: another process may have made it meanwhile
        except OSError:
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target
