"""Reading the test process's log: every report shape pytest writes is read, and a hostile log
costs time linear in its size (no sandbox needed).

The log is the submission's output (up to 8 MB of anything). One 40 kB ``PASSED a<spaces>b``
line used to block the server for 14-31 s (a backtracking regular expression, quadratic in the
line); and a repository whose configuration colours the report (humanize's ``--color=yes``) had
its gold patch scored 0: the reader did not see through the colour codes.
"""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support.requirements import require_module

from verifier import harness, offload, pytest_log
from verifier.runner_config import _safe_addopts

MODULE = textwrap.dedent('''\
    import pytest


    @pytest.mark.parametrize("v", ["a b", "x[y] z", "é ü", "p - q", "a[b] - c", "[x] - [y]", "n[a[b]]"])
    def test_ids(v):
        assert "fail" not in v


    @pytest.mark.parametrize("v", ["fail a[b] - c", "fail é", "fail [x] - [y]"])
    def test_failing(v):
        assert "fail" not in v, "a message - with [brackets] - and dashes"


    @pytest.mark.xfail(reason="known - [bug]")
    def test_xfail():
        assert 0


    def test_plain():
        pass
    ''')
EXPECTED = {
    **{f"test_r.py::test_ids[{v}]": ["passed"] for v in ("a b", "x[y] z", "\\xe9 \\xfc", "p - q", "a[b] - c",
                                                          "[x] - [y]", "n[a[b]]")},
    **{f"test_r.py::test_failing[{v}]": ["failed"] for v in ("fail a[b] - c", "fail \\xe9", "fail [x] - [y]")},
    "test_r.py::test_xfail": ["xfailed"], "test_r.py::test_plain": ["passed"],
}
# addopts a repository may set: colour, every verbosity, its own report characters
ADDOPTS = ["", "--color=yes", "-qq", "-q -q -q", "-v", "-vv --color=yes", "-rfE -q --color=yes", "-rN",
           "--tb=no --color=yes"]


@pytest.mark.parametrize("addopts", ADDOPTS, ids=lambda a: a or "none")
def test_every_report_shape_of_real_pytest_reads_the_same(tmp_path, addopts):
    (tmp_path / "test_r.py").write_text(MODULE, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text(f"[pytest]\naddopts = {addopts}\nconsole_output_style = count\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PY_COLORS", "FORCE_COLOR", "NO_COLOR"))}
    log = subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "test_r.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True).stdout
    assert ("\x1b[" in log) == ("--color=yes" in addopts), log
    assert pytest_log.summary(log) == EXPECTED, log
    # what the dataset holds: ids cut at their first space
    assert pytest_log.lookup("test_r.py::test_failing[fail", pytest_log.summary(log)) == "failed"
    assert pytest_log.lookup("test_r.py::test_ids[n[a[b]]]", pytest_log.summary(log)) == "passed"


def test_summary_lines_keep_their_ids_whatever_follows():
    log = "\n".join([
        "FAILED t.py::test_x[a[b] - c] - assert [1] - 2",  # nested brackets with " - ", then a message
        "FAILED t.py::test_y[a]] - x",  # a parameter id that closes more than it opens
        "FAILED t.py::test_z[[x, y] - assert 0",  # one that opens more than it closes
        "ERROR t.py::test_e[\\xe9 e] - fixture 'x' not found",
        "PASSED t.py::test_p[a] - b]",  # a PASSED line carries no message: all of it is the id
        "XFAIL t.py::test_q - reason [r] - s",
        "\x1b[32mPASSED\x1b[0m t.py::\x1b[1mtest_c[a b]\x1b[0m\r",  # coloured, and a stray carriage return
        "\x1b[31mFAILED\x1b[0m t.py::\x1b[1mtest_d[a - b]\x1b[0m - \x1b[31massert 0\x1b[0m",
        "SKIPPED [1] t.py:3: no network",  # no id
        "PASSEDt.py::test_no_space", "PASSED", "  PASSED t.py::test_indented",  # not summary lines
        "PASSED t.py::test_u[é\u2028x]",  # a line separator of another kind inside an id
        "ERROR t.py - ImportError: no module",  # a module that does not import
    ])
    assert pytest_log.summary(log) == {
        "t.py::test_x[a[b] - c]": ["failed"], "t.py::test_y[a]]": ["failed"], "t.py::test_z[[x, y]": ["failed"],
        "t.py::test_e[\\xe9 e]": ["error"], "t.py::test_p[a] - b]": ["passed"], "t.py::test_q": ["xfailed"],
        "t.py::test_c[a b]": ["passed"], "t.py::test_d[a - b]": ["failed"], "t.py::test_u[é\u2028x]": ["passed"],
        "t.py": ["error"],
    }
    selected = ["tests/t.py::test_a[1]", "tests/t.py::test_b"]
    coloured = "\x1b[31mERROR: not found: /workspace/tests/t.py::test_a\x1b[0m\n"
    assert pytest_log.not_found(coloured, selected) == {"tests/t.py::test_a"}


def test_a_forged_log_gives_few_short_reasons():
    line = "PASSED t.py::test_" + "x" * 1_000
    log = "\n".join(f"{line}{i}\n{line}{i}" for i in range(1000))
    reasons = pytest_log.conflicts(pytest_log.summary(log))
    assert len(reasons) == pytest_log.MAX_REASONS + 1 and reasons[-1].startswith("and 990 more")
    assert sum(map(len, reasons)) < 5_000, reasons[0]


def test_runner_config_drops_what_hides_the_summary():
    kept, dropped = _safe_addopts("--color=yes -q -vv -rfE --no-summary -p no:terminal --tb=no")
    assert kept == ["--color=yes", "-q", "-vv", "-rfE", "--tb=no"] and dropped == ["--no-summary", "-p", "no:terminal"]


# -- linear time ----------------------------------------------------------------------------------------
def hostile_log(size: int) -> str:
    """``size`` characters of lines crafted against backtracking readers: 32 lines each ``size / 256`` long
    (so a reader quadratic in a line's length takes 64 times longer on 8 times the log), the rest short
    summary lines (about 20 000 a megabyte)."""
    w = size // 256
    wide = [
        "PASSED a" + " " * w + "b",
        "FAILED t.py::x[" + "] " * (w // 2),
        "FAILED t.py::x[" + "[" * w + " - m",
        "ERROR: not found: " + " " * w + "x",
        "ERROR: not found: /" + "a/" * (w // 2),
        "\x1b[32mPASSED\x1b[0m t.py::" + "\x1b[1" * (w // 3),
        "XFAIL t.py::q[" + "a - " * (w // 4),
        "PASSED t.py::" + "a" * w,
    ]
    short = [f"PASSED tests/t.py::test_{i}[a b]\nFAILED tests/t.py::test_{i}[c - d] - x" for i in range(size // 86)]
    return "\n".join(wide * 4 + short)


def _read(log: str) -> None:
    """Everything the pytest grader does with a log (grade._pytest_verdict, grade._Graded.reselect)."""
    tests = [f"tests/t.py::test_{i}[a" for i in range(300)]
    reported = pytest_log.rename_back(pytest_log.normalise(pytest_log.summary(log), {"tests/t.py", "t.py"}),
                                      {"tests/t.py::test_1": "tests/t.py::test_fresh"})
    pytest_log.conflicts(reported)
    for test in tests:
        pytest_log.lookup(test, reported)
    for test in tests[:20]:
        pytest_log.instances(test.partition("[")[0], reported)
    pytest_log.not_found(log, tests + ["a/b.py::c"])


def _linear(fn) -> None:
    """``fn`` reads an 8 MB hostile log in at most 4 times 8 times the CPU time it takes on 1 MB: a
    linear reader takes 8 to 16 times (the larger log outgrows the caches), one quadratic in the length
    of a line 64 times or more. CPU time of this process, the least of three rounds alternating the two
    sizes, so that other work on the machine weighs on both alike. The garbage collector is off while
    ``fn`` runs: its full collections walk this test process's whole heap (a suite worker's holds torch
    and transformers; the grader reads logs in a small worker process, ``verifier/offload.py``), so
    they grew with what else the worker had imported, not with the log (38x once in the suite, 11x
    alone)."""
    small, large = hostile_log(1 << 20), hostile_log(8 << 20)
    assert 7.5 < len(large) / len(small) < 8.5
    best = {1: float("inf"), 8: float("inf")}
    for _ in range(3):
        for n, log in ((1, small), (8, large)):
            gc.collect()
            gc.disable()
            try:
                start = time.process_time()
                fn(log)
                best[n] = min(best[n], time.process_time() - start)
            finally:
                gc.enable()
    assert best[8] < 32 * best[1], best


def test_reading_a_hostile_log_takes_time_linear_in_its_size():
    _linear(_read)


def test_the_harness_reads_a_hostile_log_in_linear_time():
    require_module("swebench", "datasets", "the harness grader reads logs with swebench's parsers (extra 'datasets')")
    tests = ["tests/t.py::test_1[a", "tests/t.py::test_2[c", "t.py::x["]

    def read(log: str) -> None:
        report = harness.parse_log("parse_log_pytest", log, tests)
        harness.check_log("parse_log_pytest", log, report, {"exit_code": 1}, tests)

    _linear(read)


# -- off the server's process ---------------------------------------------------------------------------
def _pid_then_sleep(path: str, seconds: float) -> None:
    Path(path).write_text(str(os.getpid()))
    time.sleep(seconds)


def test_the_log_is_read_in_a_worker_process(tmp_path):
    async def main() -> None:
        reported = await offload.run(pytest_log.summary, "PASSED t.py::test_a\n", on_timeout=lambda: None)
        assert reported == {"t.py::test_a": ["passed"]}
        pids = {await offload.run(os.getpid, on_timeout=lambda: None) for _ in range(4)}
        assert os.getpid() not in pids and len(pids) <= offload.WORKERS
        with pytest.raises(FileNotFoundError):  # an exception of the call is the caller's
            await offload.run(Path(tmp_path / "missing").read_text, on_timeout=lambda: None)
        # past its time limit: answered by on_timeout and its worker killed; another call runs meanwhile
        marker = tmp_path / "pid"
        started = time.monotonic()
        slow = offload.run(_pid_then_sleep, str(marker), 120, on_timeout=lambda: "too slow", timeout_s=2)
        answers = await asyncio.gather(slow, offload.run(os.getpid, on_timeout=lambda: None))
        assert answers[0] == "too slow" and answers[1] != os.getpid() and time.monotonic() - started < 60
        with pytest.raises(ProcessLookupError):
            os.kill(int(marker.read_text()), 0)
        assert await offload.run(os.getpid, on_timeout=lambda: None) != os.getpid()

    asyncio.run(main())
