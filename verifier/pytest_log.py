"""Read a ``pytest -rA`` log the way SWE-bench's harness does, and map it to test ids.

The short test summary holds one line per test result: ``PASSED id``, ``FAILED id - msg``,
``ERROR id - msg``, ``XFAIL id - reason``, ``XPASS id``. The log is the test process's own
output, so it is testimony, not proof: the grader trusts it only as far as the canaries
(``canary.py``) and the cross-checks (``verdict.py``) let it.

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

_LINE = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED)\s+(\S.*?)\s*$")
# pytest's usage errors for command-line ids (4.x-9.x): ``not found: <abs path>::<name>`` (8+ drops the
# parameters), ``file or directory not found: <arg>`` (``file not found`` before 5.x)
_NOT_FOUND = re.compile(r"^ERROR: (?:file or directory |file )?not found: (\S.*?)\s*$")
USAGE_ERROR = 4  # pytest's exit status when a command-line id names nothing (and no test ran)
_STATUS: dict[str, Outcome] = {"PASSED": "passed", "XPASS": "passed", "FAILED": "failed", "ERROR": "error",
                               "XFAIL": "xfailed", "SKIPPED": "skipped"}


def _test_id(rest: str) -> str | None:
    """The node id at the start of a summary line's remainder (``None``: not a node id)."""
    if "::" not in rest.split(" ", 1)[0] and not rest.split(" ", 1)[0].endswith(".py"):
        return None  # e.g. ``SKIPPED [1] path:line: reason``: no id
    head = rest.split(" - ", 1)[0]
    if "[" in head and not head.endswith("]"):  # a parameter id with " - " in it: up to its closing bracket
        m = re.match(r"(.*?\])(?: - |$)", rest)
        if m:
            head = m.group(1)
    return head.strip()


def summary(log: str) -> dict[str, list[Outcome]]:
    """``{node id: [outcome, ...]}`` from every summary line of ``log``, in order."""
    out: dict[str, list[Outcome]] = {}
    for line in log.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        test = _test_id(m.group(2))
        if test:
            out.setdefault(test, []).append(_STATUS[m.group(1)])
    return out


def conflicts(reported: dict[str, list[Outcome]]) -> list[str]:
    """Ids an honest run cannot report as they were: passed twice, or passed and failed.

    (``PASSED`` beside ``ERROR`` is honest: a test whose teardown failed.)"""
    bad = []
    for test, seen in reported.items():
        passes = seen.count("passed") + seen.count("xfailed")
        if passes > 1 or (passes and "failed" in seen):
            bad.append(f"the log reports {test} {' and '.join(seen)}")
    return bad


def outcome(seen: list[Outcome]) -> Outcome:
    """One test's outcome from everything the log says of it."""
    for worst in ("failed", "error"):
        if worst in seen:
            return worst  # type: ignore[return-value]
    for o in ("passed", "xfailed", "skipped"):
        if o in seen:
            return o  # type: ignore[return-value]
    return "missing"


def normalise(reported: dict[str, list[Outcome]], known_paths: set[str]) -> dict[str, list[Outcome]]:
    """Ids with their file path as the task names it (pytest prints paths relative to its rootdir)."""
    out: dict[str, list[Outcome]] = {}
    for test, seen in reported.items():
        path, sep, rest = test.partition("::")
        if path not in known_paths:
            matches = [p for p in known_paths if p.endswith("/" + path)]
            if len(matches) == 1:
                test = matches[0] + sep + rest
        out.setdefault(test, []).extend(seen)
    return out


def lookup(test: str, reported: dict[str, list[Outcome]]) -> Outcome:
    """The outcome of ``test`` (a task's id, perhaps cut at a space the SWE-bench way)."""
    if test in reported:
        return outcome(reported[test])
    cut = [seen for rid, seen in reported.items() if rid.split(" ", 1)[0] == test]
    if cut:
        return outcome([o for seen in cut for o in seen])
    return "missing"


def instances(function_id: str, reported: dict[str, list[Outcome]]) -> dict[str, Outcome]:
    """``{param suffix: outcome}`` of every reported instance of a test function (``""``: unparametrized)."""
    out: dict[str, Outcome] = {}
    for rid, seen in reported.items():
        if rid == function_id or (rid.startswith(function_id + "[")):
            out[rid[len(function_id):]] = outcome(seen)
    return out


def rename_back(reported: dict[str, list[Outcome]], renamed: dict[str, str]) -> dict[str, list[Outcome]]:
    """Results of tests that ran under another name (``{original function id: its name in the run}``)
    filed under their original ids."""
    back = {new: orig for orig, new in renamed.items()}
    out: dict[str, list[Outcome]] = {}
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
    out: set[str] = set()
    for line in log.splitlines():
        m = _NOT_FOUND.match(line)
        if not m:
            continue
        path, sep, rest = m.group(1).partition("::")
        known = [p for p in paths if path == p or path.endswith("/" + p)]
        if not known:
            continue
        path = max(known, key=len)
        if not sep:
            out |= {_function(s) for s in selected if s.partition("::")[0] == path}
        else:
            out.add(_function(f"{path}::{rest}"))
    return out


def _function(nodeid: str) -> str:
    path, sep, rest = nodeid.partition("::")
    return path + sep + rest.split("[", 1)[0]
