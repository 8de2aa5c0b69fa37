"""Git-style text diffs: split per file, drop what grading must not apply, normalise.

The grader applies only the agent's *text* changes to *source* files: binary
patches, bytecode and test files (by name, or touched by the task's test_patch)
are dropped so an agent can neither plant a .pyc nor rewrite the hidden tests.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

_HEADER = re.compile(r"^diff --git a/(.*?) b/(.*)$")
_TEST_NAME = re.compile(r"(^|/)(tests?|testing)/|(^|/)test_[^/]*\.py$|_tests?\.py$|(^|/)conftest\.py$")
_BYTECODE = re.compile(r"\.py[co]$|(^|/)__pycache__/")


@dataclass(frozen=True)
class FileDiff:
    old_path: str
    new_path: str
    text: str

    @property
    def paths(self) -> set[str]:
        return {p for p in (self.old_path, self.new_path) if p != "/dev/null"}

    @property
    def binary(self) -> bool:
        return "\nGIT binary patch\n" in self.text or re.search(r"^Binary files .* differ$", self.text, re.M) is not None


def split_diff(diff: str) -> list[FileDiff]:
    """Split a ``git diff`` into per-file blocks (text before the first header is dropped)."""
    blocks: list[FileDiff] = []
    current: list[str] = []
    paths: tuple[str, str] | None = None
    for line in diff.splitlines(keepends=True):
        m = _HEADER.match(line.rstrip("\n"))
        if m:
            if paths is not None:
                blocks.append(FileDiff(paths[0], paths[1], "".join(current)))
            paths, current = (m.group(1), m.group(2)), [line]
        elif paths is not None:
            current.append(line)
    if paths is not None:
        blocks.append(FileDiff(paths[0], paths[1], "".join(current)))
    return blocks


def is_test_path(path: str) -> bool:
    return _TEST_NAME.search(path) is not None


def touched_paths(diff: str) -> set[str]:
    return {p for block in split_diff(diff) for p in block.paths}


def filter_diff(diff: str, protected: set[str] = frozenset()) -> tuple[str, list[str]]:
    """The applicable part of an agent diff, and the paths that were dropped (with why)."""
    kept: list[str] = []
    dropped: list[str] = []
    for block in split_diff(diff):
        path = block.new_path if block.new_path != "/dev/null" else block.old_path
        reason = ("binary" if block.binary else "bytecode" if any(_BYTECODE.search(p) for p in block.paths)
                  else "test file" if any(is_test_path(p) or p in protected for p in block.paths) else None)
        if reason:
            dropped.append(f"{path} ({reason})")
        else:
            kept.append(block.text if block.text.endswith("\n") else block.text + "\n")
    return "".join(kept), dropped


def normalize_diff(diff: str) -> str:
    """Drop volatile lines (``index`` hashes), unify line endings; used for cache keys."""
    lines = [ln for ln in diff.replace("\r\n", "\n").split("\n") if not ln.startswith("index ")]
    return "\n".join(lines).strip("\n") + "\n"


def diff_key(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()
