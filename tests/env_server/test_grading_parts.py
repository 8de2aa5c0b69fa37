"""Diff filtering/normalising and JUnit parsing (the pure parts of grading)."""

from __future__ import annotations

import pytest

from verifier.diffs import filter_diff, normalize_diff, split_diff
from verifier.junit import JUnitError, case_key, outcomes_for, parse_junit


def block(path: str, body: str = "@@ -1 +1 @@\n-a\n+b\n") -> str:
    return f"diff --git a/{path} b/{path}\nindex 1..2 100644\n--- a/{path}\n+++ b/{path}\n{body}"


def test_filter_drops_binary_bytecode_and_test_files():
    binary = "diff --git a/img.png b/img.png\nnew file mode 100644\nBinary files /dev/null and b/img.png differ\n"
    diff = (block("pkg/mod.py") + binary + block("pkg/__pycache__/mod.cpython-311.pyc") + block("tests/test_a.py")
            + block("pkg/conftest.py") + block("test_six.py") + block("pkg/other.py"))
    kept, dropped = filter_diff(diff, protected={"pkg/other.py"})
    assert [b.new_path for b in split_diff(kept)] == ["pkg/mod.py"]
    assert dropped == ["img.png (binary)", "pkg/__pycache__/mod.cpython-311.pyc (bytecode)",
                       "tests/test_a.py (test file)", "pkg/conftest.py (test-runner configuration)", "test_six.py (test file)",
                       "pkg/other.py (test file)"]


def test_normalize_ignores_index_lines_and_crlf():
    a = block("m.py")
    b = a.replace("index 1..2", "index 9..8").replace("\n", "\r\n")
    assert normalize_diff(a) == normalize_diff(b) != normalize_diff(block("n.py"))


JUNIT = """<?xml version="1.0"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_x.TestA" name="test_b[1-2]"/>
<testcase classname="tests.test_x" name="test_f"><failure message="boom"/></testcase>
<testcase classname="tests.test_x" name="test_e"><error message="fixture"/></testcase>
<testcase classname="tests.test_x" name="test_s"><skipped message="no"/></testcase>
<testcase classname="tests.test_x" name="test_xf"><skipped type="pytest.xfail" message="x"/></testcase>
</testsuite></testsuites>"""


def test_parse_junit_and_map_node_ids():
    report = parse_junit(JUNIT)
    assert case_key("tests/test_x.py::TestA::test_b[1-2]") == "tests.test_x.TestA::test_b[1-2]"
    got = outcomes_for(["tests/test_x.py::TestA::test_b[1-2]", "tests/test_x.py::test_f", "tests/test_x.py::test_e",
                        "tests/test_x.py::test_s", "tests/test_x.py::test_xf", "tests/test_x.py::test_gone",
                        "tests/test_x.py"], report)
    assert got == {"tests/test_x.py::TestA::test_b[1-2]": "passed", "tests/test_x.py::test_f": "failed",
                   "tests/test_x.py::test_e": "error", "tests/test_x.py::test_s": "skipped",
                   "tests/test_x.py::test_xf": "xfailed", "tests/test_x.py::test_gone": "missing",
                   "tests/test_x.py": "failed"}


@pytest.mark.parametrize("text", ["not xml", "<html></html>"])
def test_bad_reports_raise(text):
    with pytest.raises(JUnitError):
        parse_junit(text)


def test_harness_runner_paths_are_dropped_per_parser():
    from verifier.harness import runner_paths

    def block(path: str) -> str:
        return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-a\n+b\n"

    diff = block("bin/test") + block("sympy/core/add.py")
    kept, dropped = filter_diff(diff, runner=runner_paths("parse_log_sympy"))
    assert dropped == ["bin/test (the harness's test runner)"] and "sympy/core/add.py" in kept
    kept, dropped = filter_diff(diff, runner=runner_paths("parse_log_django"))  # another harness: bin/test is code
    assert dropped == [] and "bin/test" in kept


def test_harness_log_checks_catch_forged_and_inconsistent_logs():
    from verifier import harness

    t = "test_x (m.C.test_x)"
    real = f"{t} ... FAIL\n"
    forged = f"{t} ... ok\n" + real
    report = harness.parse_log("parse_log_django", forged)
    reasons = harness.check_log("parse_log_django", forged, report, {"exit_code": 1}, [t])
    assert any("both" in r for r in reasons)
    ok_log = f"{t} ... ok\n"
    assert harness.check_log("parse_log_django", ok_log, harness.parse_log("parse_log_django", ok_log),
                             {"exit_code": 0}, [t]) == []
    # a failing exit with nothing failing in the log: forged or truncated
    assert harness.check_log("parse_log_django", ok_log, harness.parse_log("parse_log_django", ok_log),
                             {"exit_code": 1}, [t])
