"""The suite's durations, kept: ``tests/durations.json`` (committed) and what it is used for.

- ``--write-durations`` (``make durations``) records each test file's wall time (setup + call +
  teardown of its tests, summed) and the slowest tests of the run into ``tests/durations.json``.
- Test files run longest first (a stable sort by the recorded time; a file not recorded yet counts as
  slow): with ``pytest -n N --dist loadfile`` the long files start at once instead of ending the run.
- A file recorded at ``FAST_FILE_S`` or more gets the ``slow`` marker, so ``-m "not slow"`` (``make
  test-fast``) is the tier a developer runs on every change; a file not recorded yet is slow too.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from pathlib import Path

import pytest

DURATIONS = Path(__file__).parents[1] / "durations.json"
FAST_FILE_S = 8.0  # a file whose tests take longer in all is in the full suite only
SLOWEST = 40  # tests named in the file


@functools.cache  # read once per process: both collection hooks and the recorder use it
def recorded() -> dict[str, float]:
    """Seconds per test file (``tests/...py``) from the committed file, as it was when the run started;
    {} when there is none."""
    try:
        return {k: float(v) for k, v in json.loads(DURATIONS.read_text())["files"].items()}
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


class _Recorder:
    def __init__(self) -> None:
        self.per_test: Counter[str] = Counter()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.per_test[report.nodeid] += report.duration

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if not self.per_test or getattr(session.config, "workerinput", None) is not None:
            return  # nothing ran, or an xdist worker (the controller writes)
        files = Counter()
        for nodeid, s in self.per_test.items():
            files[_file(nodeid)] += s
        merged = {**recorded(), **{f: round(s, 2) for f, s in files.items()}}  # a partial run updates its files
        DURATIONS.write_text(json.dumps({
            "note": "written by `make durations` (pytest --write-durations); seconds per test file, and the "
                    "slowest tests of the run that wrote it",
            "total_s": round(sum(merged.values()), 1),
            "files": dict(sorted(merged.items(), key=lambda kv: -kv[1])),
            "slowest": {k: round(v, 2) for k, v in self.per_test.most_common(SLOWEST)},
        }, indent=1) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("numprocesses", None):  # pytest-xdist: the longest files start first
        config.pluginmanager.register(_LongestFirst(), "swe-longest-first")
    if config.getoption("write_durations"):
        config.pluginmanager.register(_Recorder(), "swe-durations")
