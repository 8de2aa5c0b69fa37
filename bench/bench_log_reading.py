"""Log-reading benchmark: the CPU time the grader takes to read a hostile test log, by size.

    .venv/bin/python bench/bench_log_reading.py [--before REF] [--sizes 0.125,1,2,4,8]

The log is the submission's output (up to the 8 MB output limit), so its shape is the attacker's.
Each size is a log of lines crafted against backtracking readers (32 lines each 1/256 of the log:
runs of spaces after a status word, brackets, colour codes, ``ERROR: not found`` lines; the rest
short summary lines). Timed (CPU time, best of 3): everything the pytest grader does with a log
(``pytest_log``: summary, normalise, rename_back, conflicts, a lookup per required test, not_found)
and, with swebench installed, the harness path (``harness.parse_log`` and ``check_log`` with
``parse_log_pytest``). Linear reading: the time per MB stays flat as the log grows.

``--before REF``: also the ``pytest_log.py`` of a git ref (e.g. the one before the linear reader),
on the sizes that finish within ``--cap`` seconds (a quadratic reader is stopped at the first size
past it).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from machine import pipe_round_trip_us  # noqa: E402

from verifier import harness, pytest_log  # noqa: E402

TESTS = [f"tests/t.py::test_{i}[a" for i in range(300)]


def hostile_log(size: int) -> str:
    w = size // 256
    wide = ["PASSED a" + " " * w + "b", "FAILED t.py::x[" + "] " * (w // 2), "FAILED t.py::x[" + "[" * w + " - m",
            "ERROR: not found: " + " " * w + "x", "ERROR: not found: /" + "a/" * (w // 2),
            "\x1b[32mPASSED\x1b[0m t.py::" + "\x1b[1" * (w // 3), "XFAIL t.py::q[" + "a - " * (w // 4),
            "PASSED t.py::" + "a" * w]
    short = [f"PASSED tests/t.py::test_{i}[a b]\nFAILED tests/t.py::test_{i}[c - d] - x" for i in range(size // 86)]
    return "\n".join(wide * 4 + short)


def pytest_path(module):
    def read(log: str) -> None:
        reported = module.rename_back(module.normalise(module.summary(log), {"tests/t.py", "t.py"}),
                                      {"tests/t.py::test_1": "tests/t.py::test_fresh"})
        module.conflicts(reported)
        for test in TESTS:
            module.lookup(test, reported)
        module.not_found(log, TESTS)
    return read


def harness_path(log: str) -> None:
    report = harness.parse_log("parse_log_pytest", log, TESTS[:3])
    harness.check_log("parse_log_pytest", log, report, {"exit_code": 1}, TESTS[:3])


def cpu_seconds(fn, log: str, reps: int = 3) -> float:
    best = float("inf")
    for _ in range(reps):
        start = time.process_time()
        fn(log)
        best = min(best, time.process_time() - start)
    return best


def reader_at(ref: str):
    """``verifier/pytest_log.py`` at git ``ref``, imported on its own (its ``.junit`` import stubbed)."""
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:verifier/pytest_log.py"], check=True,
                          capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp(prefix="log-reader-")) / "pytest_log_before.py"
    path.write_text(text.replace("from .junit import Outcome", "Outcome = str"))
    spec = importlib.util.spec_from_file_location("pytest_log_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="0.125,1,2,4,8", help="log sizes in MB, comma-separated")
    ap.add_argument("--before", metavar="REF", help="also time the reader of this git ref")
    ap.add_argument("--cap", type=float, default=30.0, help="stop the --before reader past this many seconds")
    a = ap.parse_args()
    sizes = [float(s) for s in a.sizes.split(",")]
    try:
        harness.parser("parse_log_pytest")
        paths = {"pytest grader": pytest_path(pytest_log), "harness (parse_log_pytest)": harness_path}
    except harness.HarnessError:
        paths = {"pytest grader": pytest_path(pytest_log)}
    if a.before:
        paths[f"pytest grader at {a.before}"] = pytest_path(reader_at(a.before))
    rtt = pipe_round_trip_us()
    print(f"log-reading bench: hostile logs, CPU time (best of 3); pipe round trip {rtt:.1f} us")
    print(f"{'reader':34} " + " ".join(f"{s:>9g} MB" for s in sizes))
    for name, fn in paths.items():
        before = name.startswith("pytest grader at")
        cells: list[str] = []
        stopped = False
        for size in sizes:
            if stopped:
                cells.append("stopped")
                continue
            seconds = cpu_seconds(fn, hostile_log(int(size * (1 << 20))), 1 if before else 3)
            cells.append(f"{seconds:.3f}s")
            stopped = before and seconds >= a.cap
        print(f"{name:34} " + " ".join(f"{c:>12}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
