"""Reproducers and the statements written from them, on a real tiny package run by a real interpreter.

A statement must let an engineer find the bug without the tests: it names the public entry point
that misbehaves and carries a script that fails on the buggy tree and passes on the fixed one.
The builder tries the failing tests in turn and rejects a candidate (with the latest stage any
test reached) when none gives such a script.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from task_factory import reproducer
from task_factory.build import STATEMENT_REJECTIONS, _PackageBuilder
from task_factory.models import CandidateVerdict, Mutation, PackageSpec
from task_factory.statement import leaks, reproducer_block, reveals_tests
from task_factory.verdicts import VerdictCache

FIXED = '''from ._impl import window


class Box:
    def __init__(self, items):
        self.items = list(items)

    def first(self):
        return self.items[0]


def _helper(x):
    return x + 1
'''
BUGGY = FIXED.replace("self.items[0]", "self.items[1]").replace("x + 1", "x + 2")
IMPL_FIXED = '''def window(seq, n):
    if n < 0:
        raise ValueError("negative size")
    return [tuple(seq[i:i + n]) for i in range(len(seq) - n + 1)]
'''
TESTS = '''import pytest
from pkg import Box, _helper, window

CASES = (("abc", 3), ("", 0))


def test_window_empty():
    data = []
    assert window(data, 2) == []


@pytest.mark.parametrize(("text", "n"), CASES)
def test_lengths(text, n):
    assert n == len(window(text, 1))


def test_box_first():
    box = Box([1, 2])
    assert box.first() == 1


def test_with_fixture(tmp_path):
    assert window(tmp_path, 1) == []


class TestWindow:
    def test_raises(self):
        with pytest.raises(ValueError):
            window([1], -1)


def test_helper():
    assert _helper(1) == 2


def test_inlined():
    data = [n for n in range(3)]
    actual = window(data, 2)
    expected = [(0, 1), (1, 2)]
    assert actual == expected


def test_comprehension_raises():
    rows = [len(w) for w in window([1, 2], -1)]
    assert rows


def make_box(*items):
    return Box(list(items))


def test_box_from_a_helper():
    box = make_box(1, 2)
    assert box.first() == 1
'''
PYTHON = Path(sys.executable)


def make_tree(root: Path, init: str, impl: str = IMPL_FIXED) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "pkg" / "__init__.py").write_text(init)
    (root / "pkg" / "_impl.py").write_text(impl)
    (root / "tests" / "test_pkg.py").write_text(TESTS)
    return root


@pytest.fixture()
def trees(tmp_path: Path) -> tuple[Path, Path]:
    """(buggy tree, fixed tree): Box.first and _helper are wrong in the first, window lacks its check."""
    buggy = make_tree(tmp_path / "buggy", BUGGY, IMPL_FIXED.replace('        raise ValueError("negative size")\n',
                                                                    "        pass\n"))
    return buggy, make_tree(tmp_path / "fixed", FIXED)


def test_scripts_are_rewritten_from_the_failing_statement(trees: tuple[Path, Path]) -> None:
    repo = trees[1]
    r = reproducer.write(repo, "tests/test_pkg.py::test_window_empty")
    assert r is not None and (r.check, r.expected, r.callees) == ("equal", "[]", ("window",))
    assert r.code == ("from pkg import window\n\ndata = []\nresult = window(data, 2)\nprint(repr(result))\n"
                      "assert result == []")
    p = reproducer.write(repo, "tests/test_pkg.py::test_lengths[abc-3]")  # the parametrize case, from its id
    assert p is not None and p.callees == ("len", "window") and p.expected == "3"
    assert p.code == ("from pkg import window\n\ntext = 'abc'\nn = 3\nresult = len(window(text, 1))\n"
                      "print(repr(result))\nassert result == n")
    raising = reproducer.write(repo, "tests/test_pkg.py::TestWindow::test_raises")
    assert raising is not None and (raising.check, raising.expected) == ("raises", "ValueError")
    assert "except ValueError as exc:" in raising.code and "raise AssertionError" in raising.code
    # a checked name computed just before is checked as the call itself; comprehension variables are no free names
    inlined = reproducer.write(repo, "tests/test_pkg.py::test_inlined")
    assert inlined is not None and inlined.callees == ("window",)
    assert inlined.code == ("from pkg import window\n\ndata = [n for n in range(3)]\nexpected = [(0, 1), (1, 2)]\n"
                            "result = window(data, 2)\nprint(repr(result))\nassert result == expected")
    line = TESTS.splitlines().index("    rows = [len(w) for w in window([1, 2], -1)]") + 1
    computed = reproducer.write(repo, "tests/test_pkg.py::test_comprehension_raises", line)
    assert computed is not None and computed.check == "no_error"  # it failed while computing: it must not raise
    assert computed.code.endswith("result = [len(w) for w in window([1, 2], -1)]\nprint(repr(result))")
    helped = reproducer.write(repo, "tests/test_pkg.py::test_box_from_a_helper")  # the module's helper, copied
    assert helped is not None and helped.code == (
        "from pkg import Box\n\ndef make_box(*items):\n    return Box(list(items))\n\nbox = make_box(1, 2)\n"
        "result = box.first()\nprint(repr(result))\nassert result == 1")
    assert reproducer.write(repo, "tests/test_pkg.py::test_with_fixture") is None  # a fixture: cannot stand alone
    assert reproducer.write(repo, "tests/test_pkg.py::test_missing") is None


def test_a_script_fails_on_the_bug_passes_on_the_fix_and_names_its_entry_point(trees: tuple[Path, Path]) -> None:
    buggy, fixed = trees
    box = reproducer.write(fixed, "tests/test_pkg.py::test_box_first")
    assert box is not None
    on_bug, on_fix = (reproducer.run(box.code, PYTHON, t, callees=box.callees, packages=("pkg",))
                      for t in (buggy, fixed))
    assert on_bug.failed and on_bug.output == "2\nAssertionError" and "tmp" not in on_bug.output
    assert on_fix.passed and on_fix.output == "1"
    # a bound method is named by its object's class, as exported at the package's top level
    assert reproducer.entry_point(on_fix, ("pkg",)) == "pkg.Box.first"
    raising = reproducer.write(fixed, "tests/test_pkg.py::TestWindow::test_raises")
    assert raising is not None
    on_bug = reproducer.run(raising.code, PYTHON, buggy, callees=raising.callees, packages=("pkg",))
    on_fix = reproducer.run(raising.code, PYTHON, fixed, callees=raising.callees, packages=("pkg",))
    assert on_bug.failed and on_bug.output == "AssertionError: expected ValueError, got [(), (), ()]"
    assert on_fix.passed and "negative size" in on_fix.output
    assert reproducer.entry_point(on_fix, ("pkg",)) == "pkg.window"  # defined in pkg._impl, exported by pkg
    helper = reproducer.write(fixed, "tests/test_pkg.py::test_helper")
    assert helper is not None
    run = reproducer.run(helper.code, PYTHON, fixed, callees=helper.callees, packages=("pkg",))
    assert run.passed and [c.name for c in run.callees] == ["pkg._helper"]
    assert reproducer.entry_point(run, ("pkg",)) is None  # private: no entry point a user calls
    assert reproducer.entry_point(run, ("other",)) is None


def test_a_script_that_hangs_is_stopped(tmp_path: Path) -> None:
    run = reproducer.run("import time\ntime.sleep(60)", PYTHON, tmp_path, timeout_s=1)
    assert run.exit_code is None and not run.failed and not run.passed


def _builder(tmp_path: Path, tree: Path, operator: str = "flip_index") -> tuple[_PackageBuilder, Mutation]:
    spec = PackageSpec(name="pkg", version="1.0", license="MIT", source_files=("pkg/__init__.py",),
                       test_paths=("tests",))
    builder = _PackageBuilder(spec, tmp_path / "out", tmp_path / "cache", 0, lambda _msg: None)
    builder.work, builder.timeout = tree, 30.0
    builder.verdicts = VerdictCache(tmp_path / "cache", "synthetic-mutation", spec.key, "test")

    class Runner:  # the builder only reads the venv's location from its pytest runner here
        env = Path(sys.prefix)

    builder.runner = Runner()  # type: ignore[assignment]
    return builder, Mutation(path="pkg/__init__.py", function="Box.first", operator=operator, lineno=9, col=8)


def _statement(builder: _PackageBuilder, mut: Mutation, f2p: list[str]) -> tuple[str, object] | str:
    verdict = CandidateVerdict(accepted=True, fail_to_pass=f2p)
    return builder.write_statement(mut, BUGGY, FIXED, verdict, ["        return self.items[1]"], "pkg__1.0-x")


def test_the_builder_writes_the_statement_from_the_first_test_with_a_working_script(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "work", FIXED)
    builder, mut = _builder(tmp_path, tree)
    written = _statement(builder, mut, ["tests/test_pkg.py::test_with_fixture", "tests/test_pkg.py::test_box_first"])
    assert not isinstance(written, str), written
    statement, evidence = written
    first = statement.splitlines()[0]
    assert "pkg 1.0" in first and "`pkg.Box.first` gives a wrong result" in first
    assert reproducer_block(statement) == evidence.reproducer.code  # type: ignore[attr-defined]
    assert "Running it prints:\n\n```\n2\nAssertionError\n```" in statement and "I expected `1`." in statement
    assert "Related behaviour" in statement
    assert leaks(statement, mut, ["        return self.items[1]"]) == []
    assert reveals_tests(statement, tree, ["tests/test_pkg.py::test_box_first"]) == []
    assert (tree / "pkg" / "__init__.py").read_text() == FIXED  # the work tree is put back
    verbose = _PackageBuilder(builder.spec, tmp_path / "o2", tmp_path / "cache", 0, lambda _m: None, "verbose")
    verbose.work, verbose.timeout, verbose.verdicts, verbose.runner = tree, 30.0, builder.verdicts, builder.runner
    text, _ = _statement(verbose, mut, ["tests/test_pkg.py::test_box_first"])  # type: ignore[misc]
    assert "`tests/test_pkg.py::test_box_first` fails" in text and "def test_box_first" in text
    assert "`pkg.Box.first`" in text.splitlines()[0] and reproducer_block(text) is not None


@pytest.mark.parametrize(("f2p", "reason"), [
    (["test_with_fixture"], "no_reproducer"),
    (["test_window_empty"], "reproducer_passes_on_bug"),  # window is not what the change broke
    (["test_with_fixture", "test_window_empty"], "reproducer_passes_on_bug"),  # the latest stage reached
    (["test_helper"], "no_public_entry_point"),  # only a private helper shows the bug
])
def test_the_builder_rejects_a_candidate_without_a_working_script(tmp_path: Path, f2p: list[str],
                                                                    reason: str) -> None:
    builder, mut = _builder(tmp_path, make_tree(tmp_path / "work", FIXED))
    assert _statement(builder, mut, [f"tests/test_pkg.py::{t}" for t in f2p]) == reason
    assert reason in STATEMENT_REJECTIONS


def test_a_statement_that_would_leak_the_change_is_rejected(tmp_path: Path) -> None:
    builder, mut = _builder(tmp_path, make_tree(tmp_path / "work", FIXED), operator="result")  # in every script
    assert _statement(builder, mut, ["tests/test_pkg.py::test_box_first"]) == "statement_leaks"


def test_a_script_that_fails_on_the_fixed_tree_is_rejected(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "work", FIXED)
    builder, mut = _builder(tmp_path, tree)
    verdict = CandidateVerdict(accepted=True, fail_to_pass=["tests/test_pkg.py::test_box_first"])
    broken_fix = FIXED.replace("self.items[0]", "self.items[5]")  # the "fix" raises IndexError too
    assert builder.write_statement(mut, BUGGY, broken_fix, verdict, [], "x") == "reproducer_fails_on_fix"
