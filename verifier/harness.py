"""Grade with an instance's own test harness: its command, its log, its dataset's parser.

SWE-bench-family instances whose tests are not plain pytest (Django's
``runtests.py``, SymPy's runner, other languages' tools) are graded the way their
dataset defines: ``task.test_cmd`` runs in the graded tree (pristine tree + the
agent's filtered diff + the hidden ``test_patch``, as for pytest) under the same
supervisor, and ``task.log_parser`` (a name in ``swebench``'s parser registry, an
optional dependency: ``pip install -e '.[datasets]'`` from the checkout) reads its log.

The harness's runner files inside the repository (``RUNNER_PATHS``: Django's
``django/test/``, SymPy's ``sympy/testing/``) are the grader's: the agent's changes
to them are dropped like changes to test files. What can be checked without the
runner's cooperation (``check_log``):

- the log is the one the supervisor wrote (its hash is in the nonce-tagged summary);
- the exit status and the log agree: a non-zero exit with no failing test in the log
  is a forged or truncated log (swebench 5.x rejects it too); a zero exit with failing
  tests is not evidence of anything (lenient harnesses exit 0 whatever happens, and a
  failure pays nothing);
- no required test is reported twice with different results (a forged line beside
  the real one). Parsers of pytest's ``-rA`` summary cut a parametrized id at its first
  space (``test_x[a b]`` -> ``test_x[a``), so several tests can share one id: there, only
  one *test* (the full id on its line) reported both passed and failed is a conflict, and
  the id is failing when any of its tests failed (what the parser's last-wins reading gives
  on an honest log, where pytest prints failures after passes; a passing line printed after
  a real failure does not turn it);
- files the tests must not change (those of ``test_patch``) are unchanged.

What cannot be (docs/grading.md): code under test that prints the runner's own
result lines for every test and then ends the process with the runner's success
status writes a log that is indistinguishable from a real one. The pytest path has
canaries and an outcome channel for that; a harness has neither.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable

from . import pytest_log
from .junit import Outcome

_STATUS: dict[str, Outcome] = {"PASSED": "passed", "FAILED": "failed", "ERROR": "error", "SKIPPED": "skipped",
                               "XFAIL": "xfailed"}
_FAILING = {"failed", "error"}
# swebench parsers (by function: the registry aliases them per repository) that read pytest's -rA summary,
# one self-contained line per test
_PYTEST_SUMMARY = frozenset({"parse_log_pytest", "parse_log_pytest_options", "parse_log_pytest_v2",
                             "parse_log_matplotlib", "parse_log_seaborn"})


# The harness's own runner, inside the repository, per parser: the agent's changes to it
# are dropped like changes to test files (a patched runner would print what it likes).
# A gold patch that needs one of these cannot be graded, and `tasks validate` says so.
RUNNER_PATHS: dict[str, tuple[str, ...]] = {
    "parse_log_django": ("tests/runtests.py", "django/test/"),
    "parse_log_sympy": ("bin/test", "sympy/testing/"),
}


def runner_paths(log_parser: str | None) -> tuple[str, ...]:
    return RUNNER_PATHS.get(log_parser or "", ())


class HarnessError(RuntimeError):
    """The task's harness cannot be used here (unknown parser, swebench missing)."""


@lru_cache(maxsize=None)
def parser(name: str) -> Callable[[str, Any], dict[str, str]]:
    """swebench's log parser registered as ``name``."""
    try:
        from swebench.harness.log_parsers import PARSER_REGISTRY
    except ImportError as exc:
        raise HarnessError(f"grading with log parser {name!r} needs the swebench package "
                           f"(pip install -e '.[datasets]' from the checkout): {exc}") from None
    try:
        return PARSER_REGISTRY[name]
    except KeyError:
        raise HarnessError(f"unknown log parser {name!r} (swebench knows {len(PARSER_REGISTRY)}, "
                           f"e.g. parse_log_pytest, parse_log_django, parse_log_sympy)") from None


def reads_pytest_summary(name: str) -> bool:
    """Whether parser ``name`` reads pytest's ``-rA`` summary (whose ids it may cut at a space)."""
    return getattr(parser(name), "__name__", name) in _PYTEST_SUMMARY


def parse_log(name: str, log: str, tests: list[str] | None = None) -> dict[str, Outcome]:
    """``{test id: outcome}`` as the dataset's parser reads ``log``; for pytest-summary parsers, a
    required id (of ``tests``) any of whose tests failed on a line of its own is failing. ANSI escapes are
    removed first (a configuration that colours the report hides nothing)."""
    log = pytest_log.strip_ansi(log)
    raw = parser(name)(log, None)
    report = {test: _STATUS.get(str(status).upper(), "failed") for test, status in raw.items()}
    if tests and reads_pytest_summary(name):
        for (test, _), seen in _line_results(name, log, set(tests)).items():
            worst = next((o for o in ("failed", "error") if o in seen), None)
            if worst and report.get(test) not in _FAILING:
                report[test] = worst  # type: ignore[assignment]
    return report


def _instance(line: str, test: str) -> str:
    """Which test a summary line reports: its full node id (several tests can share a cut id)."""
    found = list(pytest_log.summary(pytest_log.strip_ansi(line).strip()))
    return found[0] if len(found) == 1 else test


def _line_results(name: str, log: str, tests: set[str]) -> dict[tuple[str, str], set[Outcome]]:
    """Every result each required test gets from any single line of the log, by (test, the full
    id on the line: for pytest-summary parsers, else the test)."""
    fn = parser(name)
    summary = reads_pytest_summary(name)
    seen: dict[tuple[str, str], set[Outcome]] = {}
    names = {t.split(" ", 1)[0].rsplit("::", 1)[-1] for t in tests}
    for line in log.split("\n"):  # as the parsers split it
        if not any(n in line for n in names):
            continue
        try:
            found = fn(line, None)
        except Exception:  # a parser that needs more context than one line: no evidence either way
            continue
        for test, status in found.items():
            if test in tests:
                key = (test, _instance(line, test) if summary else test)
                seen.setdefault(key, set()).add(_STATUS.get(str(status).upper(), "failed"))
    return seen


def check_log(name: str, log: str, report: dict[str, Outcome], summary: dict[str, Any],
              tests: list[str]) -> list[str]:
    """Reasons this harness run cannot be trusted (empty: nothing disagrees)."""
    log = pytest_log.strip_ansi(log)
    reasons: list[str] = []
    exit_code = summary.get("exit_code")
    failing = [t for t, o in report.items() if o in _FAILING]
    if exit_code not in (0, None) and not failing:
        reasons.append(f"the test command exited {exit_code} but its log shows no failing test")
    # pytest's summary reports a test whose teardown failed as PASSED and ERROR: only FAILED conflicts
    against = {"failed"} if reads_pytest_summary(name) else _FAILING
    results = sorted(_line_results(name, log, set(tests)).items())
    both = [(test, instance, outcomes) for (test, instance), outcomes in results
            if len(outcomes) > 1 and outcomes & against and outcomes & {"passed", "xfailed"}]
    for test, instance, outcomes in both[:pytest_log.MAX_REASONS]:  # a forged log can hold any number
        what = test if instance == test else f"{test} ({pytest_log.shorten(instance)})"
        reasons.append(f"the log reports {what} both {' and '.join(sorted(outcomes))}")
    if len(both) > pytest_log.MAX_REASONS:
        reasons.append(f"and {len(both) - pytest_log.MAX_REASONS} more tests reported both passing and failing")
    if summary.get("changed_files"):
        reasons.append("files the tests must not change were changed: " + ", ".join(summary["changed_files"][:10]))
    return reasons


def outcomes(tests: list[str], report: dict[str, Outcome]) -> dict[str, Outcome]:
    """Each required test's outcome, ``missing`` when the log never names it."""
    return {t: report.get(t, "missing") for t in tests}
