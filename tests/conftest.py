"""Suite-wide: the ``bwrap`` fixture, and under CI no test may skip but for a missing GPU.

The suite's helpers are the package tests/support (``support``; see its docstring for where
helpers live and how they are named). See support/requirements.py for ``missing(part, reason)``, which fails (CI / SWE_REQUIRE_<PART>=1) or skips a test.

Under ``CI=true`` a skip from anywhere else (a ``skipif`` marker, a ``pytest.skip`` in
a file that does not use ``missing``, a module-level skip) is turned into a failure
when its report is made, unless the test is marked ``gpu`` or the reason names a
GPU/CUDA; so a CI run passes only when everything but the GPU tests ran. The terminal
summary lists the skips and their reasons.
"""

from __future__ import annotations

import shutil
from collections import Counter

import pytest
from support.requirements import GPU_REASON, in_ci, missing

pytest_plugins = ["support.timing"]  # durations kept in tests/durations.json, the slow marker, longest files first

_CI_SKIP = "CI=true: only a missing GPU may skip a test, but this one skipped: "


@pytest.fixture(scope="session")
def bwrap() -> str:
    """Path of bubblewrap (the default sandbox backend); missing: fail in CI, else skip."""
    path = shutil.which("bwrap")
    if path is None:
        missing("bwrap", "bubblewrap (bwrap) is not on PATH")
    return path


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    return longrepr[2].removeprefix("Skipped: ") if isinstance(longrepr, tuple) else str(longrepr)


def _fail_skip_in_ci(report, item: pytest.Item | None = None):
    """Under CI, a skip other than a missing GPU becomes a failure of the same report."""
    if not (report.skipped and in_ci()) or hasattr(report, "wasxfail"):
        return report
    reason = _skip_reason(report)
    if GPU_REASON.search(reason) or (item is not None and item.get_closest_marker("gpu")):
        return report
    report.outcome = "failed"
    report.longrepr = f"{_CI_SKIP}{reason}"
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    return _fail_skip_in_ci((yield), item)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    return _fail_skip_in_ci((yield))


def pytest_terminal_summary(terminalreporter) -> None:
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if not hasattr(r, "wasxfail")]
    tr = terminalreporter
    forbidden = [r for r in tr.stats.get("failed", []) if str(r.longrepr).startswith(_CI_SKIP)]
    tr.write_sep("=", f"skips: {len(skipped)} skipped"
                 + (f", {len(forbidden)} failed (CI=true: only a missing GPU may skip)" if in_ci() else ""))
    for reason, n in Counter(_skip_reason(r) for r in skipped).most_common():
        tr.write_line(f"{n:4d} skipped: {reason}")
    # read back from the reports (under pytest-xdist the skips were turned into failures in the workers)
    for r in forbidden:
        tr.write_line(f"FAILED (CI=true forbids this skip) {r.nodeid}: {str(r.longrepr)[len(_CI_SKIP):]}", red=True)
