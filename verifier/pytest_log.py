"""Read a ``pytest -rA`` log the way SWE-bench's harness does, and map it to test ids.

The short test summary holds one line per test result: ``PASSED id``, ``FAILED id - msg``,
``ERROR id - msg``, ``XFAIL id - reason``, ``XPASS id``. The log is the test process's own
output, so it is testimony, not proof: the grader trusts it only as far as the canaries
(``canary.py``) and the cross-checks (``verdict.py``) let it.

The log is the submission's output (up to 8 MB, any shape), so reading it is linear in its
size: no backtracking regular expression, only the lines that start with a status word are
looked at, and the indexes the lookups need are built once. ANSI escape sequences are
removed first: a repository whose configuration colours the report (``--color=yes``) gets
its summary read like any other. The grader calls these in a worker process (``offload.py``).

Ids are matched as the dataset's parser produced them: exactly, or as SWE-bench's
``parse_log_pytest`` cuts a parametrized id at its first space (``test_x[a b]`` ->
``test_x[a``), so rows carrying cut ids still find their results.

A node id on pytest's command line that names nothing makes pytest run nothing at all (exit
status 4, ``ERROR: not found: ...``); ``not_found`` reads what it could not find, so the grader
can run the others without it (grade.py).
"""

from __future__ import annotations

import re

from .junit import Outcome

USAGE_ERROR = 4  # pytest's exit status when a command-line id names nothing (and no test ran)
_STATUS: dict[str, Outcome] = {"PASSED": "passed", "XPASS": "passed", "FAILED": "failed", "ERROR": "error",
                               "XFAIL": "xfailed", "SKIPPED": "skipped"}
_WORDS = tuple(_STATUS)
_WORDS_OR_ESCAPE = (*_WORDS, "\x1b")
MAX_REASONS = 10  # conflicting ids named in the reasons (the others are counted)
# ANSI escape sequences (CSI such as pytest's colours ``\x1b[32m``, and two-character escapes). Linear:
# every match starts at an ESC, and the character classes of a CSI are disjoint, so nothing backtracks
# further than the run it scanned.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]?|[@-Z\\-_])")
# pytest's usage errors for command-line ids (4.x-9.x): ``not found: <abs path>::<name>`` (8+ drops the
# parameters), ``file or directory not found: <arg>`` (``file not found`` before 5.x)
_NOT_FOUND_PREFIXES = ("ERROR: not found: ", "ERROR: file or directory not found: ", "ERROR: file not found: ")


def strip_ansi(text: str) -> str:
    """``text`` without ANSI escape sequences (colours, cursor movement)."""
    return _ANSI.sub("", text) if "\x1b" in text else text


def _close(text: str, start: int) -> int:
    """The index of the ``]`` that closes the ``[`` at ``start`` (brackets nested), or -1. Linear: each
    bracket is found once (``str.find`` from the last one)."""
    depth = 0
    opening, closing = start, text.find("]", start)
    while closing >= 0:
        if 0 <= opening < closing:
            depth += 1
            opening = text.find("[", opening + 1)
        else:
            depth -= 1
            if depth == 0:
                return closing
            closing = text.find("]", closing + 1)
    return -1


def _ends_id(text: str, i: int) -> bool:
    """Whether a node id can end at ``text[i]``: the end of the line, or pytest's `` - `` before a message."""
    return i + 1 == len(text) or text.startswith(" - ", i + 1)


def _test_id(rest: str, whole: bool = False) -> str | None:
    """The node id at the start of a summary line's remainder (``None``: not a node id).

    ``whole``: the line carries no message (``PASSED``), so all of it is the id. Otherwise a message may
    follow after `` - ``, which a parameter id may contain too: a parametrized id ends at the ``]`` that
    closes its ``[`` (nested brackets counted) when the line ends or `` - `` follows there, else at the
    first ``]`` where that holds (a parameter id with unbalanced brackets)."""
    space = rest.find(" ")
    first = rest if space < 0 else rest[:space]
    if "::" not in first and not first.endswith(".py"):
        return None  # e.g. ``SKIPPED [1] path:line: reason``: no id
    if whole:
        return rest
    dash = rest.find(" - ")
    head = rest if dash < 0 else rest[:dash]
    colons = head.find("::")
    bracket = head.find("[", colons if colons >= 0 else 0)
    if bracket < 0:
        return head.rstrip()
    end = _close(rest, bracket)
    if end >= 0 and _ends_id(rest, end):
        return rest[:end + 1]
    end = rest.find("] - ", bracket)
    if end < 0 and rest.endswith("]"):
        end = len(rest) - 1
    return rest[:end + 1] if end >= 0 else head.rstrip()


class Report(dict[str, list[Outcome]]):
    """``{node id: [outcome, ...]}`` as the log reports it, with the indexes lookups need, each built
    once on first use (so a report is not changed once read; ``normalise`` and ``rename_back`` make new
    ones): looking up every required test costs one pass over the report, not one pass per test."""

    _cut: dict[str, list[Outcome]] | None = None
    _functions: dict[str, list[str]] | None = None

    def by_cut(self) -> dict[str, list[Outcome]]:
        """Every outcome under each id cut at its first space (SWE-bench's reading), in order."""
        if self._cut is None:
            self._cut = {}
            for rid, seen in self.items():
                self._cut.setdefault(rid.partition(" ")[0], []).extend(seen)
        return self._cut

    def by_function(self) -> dict[str, list[str]]:
        """The reported ids of each test function (the id up to its first ``[``)."""
        if self._functions is None:
            self._functions = {}
            for rid in self:
                self._functions.setdefault(rid.partition("[")[0], []).append(rid)
        return self._functions


def summary(log: str) -> Report:
    """``{node id: [outcome, ...]}`` from every summary line of ``log``, in order.

    Lines are split on ``\\n`` only, as SWE-bench splits them; a line counts when, without its ANSI
    escapes, it starts with a status word and whitespace."""
    out = Report()
    for line in log.split("\n"):
        if not line.startswith(_WORDS_OR_ESCAPE):
            continue
        line = strip_ansi(line)
        if not line.startswith(_WORDS):
            continue
        parts = line.split(None, 1)
        status = _STATUS.get(parts[0])
        if status is None or len(parts) < 2:  # ``PASSEDx``, or a status word alone
            continue
        # a PASSED line never carries a message: all of it is the id (`` - `` and brackets included)
        test = _test_id(parts[1].strip(), whole=parts[0] == "PASSED")
        if test:
            out.setdefault(test, []).append(status)
    return out


def conflicts(reported: dict[str, list[Outcome]]) -> list[str]:
    """Ids an honest run cannot report as they were: passed twice, or passed and failed.

    (``PASSED`` beside ``ERROR`` is honest: a test whose teardown failed.) A forged log can hold any
    number of them: the first ``MAX_REASONS`` are named (ids shortened), the rest counted, so the
    reasons stay small whatever the log."""
    bad = []
    more = 0
    for test, seen in reported.items():
        passes = seen.count("passed") + seen.count("xfailed")
        if passes > 1 or (passes and "failed" in seen):
            if len(bad) < MAX_REASONS:
                bad.append(f"the log reports {shorten(test)} {_said(seen)}")
            else:
                more += 1
    if more:
        bad.append(f"and {more} more ids reported twice, or passed and failed")
    return bad


def shorten(text: str, limit: int = 200) -> str:
    """``text`` cut to ``limit`` characters (a test id from the log, in a reason)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _said(seen: list[Outcome]) -> str:
    """``passed and failed``; ``passed (40 times) and failed`` for long lists."""
    if len(seen) <= 4:
        return " and ".join(seen)
    counts: dict[str, int] = {}
    for o in seen:
        counts[o] = counts.get(o, 0) + 1
    return " and ".join(o if n == 1 else f"{o} ({n} times)" for o, n in counts.items())


def outcome(seen: list[Outcome]) -> Outcome:
    """One test's outcome from everything the log says of it."""
    for worst in ("failed", "error"):
        if worst in seen:
            return worst  # type: ignore[return-value]
    for o in ("passed", "xfailed", "skipped"):
        if o in seen:
            return o  # type: ignore[return-value]
    return "missing"


def _by_suffix(paths: set[str]) -> dict[str, list[str]]:
    """``{tail: [path, ...]}``: each path under every tail of it that starts after a ``/``."""
    out: dict[str, list[str]] = {}
    for p in paths:
        i = p.find("/")
        while i >= 0:
            out.setdefault(p[i + 1:], []).append(p)
            i = p.find("/", i + 1)
    return out


def normalise(reported: dict[str, list[Outcome]], known_paths: set[str]) -> Report:
    """Ids with their file path as the task names it (pytest prints paths relative to its rootdir)."""
    tails = _by_suffix(known_paths)
    out = Report()
    for test, seen in reported.items():
        path, sep, rest = test.partition("::")
        if path not in known_paths:
            matches = tails.get(path, ())
            if len(matches) == 1:
                test = matches[0] + sep + rest
        out.setdefault(test, []).extend(seen)
    return out


def lookup(test: str, reported: dict[str, list[Outcome]]) -> Outcome:
    """The outcome of ``test`` (a task's id, perhaps cut at a space the SWE-bench way)."""
    if test in reported:
        return outcome(reported[test])
    if isinstance(reported, Report):
        seen = reported.by_cut().get(test)
        return outcome(seen) if seen else "missing"
    cut = [o for rid, seen in reported.items() if rid.partition(" ")[0] == test for o in seen]
    return outcome(cut) if cut else "missing"


def instances(function_id: str, reported: dict[str, list[Outcome]]) -> dict[str, Outcome]:
    """``{param suffix: outcome}`` of every reported instance of a test function (``""``: unparametrized)."""
    if isinstance(reported, Report):
        ids = reported.by_function().get(function_id, ())
    else:
        ids = [rid for rid in reported if rid.partition("[")[0] == function_id]
    return {rid[len(function_id):]: outcome(reported[rid]) for rid in ids}


def rename_back(reported: dict[str, list[Outcome]], renamed: dict[str, str]) -> Report:
    """Results of tests that ran under another name (``{original function id: its name in the run}``)
    filed under their original ids."""
    back = {new: orig for orig, new in renamed.items()}
    out = Report()
    for rid, seen in reported.items():
        func, bracket, params = rid.partition("[")
        if func in back:
            rid = back[func] + bracket + params
        out.setdefault(rid, []).extend(seen)
    return out


def not_found(log: str, selected: list[str]) -> set[str]:
    """The function ids of ``selected`` (node ids on pytest's command line) that pytest says it could
    not find: ``path::function`` (parameters dropped, as pytest 8+ prints them), every selected
    function of a path when the file itself was not found."""
    paths = {s.partition("::")[0] for s in selected}
    longest = max(map(len, paths), default=0)
    out: set[str] = set()
    for line in log.split("\n"):
        if not line.startswith(("ERROR: ", "\x1b")):
            continue
        line = strip_ansi(line).rstrip()
        prefix = next((p for p in _NOT_FOUND_PREFIXES if line.startswith(p)), None)
        if prefix is None or len(line) == len(prefix):
            continue
        path, sep, rest = line[len(prefix):].partition("::")
        known = _selected_path(path, paths, longest)
        if known is None:
            continue
        if not sep:
            out |= {_function(s) for s in selected if s.partition("::")[0] == known}
        else:
            out.add(_function(f"{known}::{rest}"))
    return out


def _selected_path(path: str, paths: set[str], longest: int) -> str | None:
    """The longest of ``paths`` that ``path`` is, or ends with after a ``/`` (pytest prints absolute
    paths); only the last ``longest`` characters are looked at."""
    if path in paths:
        return path
    slash = path.find("/", max(0, len(path) - longest - 1))
    while slash >= 0:
        if path[slash + 1:] in paths:
            return path[slash + 1:]
        slash = path.find("/", slash + 1)
    return None


def _function(nodeid: str) -> str:
    path, sep, rest = nodeid.partition("::")
    return path + sep + rest.split("[", 1)[0]
