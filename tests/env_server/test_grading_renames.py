"""Renaming the required tests must never break the suite they belong to.

The grader runs every required test under a fresh name (canary.py), so code under test
cannot aim at a name. Two real suites broke under it (the gold patch scored 0.0):

- idna: ``tests/test_idna_codec.py`` calls ``self.idnatests.test_decode(...)``, a method of
  ``tests/test_idna.py``: the rename made it an ``AttributeError``. A test used by name from
  another file (another test module, a conftest, a helper) keeps its name.
- cachetools: the test classes inherit most tests from a mixin in ``tests/__init__.py``; a fresh
  name made of the module's words (``test_update``, ``test_clear``) was an inherited test's
  name, so the canary or the renamed test shadowed it. Fresh names avoid every name of the
  files the grader reads and every required test's name.

Each case is a small repository graded for real (bwrap sandbox, the real grader): the gold
patch must score 1.0 on every draw and an empty diff 0.0; the planning rules are checked too.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from env_support import requires_sandbox, run
from support.git_repos import commit_files, diff_to

from sandbox import SandboxConfig
from verifier import GradeCache, grade_submission
from verifier.canary import plan_canaries, support_pathspecs
from verifier.task import TaskInstance

DRAWS = 4  # the planting is random: grade the gold patch several times


def _task(tmp: Path, files: dict[str, str], fixed: dict[str, str], f2p: list[str], p2p: list[str],
          python_env: Path | None) -> TaskInstance:
    """A one-commit repository holding ``files`` (the bug) and the gold patch turning it into ``fixed``."""
    repo = tmp / "repo"
    base = commit_files(repo, {path: textwrap.dedent(text) for path, text in files.items()})
    gold = diff_to(repo, {path: textwrap.dedent(text) for path, text in fixed.items()})
    return TaskInstance(instance_id=f"renames__{tmp.name}", problem_statement="fix it", repo_path=repo,
                        base_commit=base, python_env=python_env, patch=gold, FAIL_TO_PASS=f2p, PASS_TO_PASS=p2p)


def _grade(task: TaskInstance, diff: str):
    return run(grade_submission(task, diff, SandboxConfig(backend="bwrap"), cache=GradeCache()))


def _gold_always_resolves_and_empty_does_not(task: TaskInstance) -> None:
    for _ in range(DRAWS):
        res = _grade(task, task.patch)
        assert res.reward == 1.0 and res.resolved, (res.error, res.tamper_reasons,
                                                    {**res.fail_to_pass, **res.pass_to_pass}, res.log_tail)
    empty = _grade(task, "")
    assert empty.reward == 0.0 and not empty.tampered and empty.error is None, empty
    assert {t: o for t, o in empty.fail_to_pass.items() if o != "failed"} == {}, empty.fail_to_pass
    assert set(empty.pass_to_pass.values()) == {"passed"}, empty.pass_to_pass


# -- a required test used by name from another test module (idna) --------------------------------
CODEC = {
    "calc.py": """\
        def encode(text):
            return text.upper()


        def decode(text):
            return text.lower()
        """,
    "tests/__init__.py": "",
    "tests/test_calc.py": """\
        import unittest

        from calc import decode, encode


        class CalcTests(unittest.TestCase):
            def test_encode(self, encode=encode):
                self.assertEqual(encode("ab"), "AB!")
                self.assertEqual(encode("c"), "C!")

            def test_decode(self, decode=decode):
                self.assertEqual(decode("AB"), "ab")
                self.assertEqual(decode("C"), "c")

            def test_roundtrip(self):
                self.assertEqual(decode(encode("xy")), "xy!")
        """,
    "tests/test_codec.py": """\
        import unittest

        from calc import decode, encode


        class CodecTests(unittest.TestCase):
            def setUp(self):
                from . import test_calc

                self.calctests = test_calc.CalcTests()

            def test_codec_encode(self):
                self.calctests.test_encode(encode=lambda text: encode(text))

            def test_codec_decode(self):
                self.calctests.test_decode(decode=lambda text: decode(text))
        """,
}
CODEC_FIXED = {"calc.py": CODEC["calc.py"].replace("return text.upper()", 'return text.upper() + "!"')}
CODEC_F2P = ["tests/test_calc.py::CalcTests::test_encode", "tests/test_calc.py::CalcTests::test_roundtrip",
             "tests/test_codec.py::CodecTests::test_codec_encode"]
CODEC_P2P = ["tests/test_calc.py::CalcTests::test_decode", "tests/test_codec.py::CodecTests::test_codec_decode"]


# -- tests inherited from a mixin in another file (cachetools) ------------------------------------
# The module's own test names have the words "add" and "sub" only: every fresh name made of them
# (test_add_sub, ...) is the name of a test inherited from the mixin in tests/__init__.py.
MIXIN = {
    "calc.py": """\
        def clamp(x, lo, hi):
            return max(lo, x)
        """,
    "tests/__init__.py": """\
        class ClampMixin:
            def test_add_sub(self):
                self.assertEqual(self.clamp(5, 0, 3), 3)

            def test_sub_add(self):
                self.assertEqual(self.clamp(-1, 0, 3), 0)

            def test_add_add(self):
                self.assertEqual(self.clamp(2, 0, 3), 2)

            def test_sub_sub(self):
                self.assertEqual(self.clamp(3, 0, 3), 3)
        """,
    "tests/test_clamp.py": """\
        import unittest

        from calc import clamp

        from . import ClampMixin


        class ClampTest(unittest.TestCase, ClampMixin):
            clamp = staticmethod(clamp)

            def test_add(self):
                self.assertEqual(clamp(1, 0, 3), 1)
                self.assertEqual(clamp(0, 0, 3), 0)

            def test_sub(self):
                self.assertEqual(clamp(9, 0, 3), 3)
                self.assertEqual(clamp(4, 0, 3), 3)
        """,
}
MIXIN_FIXED = {"calc.py": MIXIN["calc.py"].replace("max(lo, x)", "max(lo, min(x, hi))")}
MIXIN_F2P = ["tests/test_clamp.py::ClampTest::test_sub", "tests/test_clamp.py::ClampTest::test_add_sub"]
MIXIN_P2P = ["tests/test_clamp.py::ClampTest::test_add", "tests/test_clamp.py::ClampTest::test_sub_add",
             "tests/test_clamp.py::ClampTest::test_add_add", "tests/test_clamp.py::ClampTest::test_sub_sub"]


@requires_sandbox
def test_a_test_used_from_another_module_keeps_its_name_and_gold_resolves(tmp_path, demo_task):
    task = _task(tmp_path, CODEC, CODEC_FIXED, CODEC_F2P, CODEC_P2P, demo_task.python_env)
    _gold_always_resolves_and_empty_does_not(task)


@requires_sandbox
def test_fresh_names_never_shadow_tests_inherited_from_another_file_and_gold_resolves(tmp_path, demo_task):
    task = _task(tmp_path, MIXIN, MIXIN_FIXED, MIXIN_F2P, MIXIN_P2P, demo_task.python_env)
    _gold_always_resolves_and_empty_does_not(task)


# -- the planning rules, without a sandbox ----------------------------------------------------------
def _plan(files: dict[str, str], tests: list[str], support: list[str]):
    texts = {p: textwrap.dedent(t) for p, t in files.items()}
    modules = sorted({t.split("::")[0] for t in tests})
    return plan_canaries(tests, {p: texts[p] for p in modules}, support={p: texts[p] for p in support})


@pytest.mark.parametrize("draw", range(3))
def test_only_tests_used_from_outside_keep_their_names(draw):
    plan = _plan(CODEC, CODEC_F2P + CODEC_P2P, ["tests/__init__.py"])
    kept = {t for t in CODEC_F2P + CODEC_P2P if t not in plan.renamed}
    # test_encode and test_decode are called by name from test_codec.py; every other test is renamed
    assert kept == {"tests/test_calc.py::CalcTests::test_encode", "tests/test_calc.py::CalcTests::test_decode"}
    assert "def test_encode(" in plan.files["tests/test_calc.py"]
    for old, new in plan.renamed.items():
        assert old != new and f"def {old.rsplit('::', 1)[1]}(" not in plan.files[old.split("::")[0]]
    assert plan.canaries and all(c.original not in kept for c in plan.canaries)


@pytest.mark.parametrize("draw", range(3))
def test_fresh_names_avoid_every_name_of_the_files_read_and_every_required_test(draw):
    plan = _plan(MIXIN, MIXIN_F2P + MIXIN_P2P, ["tests/__init__.py"])
    mixin_names = {"test_add_sub", "test_sub_add", "test_add_add", "test_sub_sub", "ClampMixin", "clamp"}
    fresh = {n.rsplit("::", 1)[1] for n in plan.renamed.values()} | {c.nodeid.rsplit("::", 1)[1]
                                                                     for c in plan.canaries}
    assert fresh and not fresh & mixin_names, fresh
    # the module's own tests are still renamed (and grouped), under names made of its own words
    assert {"tests/test_clamp.py::ClampTest::test_add", "tests/test_clamp.py::ClampTest::test_sub"} <= set(plan.renamed)
    assert all(n.startswith("test_add") or n.startswith("test_sub") for n in fresh), fresh


DYNAMIC = {
    "tests/test_ops.py": """\
        import unittest


        class OpsTests(unittest.TestCase):
            def test_neg(self):
                self.assertEqual(-(2), -2)
        """,
    "tests/test_grid.py": """\
        import unittest

        from . import test_ops


        class TableTests(unittest.TestCase):
            def test_table(self):
                for op in ("neg",):
                    getattr(test_ops.OpsTests(), "test_" + op)()
        """,
    "tests/test_more.py": """\
        from . import test_ops


        class MoreOpsTests(test_ops.OpsTests):
            pass
        """,
}
DYNAMIC_TESTS = ["tests/test_ops.py::OpsTests::test_neg", "tests/test_grid.py::TableTests::test_table"]


@pytest.mark.parametrize("built", ['"test_" + op', '"test_%s" % op', 'f"test_{op}"', '"test_{}".format(op)'])
def test_names_built_at_run_time_keep_their_names(built):
    dynamic = {**DYNAMIC, "tests/test_grid.py": DYNAMIC["tests/test_grid.py"].replace('"test_" + op', built)}
    plan = _plan(dynamic, DYNAMIC_TESTS, [])
    assert plan.renamed == {}  # "test_" + op may name any "test_*" test: none is renamed
    camel = {p: t.replace("test_neg", "testNeg").replace("test_table", "testTable") for p, t in DYNAMIC.items()}
    plan = _plan(camel, [t.replace("test_neg", "testNeg").replace("test_table", "testTable")
                         for t in DYNAMIC_TESTS], [])
    assert set(plan.renamed) == {"tests/test_ops.py::OpsTests::testNeg",  # no "test_" to build these from
                                 "tests/test_grid.py::TableTests::testTable"}


def test_a_class_derived_from_in_another_file_keeps_its_tests_names():
    plain = {**DYNAMIC, "tests/test_grid.py": DYNAMIC["tests/test_grid.py"].replace('"test_" + op', "op")}
    alone = _plan(plain, DYNAMIC_TESTS, [])
    assert set(alone.renamed) == set(DYNAMIC_TESTS)  # an instance of OpsTests elsewhere does not stop a rename
    derived = _plan(plain, DYNAMIC_TESTS, ["tests/test_more.py"])
    # MoreOpsTests(OpsTests) would lose test_neg (pytest collects it there too): OpsTests keeps its names
    assert set(derived.renamed) == {"tests/test_grid.py::TableTests::test_table"}
    imported = {**plain, "tests/test_more.py": "from .test_ops import OpsTests\n"}  # collected there too
    assert set(_plan(imported, DYNAMIC_TESTS, ["tests/test_more.py"]).renamed) == {DYNAMIC_TESTS[1]}


def test_the_files_read_are_the_suites_neighbours_and_imports():
    specs = support_pathspecs(["tests/unit/test_a.py", "test_top.py"], {
        "tests/unit/test_a.py": "from . import helpers\nfrom ..common import Base\nimport pkg.mod\n"})
    for spec in (":(glob)tests/unit/*.py", ":(glob)*.py", ":(literal)tests/unit/conftest.py",
                 ":(literal)tests/conftest.py", ":(literal)conftest.py", ":(literal)tests/__init__.py",
                 ":(literal)tests/unit/helpers.py", ":(literal)tests/common.py", ":(literal)tests/common/__init__.py",
                 ":(literal)pkg/mod.py", ":(literal)src/pkg/mod.py"):
        assert spec in specs, spec
