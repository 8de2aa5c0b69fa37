"""Bug-injection operators, case by case, on small real snippets."""

from __future__ import annotations

import ast
import difflib
import random

import pytest

from task_factory.build import seeded_order
from task_factory.mutate import OPERATORS, apply_edit, find_mutations


def mutants(src: str, operator: str) -> list[str]:
    return [apply_edit(src, e) for m, e in find_mutations(src, "m.py") if m.operator == operator]


def changed_lines(a: str, b: str) -> list[str]:
    return [line for line in difflib.ndiff(a.splitlines(), b.splitlines()) if line[:1] in "+-"]


@pytest.mark.parametrize(("src", "expected"), [
    ("def f(a, b):\n    return a < b\n", "a >= b"),
    ("def f(a, b):\n    return a >= b\n", "a < b"),
    ("def f(a, b):\n    return (a) == b\n", "(a) != b"),
    ("def f(a, b):\n    return a not in b\n", "a in b"),
    ("def f(a, b):\n    return a is None\n", "a is not None"),
])
def test_flip_comparison(src: str, expected: str) -> None:
    assert any(expected in m for m in mutants(src, "flip_comparison"))


def test_flip_boolean_and_arith_and_not() -> None:
    src = "def f(a, b):\n    if not a and b:\n        return a + b\n    return a - 1\n"
    assert "if not a or b:" in mutants(src, "flip_boolean")[0]
    arith = mutants(src, "flip_arith")
    assert any("return a - b" in m for m in arith) and any("return a + 1" in m for m in arith)
    assert "if a and b:" in mutants(src, "remove_not")[0]


def test_flip_arith_skips_string_concatenation() -> None:
    assert mutants("def f(a):\n    return 'x' + a\n", "flip_arith") == []


def test_off_by_one_and_slice_bound() -> None:
    src = "def f(xs, n):\n    return xs[1:n], range(0)\n"
    obo = mutants(src, "off_by_one")
    assert any("xs[0:n]" in m for m in obo) and any("range(1)" in m for m in obo)
    assert any("xs[1:(n - 1)]" in m for m in mutants(src, "slice_bound"))


def test_swap_args_keeps_the_separator() -> None:
    src = "def f(a, b):\n    return divmod(a,  b)\n"
    assert mutants(src, "swap_args") == ["def f(a, b):\n    return divmod(b,  a)\n"]
    assert mutants("def f(a):\n    return g(a, a)\n", "swap_args") == []


def test_drop_branch_deletes_a_whole_if_block_only_when_safe() -> None:
    src = ("def f(x):\n    # keep me\n    if x > 3:\n        x = 3\n        x += 1\n    return x\n")
    (m,) = mutants(src, "drop_branch")
    assert m == "def f(x):\n    # keep me\n    return x\n"
    assert mutants("def f(x):\n    if x:\n        return 1\n", "drop_branch") == []  # only statement
    assert mutants("def f(x):\n    if x:\n        x = 1\n    else:\n        x = 2\n    return x\n", "drop_branch") == []


def test_drop_return_value_and_wrong_default() -> None:
    src = "def f(a, n=2, flag=False, name='x'):\n    return a * n\n"
    assert mutants(src, "drop_return_value") == ["def f(a, n=2, flag=False, name='x'):\n    return\n"]
    defaults = mutants(src, "wrong_default")
    assert sorted(d.splitlines()[0] for d in defaults) == [
        "def f(a, n=2, flag=True, name='x'):", "def f(a, n=3, flag=False, name='x'):"]


def test_only_function_bodies_are_mutated() -> None:
    src = "X = 1 < 2\nclass C:\n    Y = 3\n    def m(self):\n        return self.Y < 4\n"
    muts = find_mutations(src, "m.py")
    assert muts and all(m.function == "C.m" for m, _ in muts)
    assert all(m.lineno == 5 for m, _ in muts)


def test_edits_are_minimal_parse_and_handle_non_ascii_columns() -> None:
    src = ('def f(s, t):\n    """Docstring kept."""\n    u = "héllo wörld"; return u < t  # trailing comment\n')
    muts = find_mutations(src, "m.py")
    ops = {m.operator for m, _ in muts}
    assert {"flip_comparison"} <= ops
    for mut, edit in muts:
        new = apply_edit(src, edit)
        ast.parse(new)
        if mut.operator != "drop_branch":
            assert len(changed_lines(src, new)) == 2, (mut, new)
        assert "# trailing comment" in new and '"""Docstring kept."""' in new
    flipped = next(apply_edit(src, e) for m, e in muts if m.operator == "flip_comparison")
    assert 'u = "héllo wörld"; return u >= t  # trailing comment' in flipped


def test_every_operator_fires_on_real_looking_code() -> None:
    src = '''
def window(seq, n=2, strict=False):
    """Sliding windows."""
    out = []
    if n < 1:
        raise ValueError("n")
    for i in range(len(seq) - n + 1):
        if not strict and seq[i:i + n]:
            out.append(tuple(seq[i:i + n]))
    keep = min(len(out), n)
    return out[:keep]
'''
    ops = {m.operator for m, _ in find_mutations(src, "m.py")}
    assert ops == set(OPERATORS)


def test_find_mutations_is_deterministic_and_ids_unique() -> None:
    src = "def f(a, b=1):\n    if a:\n        a = a + b\n    return max(a, b) > 2 and a\n"
    one, two = find_mutations(src, "m.py"), find_mutations(src, "m.py")
    assert [m.id for m, _ in one] == [m.id for m, _ in two]
    assert len({m.id for m, _ in one}) == len(one)


def test_seeded_order_is_deterministic_per_seed_and_interleaves_operators() -> None:
    groups = {(True, op): [f"{op}{i}" for i in range(5)] for op in ("a", "b", "c")}
    groups[(False, "a")] = ["late0", "late1"]
    order = lambda seed: list(seeded_order(groups, random.Random(seed)))  # noqa: E731
    assert order(1) == order(1)
    assert order(1) != order(2)
    first = order(3)
    assert {x[0] for x in first[:3]} == {"a", "b", "c"}  # one of each operator first
    assert set(first[-2:]) == {"late0", "late1"}  # functions the tests name come first
    assert sorted(first) == sorted(x for g in groups.values() for x in g)
