"""Test ids as SWE-bench's parser writes them, and ids that name nothing.

SWE-bench's ``parse_log_pytest`` cuts each id of the ``pytest -rA`` summary at its first
whitespace, so ``tests/test_hidden.py::test_words[a b]`` is in a dataset row as
``tests/test_hidden.py::test_words[a``: not a node id pytest can select. And a row may name a
test that does not exist at all; given on pytest's command line, one such id makes pytest run
nothing (exit status 4), so every other test of the run would come out missing.

Small repositories graded for real (bwrap sandbox, the real grader), with the project's pytest
run and with the instance's own harness command read by swebench's parser: cut ids get their
real outcomes (gold 1.0, empty 0.0); an id that names nothing counts as not passed for itself
only; an agent cannot make it pass by adding a test of that name.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from env_support import requires_sandbox, run
from support.git_repos import added_diff, commit_files, diff_to
from support.requirements import require_module

from sandbox import SandboxConfig
from verifier import GradeCache, grade_submission, harness, pytest_log
from verifier.canary import plan_canaries
from verifier.grade import _Graded
from verifier.task import TaskInstance

LIBRARY = """\
def frequencies(seq):
    counts = {}
    for item in seq:
        counts[item] = counts.get(item, 0) + 2
    return counts


def first(seq):
    return next(iter(seq))
"""
FIX = ("counts.get(item, 0) + 2", "counts.get(item, 0) + 1")
HIDDEN = "tests/test_hidden.py"  # arrives in the task's test_patch
HIDDEN_TESTS = """\
from collections import Counter

import pytest

from calc import first, frequencies


@pytest.mark.parametrize("text", ["a b", "cat cat ox", "x - y", "[x, y]"])
def test_words(text):
    words = text.split()
    assert frequencies(words) == dict(Counter(words))


@pytest.mark.parametrize("values", [[1.5, 2.5, 1.5], [0.25]], ids=["floats [1.5, 2.5, 1.5]", "one [0.25]"])
def test_floats(values):
    assert frequencies(values) == dict(Counter(values))


@pytest.mark.parametrize("spec", ["odd 1 2 3", "odd none"])
def test_odd(spec):  # both ids cut to test_odd[odd: the second passes on the bug, the first does not
    values = [int(x) % 2 for x in spec.split()[1:] if x.isdigit()]
    assert frequencies(values) == dict(Counter(values))


@pytest.mark.parametrize("text", ["a[b] c", "é ü é", "p - [q]", "n[a[b]]"])
def test_nested(text):  # nested brackets, non-ASCII text (escaped by pytest), " - " inside an id
    words = text.split()
    assert frequencies(words) == dict(Counter(words))


@pytest.mark.parametrize("text", ["a b", "q r s", "[x, y]"])
def test_first(text):
    assert first(text.split()) == text.split()[0]


@pytest.mark.parametrize("n", [1, 2])
def test_first_range(n):
    assert first(range(n)) == 0
"""
# as parse_log_pytest reads the summary of a run on the bug and on the fix
F2P = [f"{HIDDEN}::test_words[a", f"{HIDDEN}::test_words[cat", f"{HIDDEN}::test_words[x",
       f"{HIDDEN}::test_words[[x,", f"{HIDDEN}::test_floats[floats", f"{HIDDEN}::test_floats[one",
       f"{HIDDEN}::test_odd[odd", f"{HIDDEN}::test_nested[a[b]", f"{HIDDEN}::test_nested[\\xe9",
       f"{HIDDEN}::test_nested[p", f"{HIDDEN}::test_nested[n[a[b]]]"]
P2P = [f"{HIDDEN}::test_first[a", f"{HIDDEN}::test_first[q", f"{HIDDEN}::test_first[[x,",
       f"{HIDDEN}::test_first_range[1]", f"{HIDDEN}::test_first_range[2]"]
# ids that name nothing: a function the module does not have, an instance its function does not
# have, a file the tree does not have (and whose name is not a test file's: the filter would let
# an agent create it)
GHOSTS = [f"{HIDDEN}::test_gone", f"{HIDDEN}::test_first_range[3]", "checks/gone.py::test_x"]
HARNESS = ("python -m pytest -rA " + HIDDEN, "parse_log_pytest")


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> tuple[Path, str, str, str]:
    """(repository with the bug, base commit, gold patch, test_patch)."""
    repo = tmp_path_factory.mktemp("cut") / "repo"
    base = commit_files(repo, {"calc.py": LIBRARY, "tests/__init__.py": ""})
    gold = diff_to(repo, {"calc.py": LIBRARY.replace(*FIX)})
    test_patch = added_diff(repo, {HIDDEN: HIDDEN_TESTS})
    return repo, base, gold, test_patch


def _task(repo, python_env: Path, f2p: list[str], p2p: list[str], harness_cmd: bool = False) -> TaskInstance:
    path, base, gold, test_patch = repo
    cmd, parser = HARNESS if harness_cmd else (None, None)
    return TaskInstance(instance_id=f"cut__{len(f2p)}_{len(p2p)}_{harness_cmd}", problem_statement="fix it",
                        repo_path=path, base_commit=base, python_env=python_env, patch=gold, test_patch=test_patch,
                        FAIL_TO_PASS=f2p, PASS_TO_PASS=p2p, test_cmd=cmd, log_parser=parser)


def _grade(task: TaskInstance, diff: str, mode: str = "resolved"):
    return run(grade_submission(task, diff, SandboxConfig(backend="bwrap"), mode, cache=GradeCache()))


def _outcomes(res) -> dict[str, str]:
    return {**res.fail_to_pass, **res.pass_to_pass}


def _need_swebench() -> None:
    require_module("swebench", "datasets", "the harness grader reads logs with swebench's parsers (extra 'datasets')")


@requires_sandbox
@pytest.mark.parametrize("harness_cmd", [False, True], ids=["pytest-grader", "harness"])
def test_cut_ids_get_their_real_outcomes(repo, demo_task, harness_cmd):
    if harness_cmd:
        _need_swebench()
    task = _task(repo, demo_task.python_env, F2P, P2P, harness_cmd)
    gold, empty = _grade(task, task.patch), _grade(task, "")
    assert gold.reward == 1.0 and gold.resolved, (gold.error, gold.tamper_reasons, _outcomes(gold), gold.log_tail)
    assert set(_outcomes(gold).values()) == {"passed"} and gold.not_found == []
    assert empty.reward == 0.0 and empty.error is None and not empty.tampered, empty
    # test_odd[odd: one of its two tests passes on the bug, the other fails: the id fails (as the
    # parser's last-wins reading gives: pytest prints failures after passes)
    assert set(empty.fail_to_pass.values()) == {"failed"}, empty.fail_to_pass
    assert set(empty.pass_to_pass.values()) == {"passed"}, empty.pass_to_pass


@requires_sandbox
def test_an_id_that_names_nothing_counts_for_itself_only(repo, demo_task):
    task = _task(repo, demo_task.python_env, F2P + GHOSTS, P2P)
    gold = _grade(task, task.patch)
    # the other tests ran and got their real outcomes; the ghosts are missing, so gold is not resolved
    assert {t: o for t, o in _outcomes(gold).items() if t not in GHOSTS} == dict.fromkeys(F2P + P2P, "passed"), (
        gold.error, _outcomes(gold), gold.log_tail)
    assert {t: gold.fail_to_pass[t] for t in GHOSTS} == dict.fromkeys(GHOSTS, "missing")
    assert sorted(gold.not_found) == sorted(GHOSTS)
    assert gold.reward == 0.0 and not gold.resolved and gold.error is None and not gold.tampered, gold
    assert _grade(task, task.patch, "pass_rate").reward == pytest.approx(len(F2P + P2P) / len(task.tests))
    empty = _grade(task, "")
    assert {t: empty.fail_to_pass[t] for t in F2P} == dict.fromkeys(F2P, "failed"), empty.fail_to_pass
    assert set(empty.pass_to_pass.values()) == {"passed"} and empty.reward == 0.0 and not empty.tampered


@requires_sandbox
def test_an_agent_cannot_add_the_test_an_id_names(repo, demo_task):
    """The fix plus a test of each missing name: in the hidden module (a path of test_patch: dropped),
    in a new test file (dropped by name), and a new file at the path of an id whose file the task's
    tree does not have (not a test file by name, so applied: it is still not run, as SWE-bench's
    harness, which runs the test_patch's files, would not run it)."""
    task = _task(repo, demo_task.python_env, F2P + GHOSTS, P2P)
    extra = (
        f"diff --git a/{HIDDEN} b/{HIDDEN}\n--- a/{HIDDEN}\n+++ b/{HIDDEN}\n@@ -1,1 +1,5 @@\n"
        " from collections import Counter\n+\n+\n+def test_gone():\n+    pass\n"
        "diff --git a/tests/test_gone.py b/tests/test_gone.py\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/tests/test_gone.py\n@@ -0,0 +1,2 @@\n+def test_x():\n+    pass\n"
        "diff --git a/checks/gone.py b/checks/gone.py\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/checks/gone.py\n@@ -0,0 +1,2 @@\n+def test_x():\n+    pass\n"
    )
    res = _grade(task, task.patch + extra)
    assert res.applied and sorted(res.dropped) == sorted([f"{HIDDEN} (test file)", "tests/test_gone.py (test file)"])
    assert {t: res.fail_to_pass[t] for t in GHOSTS} == dict.fromkeys(GHOSTS, "missing"), res.fail_to_pass
    assert res.reward == 0.0 and not res.resolved


@requires_sandbox
def test_the_harness_counts_an_id_that_names_nothing_as_missing(repo, demo_task):
    _need_swebench()
    task = _task(repo, demo_task.python_env, F2P + GHOSTS, P2P, harness_cmd=True)
    gold = _grade(task, task.patch)
    assert {t: o for t, o in _outcomes(gold).items() if t not in GHOSTS} == dict.fromkeys(F2P + P2P, "passed"), (
        gold.error, _outcomes(gold), gold.log_tail)
    assert {t: gold.fail_to_pass[t] for t in GHOSTS} == dict.fromkeys(GHOSTS, "missing")
    assert gold.reward == 0.0 and not gold.resolved and not gold.tampered


# -- without a sandbox ------------------------------------------------------------------------------
def test_pytest_not_found_lines_map_to_the_selected_functions():
    selected = ["tests/t.py::test_a[1]", "tests/t.py::test_b", "tests/t.py::C::test_m", "other/x.py::test_y"]
    log = ("no tests ran in 0.01s\n"
           "ERROR: not found: /workspace/tests/t.py::test_a\n(no match in any of [<Module t.py>])\n\n"  # pytest 8+
           "ERROR: not found: /testbed/tests/t.py::C::test_m[zz]\n"  # pytest 7 keeps the parameters
           "(no name '/testbed/tests/t.py::C::test_m[zz]' in any of [<Class C>])\n")
    assert pytest_log.not_found(log, selected) == {"tests/t.py::test_a", "tests/t.py::C::test_m"}
    gone = "ERROR: file or directory not found: other/x.py::test_y\n"
    assert pytest_log.not_found(gone, selected) == {"other/x.py::test_y"}
    assert pytest_log.not_found("ERROR: not found: /elsewhere/z.py::test_q\n", selected) == set()


MODULE = """\
import pytest


@pytest.mark.parametrize("n", [1, 2])
def test_a(n):
    assert n + 1 == n + 1


def test_b():
    assert 3 == 3
"""


def _graded(tests: list[str]) -> _Graded:
    plan = plan_canaries(tests, {"t.py": MODULE})
    graded = _Graded(command="", canaries=plan.canaries, watched=[], renamed=plan.renamed, plan=plan, tests=tests)
    graded.select()
    return graded


def test_an_instance_not_found_widens_to_its_function_then_drops_it():
    graded = _graded(["t.py::test_a[1]", "t.py::test_a[3]", "t.py::test_b"])
    run_a = graded.plan.renamed["t.py::test_a"]
    assert f"{run_a}[3]" in graded.selected
    assert graded.reselect(f"ERROR: not found: /w/{run_a}\n")
    assert graded.whole == {"t.py::test_a"} and run_a in graded.selected and f"{run_a}[1]" not in graded.selected
    assert graded.reselect(f"ERROR: not found: /w/{run_a}\n")  # the function itself: left out, canaries too
    # (a canary of another test may be named with run_a as a prefix: only run_a and its instances count)
    assert graded.dropped == {"t.py::test_a"} and not any(s == run_a or s.startswith(run_a + "[")
                                                          for s in graded.selected)
    assert not {c.nodeid for c in graded.canaries if c.original == "t.py::test_a"} & set(graded.selected)
    assert graded.not_found(graded.tests, lambda t: "missing") == ["t.py::test_a[1]", "t.py::test_a[3]"]
    run_b = graded.plan.renamed["t.py::test_b"]
    assert not graded.reselect(f"ERROR: not found: /w/{run_b}\n")  # nothing left to run
    assert graded.tamper == []


def test_a_planted_test_said_not_found_beside_its_found_original_is_tampering():
    graded = _graded(["t.py::test_a[1]", "t.py::test_b"])
    canary = next(c for c in graded.canaries if c.original == "t.py::test_a")
    assert not graded.reselect(f"ERROR: not found: /w/{canary.nodeid}\n")
    assert graded.tamper and graded.dropped == set()
    again = _graded(["t.py::test_a[1]", "t.py::test_b"])  # both not found (an instance the code removed)
    canary = next(c for c in again.canaries if c.original == "t.py::test_a")
    run_a = again.plan.renamed["t.py::test_a"]
    assert again.reselect(f"ERROR: not found: /w/{canary.nodeid}\nERROR: not found: /w/{run_a}\n")
    assert again.tamper == [] and again.whole == {"t.py::test_a"}


def test_harness_cut_ids_share_one_id_and_fail_when_any_of_their_tests_fails():
    _need_swebench()
    ids = ["t.py::test_w[a", "t.py::test_w[q]"]
    log = ("PASSED t.py::test_w[a b]\nPASSED t.py::test_w[q]\nFAILED t.py::test_w[a - c] - assert 1 == 2\n")
    report = harness.parse_log("parse_log_pytest", log, ids)
    assert report["t.py::test_w[a"] == "failed" and report["t.py::test_w[q]"] == "passed"
    assert harness.check_log("parse_log_pytest", log, report, {"exit_code": 1}, ids) == []  # two tests, one id
    # a passing line printed after the real failure does not turn it (the parser alone reads the last line)
    forged = log + "PASSED t.py::test_w[a zzz]\n"
    assert harness.parser("parse_log_pytest")(forged, None)["t.py::test_w[a"] == "PASSED"
    assert harness.parse_log("parse_log_pytest", forged, ids)["t.py::test_w[a"] == "failed"
    # one test reported passed and failed is a forged line
    twice = log + "PASSED t.py::test_w[a - c]\n"
    reasons = harness.check_log("parse_log_pytest", twice, harness.parse_log("parse_log_pytest", twice, ids),
                                {"exit_code": 1}, ids)
    assert reasons and "test_w[a - c]" in reasons[0], reasons
    # a test whose teardown failed is PASSED and ERROR: honest, and not a pass
    teardown = "PASSED t.py::test_w[q]\nERROR t.py::test_w[q] - RuntimeError\n"
    report = harness.parse_log("parse_log_pytest", teardown, ids)
    assert report["t.py::test_w[q]"] == "error"
    assert harness.check_log("parse_log_pytest", teardown, report, {"exit_code": 1}, ids) == []
