"""Git-style text diffs: split per file, drop what grading must not apply, normalise.

The grader applies only the agent's *text* changes to *source* files. Dropped,
each with its reason: binary patches, bytecode, symlinks, test files (by name,
or touched by the task's test_patch), test-runner configuration (pytest/tox/
setup.cfg/pyproject files, conftest.py anywhere), modules that would shadow the
test runner or hook interpreter start-up (``pytest``, ``_pytest``, ``pluggy``,
``py``, ``sitecustomize``, ``usercustomize``, ``*.pth``) and package metadata
that could register plugins (``*.dist-info``, ``*.egg-info``).

Paths are read the way ``git apply`` reads them, and what git reads is checked:

- lines end at ``\\n`` only (never at the other separators ``str.splitlines`` knows);
  names in ``"..."`` are C-unquoted as git does;
- a block is kept only when every one of its lines is part of the grammar ``git diff``
  writes (the ``diff --git`` line, known extended header lines each at most once,
  ``---``/``+++``, hunks whose line counts hold): no other line can reach ``git apply`` or
  the ``patch`` fallback, which would find patches of their own in "garbage" lines, and
  no name is one the two tools read differently (a name holding a space must end in the
  tab git writes; GNU patch stops at the space otherwise);
- every name a block gives (the ``diff --git`` line, ``---``/``+++``, ``rename``/``copy``
  lines) must be the same for each side, and each is checked against the drop rules; a
  name holding a control character or line separator is ``unparseable path``, one that is
  absolute or holds ``.``, ``..``, an empty component or ``.git`` is ``unsafe path``;
- the drop rules compare names folded (NFKC, case-folded, invisible characters and
  lone combining marks removed), so ``Conftest.py``, ``con\\u200bftest.py`` or a
  full-width ``ｐｙｔｅｓｔ.py`` are dropped like the real names;
- ``filter_diff`` asks git itself (``git apply --numstat -z``, forwards and ``-R``,
  in an empty folder: it reads the patch, never a file) which paths the kept text
  touches; a block git reads differently from the filter is dropped
  (``unparseable path``), and when git cannot say, everything is (fail closed).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
import threading
import unicodedata
from collections import Counter
from dataclasses import dataclass

from sandbox.git import git_argv, git_env

_TEST_NAME = re.compile(r"(^|/)(tests?|testing)/|(^|/)test_[^/]*\.py$|_tests?\.py$|(^|/)conftest\.py$")
_BYTECODE = re.compile(r"\.py[co]$|(^|/)__pycache__/")
_RUNNER_CONFIG = re.compile(r"(^|/)(pytest\.ini|\.pytest\.ini|tox\.ini|setup\.cfg|pyproject\.toml|conftest\.py)$")
# Top-level names of the test runner and of interpreter start-up hooks: a module or
# package with one of these names anywhere could be imported instead of the real one.
RUNNER_MODULES = ("pytest", "_pytest", "pluggy", "py", "iniconfig", "sitecustomize", "usercustomize")
_SHADOW = re.compile(r"(^|/)(%s)(\.py|/)" % "|".join(re.escape(m) for m in RUNNER_MODULES))
STDLIB_MODULES = frozenset(m.lower() for m in sys.stdlib_module_names)
_STARTUP = re.compile(r"\.pth$|(^|/)[^/]+\.(dist-info|egg-info|egg-link)(/|$)")

DEV_NULL = "/dev/null"
UNPARSEABLE_PATCH = "unparseable patch"  # a line outside git's grammar, hunk counts that do not hold, ...
UNPARSEABLE_PATH = "unparseable path"  # names that disagree, bad quoting, control characters, git reads otherwise
UNSAFE_PATH = "unsafe path"  # absolute, "." / ".." / empty components, ".git"

_HEADER_OPS = (  # git's optable order (apply.c parse_git_diff_header); "rename old/new" are old spellings
    ("--- ", "minus"), ("+++ ", "plus"), ("old mode ", "old_mode"), ("new mode ", "new_mode"),
    ("deleted file mode ", "deleted"), ("new file mode ", "new_file"), ("copy from ", "copy_from"),
    ("copy to ", "copy_to"), ("rename old ", "rename_from"), ("rename new ", "rename_to"),
    ("rename from ", "rename_from"), ("rename to ", "rename_to"), ("similarity index ", "similarity"),
    ("dissimilarity index ", "dissimilarity"), ("index ", "index"),
)
_MODE = re.compile(r"[0-7]{6}")
_REGULAR_MODES = frozenset({"100644", "100755", "100664"})
_INDEX = re.compile(r"[0-9a-f]{1,64}\.\.[0-9a-f]{1,64}( [0-7]{6})?")
_PERCENT = re.compile(r"[0-9]{1,3}%")
_HUNK = re.compile(r"@@ -([0-9]+)(?:,([0-9]+))? \+([0-9]+)(?:,([0-9]+))? @@")
_MAX_COUNT = 10 ** 9


@dataclass(frozen=True)
class FileDiff:
    old_path: str  # "/dev/null" for a new file
    new_path: str  # "/dev/null" for a deleted file
    text: str
    names: tuple[str, ...] = ()  # every name the block's lines give (a/ and b/ removed)
    problem: str | None = None  # UNPARSEABLE_PATCH / UNPARSEABLE_PATH: the block cannot be trusted
    is_binary: bool = False
    modes: tuple[str, ...] = ()  # every file mode the block's header lines give
    added: tuple[tuple[int, str], ...] = ()  # (line number in the new file, text) of each added line

    @property
    def paths(self) -> set[str]:
        return {p for p in (self.old_path, self.new_path, *self.names) if p != DEV_NULL}

    @property
    def symlink(self) -> bool:
        return "120000" in self.modes or re.search(
            r"^(new file mode|new mode|old mode|deleted file mode|index \S+) 120000$", self.text, re.M) is not None

    @property
    def binary(self) -> bool:
        return self.is_binary or "\nGIT binary patch\n" in self.text or re.search(
            r"^Binary files .* differ$", self.text, re.M) is not None

    @property
    def display(self) -> str:
        """The block's path for people (``old => new`` for renames and copies; odd characters escaped)."""
        old, new = self.old_path, self.new_path
        if old == new == DEV_NULL:  # no name could be read: show the header's
            return _escape(self.text.split("\n", 1)[0][len("diff --git "):])
        shown = new if old in (new, DEV_NULL) else old if new == DEV_NULL else f"{old} => {new}"
        return _escape(shown)


def _lines(text: str) -> list[str]:
    """``text`` split after each ``\\n`` (git's only line end), ends kept."""
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def split_diff(diff: str) -> list[FileDiff]:
    """Split a ``git diff`` into per-file blocks (text before the first header is dropped).

    A block starts at each line that starts with ``diff --git `` (git's own rule; lines end at
    ``\\n`` only). Each block is parsed as ``git apply`` would: its names, modes, added lines
    and, when it is not a well-formed git patch, ``problem``.
    """
    blocks: list[FileDiff] = []
    current: list[str] | None = None
    for line in _lines(diff):
        if line.startswith("diff --git "):
            if current is not None:
                blocks.append(_parse_block(current))
            current = [line]
        elif current is not None:
            current.append(line)
    if current is not None:
        blocks.append(_parse_block(current))
    return blocks


# --- names -------------------------------------------------------------------------------

_UNQUOTE = {ord("a"): 7, ord("b"): 8, ord("t"): 9, ord("n"): 10, ord("v"): 11, ord("f"): 12, ord("r"): 13,
            ord("\\"): ord("\\"), ord('"'): ord('"')}


def _unquote(text: str) -> tuple[str, str] | None:
    """git's ``unquote_c_style``: (name, what follows the closing quote), or None."""
    raw = text.encode("utf-8", "surrogateescape")
    if not raw.startswith(b'"'):
        return None
    out = bytearray()
    i = 1
    while i < len(raw):
        c = raw[i]
        if c == 0x22:  # closing quote
            return bytes(out).decode("utf-8", "surrogateescape"), raw[i + 1:].decode("utf-8", "surrogateescape")
        if c != 0x5C:
            out.append(c)
            i += 1
            continue
        if i + 1 >= len(raw):
            return None
        e = raw[i + 1]
        if e in _UNQUOTE:
            out.append(_UNQUOTE[e])
            i += 2
        elif 0x30 <= e <= 0x33 and i + 3 < len(raw) and all(0x30 <= d <= 0x37 for d in raw[i + 2:i + 4]):
            out.append(((e - 0x30) << 6) | ((raw[i + 2] - 0x30) << 3) | (raw[i + 3] - 0x30))
            i += 4
        else:
            return None
    return None


def _strip_prefix(name: str, prefix: str) -> str | None:
    return name[len(prefix):] if name.startswith(prefix) and len(name) > len(prefix) else None


def _header_names(rest: str, old: str | None, new: str | None) -> tuple[str, str] | None:
    """The two names of ``diff --git <rest>`` (``a/``, ``b/`` removed), or None.

    ``old``/``new``: what the other header lines say, when they name the file (unquoted,
    space-separated names can then be split unambiguously).
    """
    if rest.startswith('"'):
        first = _unquote(rest)
        if first is None:
            return None
        name_a, tail = first
        if not tail.startswith(" ") or tail[1:2] in ("", " "):
            return None
        tail = tail[1:]
        if tail.startswith('"'):
            second = _unquote(tail)
            if second is None or second[1]:
                return None
            name_b = second[0]
        else:
            name_b = tail
    elif '"' in rest:  # an unquoted name never holds '"': it starts the quoted second name
        cut = rest.index('"')
        if cut < 1 or rest[cut - 1] != " ":
            return None
        second = _unquote(rest[cut:])
        if second is None or second[1]:
            return None
        name_a, name_b = rest[:cut - 1], second[0]
    elif old is not None and new is not None:
        if rest != f"a/{old} b/{new}":
            return None
        return old, new
    else:  # git's rule: the one split where both sides name the same file
        splits = [i for i, ch in enumerate(rest) if ch == " " and rest.startswith("b/", i + 1)]
        found = [(rest[2:i], rest[i + 3:]) for i in splits if rest.startswith("a/") and rest[2:i] == rest[i + 3:]]
        if len(splits) != 1 or len(found) != 1:  # several " b/": other tools may split elsewhere
            return None
        return found[0]
    a, b = _strip_prefix(name_a, "a/"), _strip_prefix(name_b, "b/")
    return (a, b) if a is not None and b is not None else None


def _line_name(value: str, side: str) -> str | None:
    """The name of a ``---``/``+++`` line (``/dev/null`` kept), git's way, or None."""
    if value.startswith('"'):
        parsed = _unquote(value)
        if parsed is None or parsed[1] not in ("", "\t"):
            return None
        name = parsed[0]
    else:
        if value == DEV_NULL:
            return DEV_NULL
        name, tab, after = value.partition("\t")
        # git ends a name holding a space with one tab, and only such a name: without it GNU patch
        # (the fallback) would read up to the space ("b/conftest.py x" -> conftest.py)
        if after or bool(tab) != (" " in name):
            return None
    if name == DEV_NULL:
        return None
    return _strip_prefix(name, side + "/")


def _plain_name(value: str) -> str | None:
    """The name of a ``rename``/``copy`` line (no a/ b/ prefix), or None."""
    if value.startswith('"'):
        parsed = _unquote(value)
        return parsed[0] if parsed is not None and not parsed[1] else None
    return value or None


# --- one block ---------------------------------------------------------------------------

def _parse_block(lines: list[str]) -> FileDiff:
    text = "".join(lines)
    if not lines[-1].endswith("\n"):
        lines = lines[:-1] + [lines[-1] + "\n"]  # filter_diff adds the newline; parse what git will see
    fields: dict[str, str] = {}
    problem: str | None = None
    binary = False
    added: list[tuple[int, str]] = []

    def fail(what: str) -> None:
        nonlocal problem
        problem = problem or what

    try:
        text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        fail(UNPARSEABLE_PATCH)
    i = 1
    while i < len(lines):
        line = lines[i]
        if line.startswith("@@ -"):
            break
        if line == "GIT binary patch\n" or (line.startswith(("Binary files ", "Files "))
                                             and line.endswith(" differ\n")):
            binary = True
            break
        op = next(((p, k) for p, k in _HEADER_OPS if line.startswith(p)), None)
        if op is None:
            fail(UNPARSEABLE_PATCH)  # git would end the header here and look for patches in the rest
            break
        prefix, kind = op
        if kind in fields:
            fail(UNPARSEABLE_PATCH)  # repeated: git keeps the last, other tools the first
        fields[kind] = line[len(prefix):-1]
        i += 1

    modes = tuple(fields[k] for k in ("old_mode", "new_mode", "deleted", "new_file") if k in fields)
    if any(not _MODE.fullmatch(m) for m in modes):
        fail(UNPARSEABLE_PATCH)
    if "index" in fields:
        if not _INDEX.fullmatch(fields["index"]):
            fail(UNPARSEABLE_PATCH)
        elif " " in fields["index"]:
            modes += (fields["index"].rsplit(" ", 1)[1],)
    for k in ("similarity", "dissimilarity"):
        if k in fields and not _PERCENT.fullmatch(fields[k]):
            fail(UNPARSEABLE_PATCH)

    is_new, is_delete = "new_file" in fields, "deleted" in fields
    is_rename = "rename_from" in fields or "rename_to" in fields
    is_copy = "copy_from" in fields or "copy_to" in fields
    if is_new + is_delete + is_rename + is_copy > 1:
        fail(UNPARSEABLE_PATCH)

    # every name each side is given
    names: list[str] = []
    olds: list[str] = []
    news: list[str] = []
    for kind, side, bucket in (("minus", "a", olds), ("plus", "b", news)):
        if kind in fields:
            name = _line_name(fields[kind], side)
            if name is None:
                fail(UNPARSEABLE_PATH)
            elif name != DEV_NULL:
                bucket.append(name)
    for kind, bucket in (("rename_from", olds), ("copy_from", olds), ("rename_to", news), ("copy_to", news)):
        if kind in fields:
            name = _plain_name(fields[kind])
            if name is None:
                fail(UNPARSEABLE_PATH)
            else:
                bucket.append(name)
    minus_null = fields.get("minus") == DEV_NULL
    plus_null = fields.get("plus") == DEV_NULL
    if (minus_null and not is_new) or (plus_null and not is_delete) or (is_new and olds) or (is_delete and news):
        fail(UNPARSEABLE_PATH)
    if (is_rename or is_copy) and not (olds and news):
        fail(UNPARSEABLE_PATH)
    old = olds[0] if olds else None
    new = news[0] if news else None
    if any(n != old for n in olds) or any(n != new for n in news):
        fail(UNPARSEABLE_PATH)
    if not (is_rename or is_copy):
        if old is not None and new is not None and old != new:
            fail(UNPARSEABLE_PATH)  # a change of name without rename/copy lines
        old = new = old if old is not None else new
    header = _header_names(lines[0][len("diff --git "):-1], old, new)
    if header is None:
        fail(UNPARSEABLE_PATH)
    else:
        if old is None:
            old = new = header[0]
        if header != (old, new):
            fail(UNPARSEABLE_PATH)
        names.extend(header)
    names.extend(olds + news)
    old_path = DEV_NULL if is_new else (old or DEV_NULL)
    new_path = DEV_NULL if is_delete else (new or DEV_NULL)

    # hunks
    hunks = 0
    if not binary:
        while i < len(lines) and lines[i].startswith("@@ -"):
            m = _HUNK.match(lines[i])
            if m is None:
                fail(UNPARSEABLE_PATCH)
                break
            old_n = int(m.group(2)) if m.group(2) is not None else 1
            new_n = int(m.group(4)) if m.group(4) is not None else 1
            line_no = int(m.group(3)) - 1
            if old_n > _MAX_COUNT or new_n > _MAX_COUNT or (is_new and old_n) or (is_delete and new_n):
                fail(UNPARSEABLE_PATCH)
                break
            i += 1
            changes = 0
            while (old_n or new_n) and i < len(lines):
                line = lines[i]
                c = line[0]
                if c == " ":  # git also reads an empty line as context; git diff never writes one
                    old_n, new_n = old_n - 1, new_n - 1
                    line_no += 1
                elif c == "-":
                    old_n -= 1
                    changes += 1
                elif c == "+":
                    new_n -= 1
                    line_no += 1
                    changes += 1
                    added.append((line_no, line[1:-1]))
                elif not (line.startswith("\\ ") and len(line) >= 12):
                    break
                if old_n < 0 or new_n < 0:
                    break
                i += 1
            if old_n or new_n or not changes:
                fail(UNPARSEABLE_PATCH)
                break
            if i < len(lines) and lines[i].startswith("\\ ") and len(lines[i]) >= 12:
                i += 1
            hunks += 1
        rest = lines[i:]
        if problem is None and any(ln != "\n" for ln in rest):
            fail(UNPARSEABLE_PATCH)  # git and patch would look for more patches in these lines
        if problem is not None:  # the monitor still reads what the block would add
            added.extend((0, ln[1:-1]) for ln in rest if ln.startswith("+") and not ln.startswith("+++ "))
        if hunks and not ("minus" in fields and "plus" in fields):
            fail(UNPARSEABLE_PATCH)
        mode_change = "old_mode" in fields and "new_mode" in fields and fields["old_mode"] != fields["new_mode"]
        if not hunks and not (is_new or is_delete or is_rename or is_copy or mode_change):
            fail(UNPARSEABLE_PATCH)  # nothing to apply: git apply refuses the whole diff ("only garbage")
    return FileDiff(old_path, new_path, text, names=tuple(dict.fromkeys(names)), problem=problem,
                    is_binary=binary, modes=modes, added=tuple(added))


# --- drop rules --------------------------------------------------------------------------

_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Mn", "Me", "Zs", "Zl", "Zp"})
# default-ignorable code points that are letters (fillers) and so survive the categories above
_INVISIBLE_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")
_BREAKING = frozenset({"Cc", "Zl", "Zp"})


def fold(path: str) -> str:
    """``path`` as the drop rules compare it: NFKC, case-folded, invisible characters and
    combining marks left alone by NFKC removed, ``\\`` read as ``/``."""
    s = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", path).casefold())
    s = "".join(ch for ch in s if unicodedata.category(ch) not in _INVISIBLE_CATEGORIES
                and ch not in _INVISIBLE_LETTERS)
    return unicodedata.normalize("NFKC", s).replace("\\", "/")


def _escape(path: str) -> str:
    """``path`` with control, separator, format and other invisible characters written as escapes."""
    if all(ch.isprintable() for ch in path):
        return path
    return "".join(ch if ch.isprintable() else
                   (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else
                    f"\\u{ord(ch):04x}" if ord(ch) < 0x10000 else f"\\U{ord(ch):08x}") for ch in path)


def _unsafe(path: str) -> bool:
    parts = path.split("/")
    return path.startswith("/") or any(p in ("", ".", "..") or fold(p) == ".git" for p in parts)


def is_test_path(path: str) -> bool:
    return _TEST_NAME.search(fold(path)) is not None


def touched_paths(diff: str) -> set[str]:
    return {p for block in split_diff(diff) for p in block.paths}


def drop_reason(block: FileDiff, protected: set[str] = frozenset(), runner: tuple[str, ...] = ()) -> str | None:
    """Why ``block`` must not reach the grading tree (None: it is applied).

    ``runner``: paths (a trailing ``/``: folders) of a harness's own test runner inside
    the repository, e.g. ``django/test/``. Names are compared folded (:func:`fold`).
    """
    paths = block.paths
    folded = {fold(p) for p in paths}
    if block.binary:
        return "binary"
    if block.problem:
        return block.problem
    if any(_BYTECODE.search(p) for p in folded):
        return "bytecode"
    if block.symlink:
        return "symlink"
    if any(m not in _REGULAR_MODES for m in block.modes):
        return "not a regular file"
    if any(_RUNNER_CONFIG.search(p) for p in folded):
        return "test-runner configuration"
    if any(_SHADOW.search(p) for p in folded):
        return "shadows the test runner"
    if any(_STARTUP.search(p) for p in folded):
        return "interpreter start-up or package metadata"
    if block.old_path == DEV_NULL and "/" not in block.new_path and block.new_path.endswith(".py") \
            and fold(block.new_path)[:-3] in STDLIB_MODULES:
        return "shadows the standard library"  # a new `itertools.py` at the root: imported first from there
    guarded = {fold(p) for p in protected}
    if any(_TEST_NAME.search(p) or p in guarded for p in folded):
        return "test file"
    runners = [fold(r) for r in runner]  # a trailing "/" (a folder) survives folding
    if any(p == r or (r.endswith("/") and p.startswith(r)) for p in folded for r in runners):
        return "the harness's test runner"
    if any(unicodedata.category(ch) in _BREAKING for p in paths for ch in p):
        return UNPARSEABLE_PATH  # a control character or line separator: no honest file name holds one
    if any(_unsafe(p) for p in paths):
        return UNSAFE_PATH
    return None


# --- git's own reading -------------------------------------------------------------------

_git_home: str | None = None
_git_home_lock = threading.Lock()


def _git_cwd() -> str:
    """An empty private folder to run git in (no repository, so no repository config)."""
    global _git_home
    with _git_home_lock:
        if _git_home is None or not os.path.isdir(_git_home):
            _git_home = tempfile.mkdtemp(prefix="swe-diffpaths-")
        return _git_home


def _git_numstat(reverse: bool) -> subprocess.Popen[bytes]:
    """``git apply --numstat -z [-R] -`` started in an empty folder, with no user or system config."""
    cwd = _git_cwd()
    args = git_argv(["apply", "--numstat", "-z", *(["-R"] if reverse else []), "-"], [("core.quotePath", "false")])
    return subprocess.Popen(args, cwd=cwd, env=git_env(cwd), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)


def git_paths(text: str) -> tuple[list[str], list[str]] | None:
    """What ``git apply`` reads in ``text``: (each patch's new-or-old name, each patch's old-or-new
    name), or None when git cannot read it. One ``git apply --numstat -z`` each way, at once."""
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return None
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for reverse in (False, True):
            procs.append(_git_numstat(reverse))
    except OSError:
        for proc in procs:
            proc.kill()
            proc.communicate()
        return None
    out: list[list[str]] = []
    ok = True
    for proc in procs:
        try:
            stdout, _ = proc.communicate(data, timeout=60)
        except (subprocess.TimeoutExpired, OSError):
            proc.kill()
            proc.communicate()
            ok = False
            continue
        if proc.returncode != 0:
            ok = False
            continue
        records = stdout.split(b"\0")
        if records[-1] != b"":
            ok = False
            continue
        names = []
        for rec in records[:-1]:
            fields = rec.split(b"\t", 2)
            if len(fields) != 3:
                ok = False
                break
            names.append(fields[2].decode("utf-8", "surrogateescape"))
        out.append(names)
    return (out[0], out[1]) if ok else None


def _git_agrees(blocks: list[FileDiff]) -> bool:
    """Does git read exactly these blocks' names in their joined text?"""
    seen = git_paths("".join(_kept_text(b) for b in blocks))
    if seen is None:
        return False
    forward = [b.new_path if b.new_path != DEV_NULL else b.old_path for b in blocks]
    backward = [b.old_path if b.old_path != DEV_NULL else b.new_path for b in blocks]
    return seen[0] == forward and Counter(seen[1]) == Counter(backward)


def _disagreeing(blocks: list[FileDiff]) -> set[int]:
    """Indices of the blocks git reads otherwise (bisecting: one git run pair per step)."""
    if _git_agrees(blocks):
        return set()
    if len(blocks) == 1:
        return {0}
    half = len(blocks) // 2
    return _disagreeing(blocks[:half]) | {half + i for i in _disagreeing(blocks[half:])}


def _kept_text(block: FileDiff) -> str:
    return block.text if block.text.endswith("\n") else block.text + "\n"


def filter_diff(diff: str, protected: set[str] = frozenset(),
                runner: tuple[str, ...] = ()) -> tuple[str, list[str]]:
    """The applicable part of an agent diff, and the paths that were dropped (``"path (reason)"``).

    What is kept is checked against git's own reading of it (one ``git apply --numstat`` pair):
    blocks git reads otherwise are dropped as ``unparseable path``; if git still disagrees,
    or cannot be run, nothing is kept.
    """
    kept: list[FileDiff] = []
    dropped: list[str] = []
    for block in split_diff(diff):
        reason = drop_reason(block, protected, runner)
        if reason:
            dropped.append(f"{block.display} ({reason})")
        else:
            kept.append(block)
    if kept and not _git_agrees(kept):
        bad = _disagreeing(kept) if len(kept) > 1 else {0}
        dropped += [f"{kept[i].display} ({UNPARSEABLE_PATH})" for i in sorted(bad)]
        kept = [b for i, b in enumerate(kept) if i not in bad]
        if kept and not _git_agrees(kept):
            dropped += [f"{b.display} ({UNPARSEABLE_PATH})" for b in kept]
            kept = []
    return "".join(_kept_text(b) for b in kept), dropped


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
