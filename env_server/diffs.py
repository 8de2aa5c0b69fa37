"""Git-style text diffs: split per file, drop what grading must not apply, normalise.

The grader applies only the agent's *text* changes to *source* files. Dropped,
each with its reason: binary patches, bytecode, symlinks, test files (by name,
or touched by the task's test_patch), test-runner configuration (pytest/tox/
setup.cfg/pyproject files, conftest.py anywhere), modules that would shadow the
test runner or hook interpreter start-up (``pytest``, ``_pytest``, ``pluggy``,
``py``, ``sitecustomize``, ``usercustomize``, ``*.pth``) and package metadata
that could register plugins (``*.dist-info``, ``*.egg-info``).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

_HEADER = re.compile(r"^diff --git a/(.*?) b/(.*)$")
_TEST_NAME = re.compile(r"(^|/)(tests?|testing)/|(^|/)test_[^/]*\.py$|_tests?\.py$|(^|/)conftest\.py$")
_BYTECODE = re.compile(r"\.py[co]$|(^|/)__pycache__/")
_RUNNER_CONFIG = re.compile(r"(^|/)(pytest\.ini|\.pytest\.ini|tox\.ini|setup\.cfg|pyproject\.toml|conftest\.py)$")
# Top-level names of the test runner and of interpreter start-up hooks: a module or
# package with one of these names anywhere could be imported instead of the real one.
RUNNER_MODULES = ("pytest", "_pytest", "pluggy", "py", "iniconfig", "sitecustomize", "usercustomize")
_SHADOW = re.compile(r"(^|/)(%s)(\.py|/)" % "|".join(re.escape(m) for m in RUNNER_MODULES))
_STARTUP = re.compile(r"\.pth$|(^|/)[^/]+\.(dist-info|egg-info|egg-link)(/|$)")


@dataclass(frozen=True)
class FileDiff:
    old_path: str
    new_path: str
    text: str

    @property
    def paths(self) -> set[str]:
        return {p for p in (self.old_path, self.new_path) if p != "/dev/null"}

    @property
    def symlink(self) -> bool:
        return re.search(r"^(new file mode|new mode|old mode|deleted file mode|index \S+) 120000$", self.text, re.M) is not None

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


def drop_reason(block: FileDiff, protected: set[str] = frozenset(), runner: tuple[str, ...] = ()) -> str | None:
    """Why ``block`` must not reach the grading tree (None: it is applied).

    ``runner``: paths (a trailing ``/``: folders) of a harness's own test runner inside
    the repository, e.g. ``django/test/``.
    """
    paths = block.paths
    if block.binary:
        return "binary"
    if any(_BYTECODE.search(p) for p in paths):
        return "bytecode"
    if block.symlink:
        return "symlink"
    if any(_RUNNER_CONFIG.search(p) for p in paths):
        return "test-runner configuration"
    if any(_SHADOW.search(p) for p in paths):
        return "shadows the test runner"
    if any(_STARTUP.search(p) for p in paths):
        return "interpreter start-up or package metadata"
    if any(is_test_path(p) or p in protected for p in paths):
        return "test file"
    if any(p == r or (r.endswith("/") and p.startswith(r)) for p in paths for r in runner):
        return "the harness's test runner"
    return None


def filter_diff(diff: str, protected: set[str] = frozenset(),
                runner: tuple[str, ...] = ()) -> tuple[str, list[str]]:
    """The applicable part of an agent diff, and the paths that were dropped (``"path (reason)"``)."""
    kept: list[str] = []
    dropped: list[str] = []
    for block in split_diff(diff):
        path = block.new_path if block.new_path != "/dev/null" else block.old_path
        reason = drop_reason(block, protected, runner)
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
