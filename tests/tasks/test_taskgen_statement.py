"""Problem statements: a user's bug report (or the verbose form), never the injected change's location."""

from __future__ import annotations

import random
from pathlib import Path

from task_factory.models import Mutation
from task_factory.statement import clean_message, leaks, problem_statement, reproducer, reveals_tests, source_of_test

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


def test_verbose_statement_has_test_source_and_error_without_location(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_w.py").write_text(TEST_FILE)
    f2p = ["tests/test_w.py::test_empty", "tests/test_w.py::TestWindow::test_sizes[1]"]
    text = problem_statement("pkg", "1.0", tmp_path, f2p,
                             {f2p[0]: "AssertionError: assert [()] == []\n  at /x/pkg/core.py line 42"},
                             random.Random(0), style="verbose")
    assert "tests/test_w.py::test_empty" in text and "assert window([], 2) == []" in text
    assert "AssertionError: assert [()] == []" in text
    assert "TestWindow::test_sizes[1]" in text
    assert leaks(text, MUT, ["        if n < 1:", "        if n >= 1:"]) == []


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


def test_lower_verbose_detail_levels_drop_code_then_message(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("def test_a():\n    assert f() == 1\n")
    args = ("pkg", "1.0", tmp_path, ["t.py::test_a"], {"t.py::test_a": "AssertionError: assert 2 == 1"})
    full, mid, low = (problem_statement(*args, random.Random(0), detail=d, style="verbose") for d in (2, 1, 0))
    assert "assert f() == 1" in full and "assert f() == 1" not in mid
    assert "assert 2 == 1" in mid and "assert 2 == 1" not in low
    assert "t.py::test_a" in low


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


def test_reproducer_is_rewritten_from_the_failing_assertion(tmp_path: Path) -> None:
    repo = _report_repo(tmp_path)
    r = reproducer(repo, "tests/test_w.py::test_empty")
    assert r is not None and r.expected == "[]"
    assert r.code == "from pkg.core import window\n\ndata = []\nsize = 2\nprint(window(data, size))  # I expect []"
    p = reproducer(repo, "tests/test_w.py::test_lengths[abc-3]")  # parametrize case resolved from its id
    assert p is not None
    assert p.code == "from pkg import helpers as h\n\ntext = 'abc'\nprint(h.length(text))  # I expect 3"
    raising = reproducer(repo, "tests/test_w.py::TestWindow::test_raises", line=26)
    assert raising is not None and raising.code.endswith("window([1], -1)") and raising.expected is None
    assert reproducer(repo, "tests/test_w.py::test_with_fixture") is None  # needs a fixture: no standalone code
    assert reproducer(repo, "tests/test_w.py::test_missing") is None


def test_report_statement_reads_like_a_user_and_hides_the_test(tmp_path: Path) -> None:
    repo = _report_repo(tmp_path)
    f2p = ["tests/test_w.py::test_empty", "tests/test_w.py::test_lengths[abc-3]"]
    msg = "AssertionError: assert [()] == []\n  +  where [()] = window([], 2)\n  at /x/pkg/core.py line 42"
    text = problem_statement("pkg", "1.0", repo, f2p, {f2p[0]: msg}, random.Random(0))
    assert "pkg 1.0" in text and "`window(data, size)` does not give what I expect" in text
    assert "print(window(data, size))  # I expect []" in text
    assert "Instead, I get `[()]`." in text and "AssertionError: assert [()] == []" in text
    assert "where [()]" not in text and "core.py" not in text  # pytest's introspection and paths are dropped
    assert "I expected `[]`." in text and "Related behaviour" in text
    assert "test_empty" not in text and "test_w.py" not in text and "def test_" not in text
    assert reveals_tests(text, repo, f2p) == []
    assert leaks(text, MUT, ["        if n < 1:", "        if n >= 1:"]) == []


def test_report_statement_for_an_exception_and_lower_detail(tmp_path: Path) -> None:
    repo = _report_repo(tmp_path)
    f2p = ["tests/test_w.py::TestWindow::test_raises"]
    msgs = {f2p[0]: "TypeError: '<' not supported between instances of 'NoneType' and 'int'"}
    full, mid, low = (problem_statement("pkg", "1.0", repo, f2p, msgs, random.Random(0), detail=d,
                                        lines={f2p[0]: 26}) for d in (2, 1, 0))
    assert "`window([1], -1)` raises `TypeError`" in full and "```python" in full
    assert "TypeError: '<' not supported" in full and "no exception" not in full
    assert "```python" not in mid and "TypeError: '<' not supported" in mid
    assert "```" not in low and "raises `TypeError`" in low
    for text in (full, mid, low):
        assert reveals_tests(text, repo, f2p) == []


def test_reveals_tests_finds_names_files_and_source(tmp_path: Path) -> None:
    repo = _report_repo(tmp_path)
    f2p = ["tests/test_w.py::test_empty"]
    assert reveals_tests("the test_empty check fails", repo, f2p) == ["names the test test_empty"]
    assert reveals_tests("see tests/test_w.py", repo, f2p) == ["names the test file tests/test_w.py"]
    assert "quotes the test test_empty" in reveals_tests("def test_empty():\n    data = []", repo, f2p)
