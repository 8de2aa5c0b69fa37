"""The suite's files run longest first under pytest-xdist (tests/support/timing.py), as their recorded
durations say, whatever their number of tests: checked on a throwaway suite run with ``-n 1``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TIMING = Path(__file__).resolve().parents[1] / "support" / "timing.py"


def test_a_worker_runs_the_files_longest_first(tmp_path: Path) -> None:
    (tmp_path / "support").mkdir()
    (tmp_path / "support" / "__init__.py").write_text("")
    (tmp_path / "support" / "timing.py").write_text(TIMING.read_text())  # reads ../durations.json
    # short.py has the most tests (xdist's own reordering would put it first); unknown.py is not recorded
    recorded = {"short.py": 1.0, "long.py": 50.0, "middle.py": 10.0}
    (tmp_path / "durations.json").write_text(json.dumps({"files": recorded}))
    (tmp_path / "conftest.py").write_text(
        "import os\n"
        "pytest_plugins = ['support.timing']\n"
        "def pytest_runtest_call(item):\n"
        "    with open(os.path.join(os.path.dirname(__file__), 'order.txt'), 'a') as f:\n"
        "        f.write(item.nodeid.split('::')[0] + '\\n')\n")
    tests = {"short.py": 5, "long.py": 1, "middle.py": 2, "unknown.py": 1}
    for name, n in tests.items():
        (tmp_path / name).write_text("".join(f"def test_{i}():\n    pass\n" for i in range(n)))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "1", "--dist",
                          "loadfile", *tests], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    order = list(dict.fromkeys((tmp_path / "order.txt").read_text().split()))
    assert order == ["unknown.py", "long.py", "middle.py", "short.py"], order  # a file not recorded yet: slow
