"""The suite's own scheduling and records (tests/support/timing.py, .ci/test.sh): files run longest first
under pytest-xdist as their recorded durations say, whatever their number of tests; a partial
``--write-durations`` run updates its own files and tests only; a filter that selects none of the
limit tests (``make test-fast``) still runs the rest. Checked on throwaway suites and on the script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TIMING = Path(__file__).resolve().parents[1] / "support" / "timing.py"


def _suite(root: Path, recorded: dict, tests: dict[str, int]) -> None:
    """A throwaway suite under ``root``: the plugin, ``recorded`` as its durations.json, and ``tests`` (file
    name -> number of empty tests); each test run appends its file's name to order.txt."""
    (root / "support").mkdir()
    (root / "support" / "__init__.py").write_text("")
    (root / "support" / "timing.py").write_text(TIMING.read_text())  # reads ../durations.json
    (root / "durations.json").write_text(json.dumps(recorded))
    (root / "conftest.py").write_text(
        "import os\n"
        "pytest_plugins = ['support.timing']\n"
        "def pytest_runtest_call(item):\n"
        "    with open(os.path.join(os.path.dirname(__file__), 'order.txt'), 'a') as f:\n"
        "        f.write(item.nodeid.split('::')[0] + '\\n')\n")
    for name, n in tests.items():
        (root / name).write_text("".join(f"def test_{i}():\n    pass\n" for i in range(n)))


def _pytest(root: Path, *args: str) -> None:
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=root,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr


def test_a_worker_runs_the_files_longest_first(tmp_path: Path) -> None:
    # short.py has the most tests (xdist's own reordering would put it first); unknown.py is not recorded
    tests = {"short.py": 5, "long.py": 1, "middle.py": 2, "unknown.py": 1}
    _suite(tmp_path, {"files": {"short.py": 1.0, "long.py": 50.0, "middle.py": 10.0}}, tests)
    _pytest(tmp_path, "-n", "1", "--dist", "loadfile", *tests)
    order = list(dict.fromkeys((tmp_path / "order.txt").read_text().split()))
    assert order == ["unknown.py", "long.py", "middle.py", "short.py"], order  # a file not recorded yet: slow


def test_a_partial_run_rewrites_only_its_own_files_and_tests(tmp_path: Path) -> None:
    before = {"files": {"a.py": 99.0, "b.py": 7.0}, "cpu_files": {"a.py": 9.0, "b.py": 3.0},
              "slowest": {"a.py::test_0": 99.0, "b.py::test_0": 7.0}}
    _suite(tmp_path, before, {"a.py": 1, "b.py": 1})
    _pytest(tmp_path, "--write-durations", "a.py")
    after = json.loads((tmp_path / "durations.json").read_text())
    assert after["files"]["b.py"] == 7.0 and after["files"]["a.py"] < 99.0, after
    assert after["cpu_files"]["b.py"] == 3.0, after
    assert after["slowest"]["b.py::test_0"] == 7.0 and after["slowest"]["a.py::test_0"] < 99.0, after
    assert list(after["slowest"]) == ["b.py::test_0", "a.py::test_0"], after  # still the slowest first


def test_a_filter_that_leaves_none_of_the_limit_tests_still_runs_the_rest() -> None:
    """`make test-fast` (`.ci/test.sh -m "not slow and not docker"`): the limit tests, which run first and
    alone, are all slow; that their run selects nothing is no failure, the rest's run decides."""
    script = Path(__file__).resolve().parents[2] / ".ci" / "test.sh"
    env = {**os.environ, "SWE_TEST_WORKERS": "1"}  # one worker collects the suite (each run collects it whole)
    run = subprocess.run(["bash", str(script), "-m", "not slow and not docker", "-k", "follows_the_naming_rule"],
                         capture_output=True, text=True, timeout=600, env=env)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "38 deselected" in out or "deselected / 0 selected" in out, out  # the limit tests: none selected
    assert "1 passed" in out, out
    nothing = subprocess.run(["bash", str(script), "-m", "not slow and not docker", "-k", "no_test_is_named_so"],
                             capture_output=True, text=True, timeout=600, env=env)
    assert nothing.returncode != 0 and "collected no tests" in nothing.stderr, nothing.stdout + nothing.stderr
