"""Problem statements: symptom and reproducer, never the injected change's location."""

from __future__ import annotations

import random
from pathlib import Path

from env_server.taskgen.models import Mutation
from env_server.taskgen.statement import clean_message, leaks, problem_statement, source_of_test

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


def test_statement_has_symptom_and_reproducer_without_location(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_w.py").write_text(TEST_FILE)
    f2p = ["tests/test_w.py::test_empty", "tests/test_w.py::TestWindow::test_sizes[1]"]
    text = problem_statement("pkg", "1.0", tmp_path, f2p,
                             {f2p[0]: "AssertionError: assert [()] == []\n  at /x/pkg/core.py line 42"},
                             random.Random(0))
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


def test_lower_detail_levels_drop_code_then_message(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("def test_a():\n    assert f() == 1\n")
    args = ("pkg", "1.0", tmp_path, ["t.py::test_a"], {"t.py::test_a": "AssertionError: assert 2 == 1"})
    full, mid, low = (problem_statement(*args, random.Random(0), detail=d) for d in (2, 1, 0))
    assert "assert f() == 1" in full and "assert f() == 1" not in mid
    assert "assert 2 == 1" in mid and "assert 2 == 1" not in low
    assert "t.py::test_a" in low
