"""Problem statements: a user's bug report (or the verbose form), never the injected change's location.

How statements are written from a verified reproducer: tests/tasks/test_taskgen_reproducer.py."""

from __future__ import annotations

from pathlib import Path

from task_factory.models import Mutation
from task_factory.statement import clean_message, leaks, reveals_tests, source_of_test

MUT = Mutation(path="pkg/core.py", function="window", operator="flip_comparison", lineno=42, col=8, variant=">=")

TEST_FILE = '''import pytest
from pkg import window


class TestWindow:
    @pytest.mark.parametrize("n", [1, 2])
    def test_sizes(self, n):
        assert len(window([1, 2, 3], n)[0]) == n


def test_empty():
    assert window([], 2) == []
'''


def test_test_source_finds_methods_functions_and_params(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_w.py").write_text(TEST_FILE)
    src = source_of_test(tmp_path, "tests/test_w.py::TestWindow::test_sizes[2]")
    assert src is not None and src.startswith('@pytest.mark.parametrize("n", [1, 2])\ndef test_sizes')
    assert source_of_test(tmp_path, "tests/test_w.py::test_empty") == TEST_FILE.split("\n\n\n")[-1].strip()
    assert source_of_test(tmp_path, "tests/test_w.py::test_missing") is None
    assert source_of_test(tmp_path, "tests/nope.py::test_empty") is None


def test_clean_message_drops_paths_and_line_numbers() -> None:
    msg = 'File "/home/u/proj/pkg/core.py", line 42, in window\nIndexError: list index out of range'
    out = clean_message(msg)
    assert "core.py" not in out and "line 42" not in out and "IndexError: list index out of range" in out


def test_leaks_detects_each_kind_of_giveaway() -> None:
    assert leaks("see pkg/core.py", MUT, []) == ["names the modified file"]
    assert leaks("in core.py somewhere", MUT, []) == ["names the modified file's basename"]
    assert leaks("test_core.py fails", MUT, []) == []
    top = MUT.model_copy(update={"path": "six.py"})
    assert leaks("`test_six.py::test_x` fails", top, []) == []  # a test file named after it is fine
    assert "names the modified file" in leaks("bug in six.py", top, [])
    assert leaks("crash at line 42", MUT, []) == ["names the modified line number"]
    assert leaks("a flip_comparison bug", MUT, []) == ["names the injection operator"]
    assert leaks("x\n    if len(seq) < n:\n", MUT, ["    if len(seq) < n:"]) == ["quotes a changed source line"]


REPORT_TESTS = '''import pytest
from pkg.core import window
from pkg import helpers as h

CASES = (("abc", 3), ("", 0))


def test_empty():
    data = []
    size = 2
    assert window(data, size) == []


@pytest.mark.parametrize(("text", "n"), CASES)
def test_lengths(text, n):
    assert n == h.length(text)


def test_with_fixture(tmp_path):
    assert window(tmp_path, 1) == []


class TestWindow:
    def test_raises(self):
        with pytest.raises(ValueError):
            window([1], -1)
'''


def _report_repo(tmp_path: Path) -> Path:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_w.py").write_text(REPORT_TESTS)
    return tmp_path


def test_reveals_tests_finds_names_files_and_source(tmp_path: Path) -> None:
    repo = _report_repo(tmp_path)
    f2p = ["tests/test_w.py::test_empty"]
    assert reveals_tests("the test_empty check fails", repo, f2p) == ["names the test test_empty"]
    assert reveals_tests("see tests/test_w.py", repo, f2p) == ["names the test file tests/test_w.py"]
    assert "quotes the test test_empty" in reveals_tests("def test_empty():\n    data = []", repo, f2p)
