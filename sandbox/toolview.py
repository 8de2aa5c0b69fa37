"""The read-only system view of a sandbox, with blocked tools *absent*.

Masking a binary by name (bind /dev/null over it) leaves it listable and leaves
its hard-link aliases usable. Instead, every directory of the system tree that
holds a blocked tool (or an alias or a symlink to one) is replaced inside the
sandbox by a *farm*: a directory built once on the host with hard links (or
copies) of all its other entries. The sandbox then binds the system tree
read-only and each farm over its directory. Setuid/setgid files are left out of
farms too: they are useless under no_new_privs and not worth a link on the host.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

SYSTEM_ROOTS = ("/usr", "/opt")
_cache: dict[str, "ToolView"] = {}
_guard = threading.Lock()


@dataclass(frozen=True)
class ToolView:
    # (farm dir on the host, directory it replaces inside the sandbox), in mount order
    farms: tuple[tuple[str, str], ...]
    # subdirectories of replaced directories, bound back over the farm's empty stand-ins
    rebinds: tuple[str, ...]
    blocked_found: tuple[str, ...] = field(default=())


def _scan(roots: tuple[str, ...], blocked: frozenset[str]) -> tuple[set[str], set[tuple[int, int]], list[str]]:
    """Directories holding blocked entries, the blocked inodes, and the blocked paths."""
    hits: list[str] = []
    inodes: set[tuple[int, int]] = set()
    multi_link: dict[tuple[int, int], list[str]] = {}
    symlinks: list[str] = []
    stack = [r for r in roots if os.path.isdir(r) and not os.path.islink(r)]
    while stack:
        d = stack.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            try:
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                    continue
                if e.is_symlink():
                    symlinks.append(e.path)
                    if e.name in blocked:
                        hits.append(e.path)
                    continue
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if st.st_nlink > 1:
                multi_link.setdefault(key, []).append(e.path)
            if e.name in blocked:
                hits.append(e.path)
                inodes.add(key)
    blocked_paths = set(hits)
    for key in inodes:  # hard-link aliases under other names
        blocked_paths.update(multi_link.get(key, []))
    for link in symlinks:  # symlinks that lead to a blocked file
        try:
            real = os.path.realpath(link)
            st = os.stat(real)
        except OSError:
            continue
        if real in blocked_paths or (st.st_dev, st.st_ino) in inodes:
            blocked_paths.add(link)
    return {os.path.dirname(p) for p in blocked_paths}, inodes, sorted(blocked_paths)


def _build_farm(src_dir: str, dest: Path, blocked_paths: set[str], inodes: set[tuple[int, int]]) -> list[str]:
    dest.mkdir(parents=True)
    subdirs = []
    for e in os.scandir(src_dir):
        target = dest / e.name
        if e.path in blocked_paths:
            continue
        if e.is_symlink():
            os.symlink(os.readlink(e.path), target)
        elif e.is_dir(follow_symlinks=False):
            target.mkdir()
            subdirs.append(e.path)
        else:
            st = e.stat(follow_symlinks=False)
            if (st.st_dev, st.st_ino) in inodes or st.st_mode & (stat.S_ISUID | stat.S_ISGID):
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            try:
                os.link(e.path, target)
            except OSError:
                shutil.copy2(e.path, target)
    return subdirs


def tool_view(blocked: tuple[str, ...], cache_dir: Path, roots: tuple[str, ...] = SYSTEM_ROOTS) -> ToolView:
    """Build (once per process and block list) the farms hiding ``blocked``."""
    names = frozenset(blocked)
    key = hashlib.sha256(("\n".join(sorted(names)) + "|" + "|".join(roots)).encode()).hexdigest()[:16]
    with _guard:
        if key in _cache:
            return _cache[key]
        dirs, inodes, blocked_paths = _scan(roots, names)
        base = cache_dir / "toolview"
        base.mkdir(parents=True, exist_ok=True)
        # Built fresh once per process (the host's packages may have changed);
        # earlier farms are left alone: another server may still mount them.
        stage = Path(tempfile.mkdtemp(prefix=f"{key}-", dir=base))
        farms, rebinds = [], []
        for d in sorted(dirs):
            farm = stage / d.lstrip("/")
            rebinds += _build_farm(d, farm, set(blocked_paths), inodes)
            farms.append((str(farm), d))
        view = ToolView(tuple(farms), tuple(rebinds), tuple(blocked_paths))
        _cache[key] = view
        return view
