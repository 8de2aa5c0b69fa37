"""Cut the change between two release trees into the library patch and the test patch.

Both trees become commits of one work repository (the earlier one is the task's
base). Each changed path goes to exactly one side, by the grader's own rule
(``verifier.diffs``): test files (by name, under the package's test paths, or any
``conftest.py``) make the ``test_patch``; files under the package's library paths
make the ``patch``; everything else (docs, changelog, packaging, CI) is left out.
Version strings bumped by the release are put back first, so the gold patch holds
only the maintainers' code changes.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

from verifier.diffs import drop_reason, is_test_path, split_diff

from . import gitrepo
from .models import MineSpec, ReleaseSplit

_VERSION_LINE = re.compile(r"^\s*(__version__|__version_info__|__version_tuple__|version|version_info|version_tuple"
                           r"|VERSION)\s*(?::[^=]*)?=(?!=)")


def side(path: str, spec: MineSpec) -> str:
    """"test", "library" or "other" for a repo-relative path."""
    def under(roots: tuple[str, ...]) -> bool:
        return any(path == r.rstrip("/") or path.startswith(r.rstrip("/") + "/") for r in roots)

    if is_test_path(path) or under(spec.test_paths):
        return "test"
    if under(spec.library):
        return "library"
    return "other"


def restore_versions(base_tree: Path, later_tree: Path, spec: MineSpec, to_version: str) -> list[str]:
    """In ``later_tree``'s library files, put back version assignments that name ``to_version``.

    A line like ``__version__ = "7.2.2"`` becomes the earlier release's line for the same
    name (when that file has exactly one). Returns the files changed.
    """
    tuple_form = "(" + ", ".join(to_version.split("."))
    changed = []
    for root in spec.library:
        top = later_tree / root
        files = [top] if top.is_file() else sorted(top.rglob("*.py")) if top.is_dir() else []
        for f in files:
            rel = f.relative_to(later_tree)
            old = base_tree / rel
            if not old.is_file():
                continue
            new_lines = f.read_text(encoding="utf-8", errors="surrogateescape").split("\n")
            old_lines = old.read_text(encoding="utf-8", errors="surrogateescape").split("\n")
            edited = False
            for i, line in enumerate(new_lines):
                m = _VERSION_LINE.match(line)
                if not m or (to_version not in line and tuple_form not in line):
                    continue
                same = [ln for ln in old_lines if (o := _VERSION_LINE.match(ln)) and o.group(1) == m.group(1)]
                if len(same) == 1 and same[0] != line:
                    new_lines[i], edited = same[0], True
            if edited:
                f.write_text("\n".join(new_lines), encoding="utf-8", errors="surrogateescape")
                changed.append(str(rel))
    return changed


def split_release(base_tree: Path, later_tree: Path, work: Path, spec: MineSpec, from_version: str,
                  to_version: str) -> ReleaseSplit:
    """Commit both trees in ``work`` (replaced) and cut the change into patch and test_patch."""
    base = gitrepo.init_clean(base_tree, work, f"Import {spec.name} {from_version} from its sdist")
    with tempfile.TemporaryDirectory(prefix="taskgen-later-") as tmp:
        later_copy = Path(tmp) / "tree"
        shutil.copytree(later_tree, later_copy, symlinks=True)
        restore_versions(base_tree, later_copy, spec, to_version)
        later = gitrepo.commit_tree(work, base, later_copy, f"{spec.name} {to_version} (version strings kept)")
    sides: dict[str, list[str]] = {"test": [], "library": [], "other": []}
    lines: dict[str, int] = {}
    binary: list[str] = []
    numstat = gitrepo.git(work, "diff", "--numstat", "--no-renames", "-z", base, later)
    for entry in numstat.split("\0"):
        if not entry.strip():
            continue
        added, deleted, path = entry.split("\t", 2)
        kind = side(path, spec)
        sides[kind].append(path)
        if added == "-" and kind != "other":
            binary.append(path)
        lines[path] = (int(added) if added != "-" else 0) + (int(deleted) if deleted != "-" else 0)

    def diff(paths: list[str]) -> str:
        if not paths:
            return ""
        return gitrepo.git(work, "diff", "--no-color", "--no-ext-diff", "--no-renames", base, later, "--", *paths)

    return ReleaseSplit(
        base_commit=base, later_commit=later, patch=diff(sides["library"]), test_patch=diff(sides["test"]),
        patch_files=sides["library"], test_files=sides["test"], other_files=sides["other"],
        patch_lines=sum(lines[p] for p in sides["library"]), test_patch_lines=sum(lines[p] for p in sides["test"]),
        binary=binary,
    )


def ungradable(split: ReleaseSplit) -> list[str]:
    """Patch files the grader would drop from a submission (so the gold patch could never pass)."""
    protected = set(split.test_files)
    return [f"{b.new_path} ({why})" for b in split_diff(split.patch) if (why := drop_reason(b, protected))]
