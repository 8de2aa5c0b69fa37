"""The suite's durations, kept: ``tests/durations.json`` (committed) and what it is used for.

- ``--write-durations`` (``make durations``) records each test file's wall time (setup + call +
  teardown of its tests, summed), the CPU time its worker and the worker's reaped children used in
  that time (a file well under its wall time waits: on servers, sandboxes, Docker's daemon, whose
  CPU is not counted) and the slowest tests of the run into ``tests/durations.json``.
- Test files run longest first (a stable sort by the recorded time; a file not recorded yet counts as
  slow): with ``pytest -n N --dist loadfile`` the long files start at once instead of ending the run.
  The sort runs where xdist takes the order from (its workers' collection), and xdist's own reordering
  (by tests per file) is turned off.
- A file recorded at ``FAST_FILE_S`` or more gets the ``slow`` marker, so ``-m "not slow"`` (``make
  test-fast``) is the tier a developer runs on every change; a file not recorded yet is slow too.
"""

from __future__ import annotations

import functools
import json
import resource
from collections import Counter
from pathlib import Path

import pytest

DURATIONS = Path(__file__).parents[1] / "durations.json"
FAST_FILE_S = 8.0  # a file whose tests take longer in all is in the full suite only
SLOWEST = 40  # tests named in the file


@functools.cache  # read once per process: both collection hooks and the recorder use it
def recorded(key: str = "files") -> dict[str, float]:
    """Seconds from the committed file, as it was when the run started: per test file (``tests/...py``),
    wall time (``files``) or CPU time (``cpu_files``), or per test (``slowest``); {} when there is none."""
    try:
        return {k: float(v) for k, v in json.loads(DURATIONS.read_text())[key].items()}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--write-durations", action="store_true",
                     help="record each test file's time and the slowest tests in tests/durations.json")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    seconds = _seconds(items)
    for item in items:
        if seconds[_file(item.nodeid)] >= FAST_FILE_S:
            item.add_marker(pytest.mark.slow)


def _seconds(items: list[pytest.Item]) -> dict[str, float]:
    files = recorded()
    unknown = max(files.values(), default=0.0) + 1.0
    return {f: files.get(f, unknown) for f in {_file(i.nodeid) for i in items}}


class _LongestFirst:
    @pytest.hookimpl(trylast=True)  # after pytest's own reordering (by fixture scope), which the sort keeps per file
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        seconds = _seconds(items)
        first: dict[str, int] = {}
        for i, item in enumerate(items):
            first.setdefault(_file(item.nodeid), i)
        items.sort(key=lambda item: (-seconds[_file(item.nodeid)], first[_file(item.nodeid)]))


def _cpu_s() -> float:
    """User + system seconds of this process and of its children that have been waited for."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


class _CpuMeter:
    """In the process that runs the tests (an xdist worker or the only one): each report carries the CPU
    seconds its phase used, as a user property (xdist sends those to the controller)."""

    def __init__(self) -> None:
        self.start = 0.0

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logstart(self, nodeid: str, location) -> None:
        self.start = _cpu_s()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call):
        outcome = yield
        report = outcome.get_result()
        now = _cpu_s()
        report.user_properties.append(("cpu_s", now - self.start))
        self.start = now


class _Recorder:
    def __init__(self) -> None:
        self.per_test: Counter[str] = Counter()
        self.cpu: Counter[str] = Counter()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.per_test[report.nodeid] += report.duration
        self.cpu[_file(report.nodeid)] += dict(report.user_properties).get("cpu_s", 0.0)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if not self.per_test or getattr(session.config, "workerinput", None) is not None:
            return  # nothing ran, or an xdist worker (the controller writes)
        files = Counter()
        for nodeid, s in self.per_test.items():
            files[_file(nodeid)] += s
        merged = {**recorded(), **{f: round(s, 2) for f, s in files.items()}}  # a partial run updates its files
        cpu = {**recorded("cpu_files"), **{f: round(s, 1) for f, s in self.cpu.items()}}
        slowest = Counter({k: v for k, v in recorded("slowest").items() if _file(k) not in files})  # ... and tests
        slowest.update({k: round(v, 2) for k, v in self.per_test.items()})
        DURATIONS.write_text(json.dumps({
            "note": "written by `make durations` (pytest --write-durations); seconds per test file (wall, and "
                    "CPU of the test process and its reaped children), and the slowest tests of the run that "
                    "wrote it",
            "total_s": round(sum(merged.values()), 1),
            "cpu_total_s": round(sum(cpu.values()), 1),
            "files": dict(sorted(merged.items(), key=lambda kv: -kv[1])),
            "cpu_files": dict(sorted(cpu.items(), key=lambda kv: -kv[1])),
            "slowest": dict(slowest.most_common(SLOWEST)),
        }, indent=1) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist: the longest files start first. The controller schedules the files in the order its
    # workers collected them, so the workers sort (xdist sets a worker's numprocesses to None: a worker is
    # known by its workerinput); xdist's own reordering (the files with the most tests first) is off.
    in_worker = getattr(config, "workerinput", None) is not None
    if config.getoption("numprocesses", None) or in_worker:
        config.pluginmanager.register(_LongestFirst(), "swe-longest-first")
        if hasattr(config.option, "loadscopereorder"):
            config.option.loadscopereorder = False
    if config.getoption("write_durations"):  # also in xdist's workers, which get the same options
        config.pluginmanager.register(_CpuMeter(), "swe-cpu-meter")
        config.pluginmanager.register(_Recorder(), "swe-durations")
