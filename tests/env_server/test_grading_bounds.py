"""The chance a blind guess scores, measured on the real tasks the suite builds.

A blind guess forces one member of each canary group to pass, chosen uniformly: it forces every
original only with probability ``CanaryPlan.guess_bound`` (the product of 1/members over the
groups). docs/grading.md states at most 1% per task where the task's tests allow it, and names the
tasks that do not reach it with their counts; this test plans the canaries of every task of the
small synthetic pack, the mined six pack and the six demo task exactly as the grader does (the
tree at the base commit with the test_patch, the files around the test modules) and holds each
task to what the docs say.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from support.git_repos import git
from support.taskpacks import build_small_pack, mined_pack_or_missing

from task_factory.demo_task import demo_tasks_file
from verifier.canary import TARGET_BOUND, CanaryPlan, function_id, plan_canaries, support_pathspecs
from verifier.grade import MAX_SUPPORT_FILES
from verifier.task import TaskInstance, load_tasks

# Tasks whose tests cannot reach TARGET_BOUND for a blind guess, with their bound (docs/grading.md).
# None since a group with no literal gets word variants (``assert X == 'kopeva'``) at an ``==`` or a
# truthiness assertion, as many as a literal's: idna's IDNATests (assertTrue/assertFalse only) were
# at 1/2**6, and reach the target now.
SHORT_OF_TARGET: dict[str, float] = {}


def graded_tree(task: TaskInstance, dest: Path) -> Path:
    """The tree the grader plants canaries in: the base commit with the task's test_patch."""
    git(dest.parent, "clone", "-q", "--no-checkout", str(task.repo_path), str(dest))
    git(dest, "checkout", "-q", task.base_commit)
    if task.test_patch.strip():
        git(dest, "apply", "--whitespace=nowarn", "-", input=task.test_patch)
    return dest


def plan_for(task: TaskInstance, tree: Path) -> CanaryPlan:
    """``plan_canaries`` on what the grader reads (``grade._prepare_pytest`` and ``grade._support``)."""
    modules = sorted({t.split("::", 1)[0] for t in task.tests if t.split("::", 1)[0].endswith(".py")})
    sources = {m: (tree / m).read_text() for m in modules if (tree / m).is_file()}
    specs = support_pathspecs(list(sources), sources)
    listed = git(tree, "ls-files", "-co", "--exclude-standard", "-z", "--", *specs).split("\0")
    found = [p for p in dict.fromkeys(listed) if p.endswith(".py") and p not in sources]
    support = {p: (tree / p).read_text() for p in found[:MAX_SUPPORT_FILES]}
    tests = [t for t in task.tests if t.split("::", 1)[0] in sources]
    return plan_canaries(tests, sources, prefer=[t for t in task.FAIL_TO_PASS if t in tests], support=support)


@pytest.fixture(scope="module")
def tasks() -> list[TaskInstance]:
    out: list[TaskInstance] = []
    for path in (build_small_pack(3), mined_pack_or_missing(("six",)), demo_tasks_file()):
        out += load_tasks(path)
    return out


@pytest.mark.slow
def test_a_blind_guess_scores_at_most_one_in_a_hundred_on_every_task(tasks, tmp_path):
    seen = []
    for task in tasks:
        tree = graded_tree(task, tmp_path / task.instance_id)
        plan = plan_for(task, tree)
        bounds = [plan_for(task, tree).guess_bound for _ in range(3)] + [plan.guess_bound]  # each draw
        seen.append((task.instance_id, max(bounds), plan.guess_bound_f2p, dict(plan.candidates)))
        # the bound is the product over the groups, each counted once
        groups = set(plan.group_of.values())
        assert math.isclose(plan.guess_bound, math.prod(1 / plan.candidates[g] for g in groups))
        assert all(c.original in plan.group_of for c in plan.canaries if c.original)
        if task.instance_id in SHORT_OF_TARGET:
            assert max(bounds) == pytest.approx(SHORT_OF_TARGET[task.instance_id]), (task.instance_id, bounds)
            continue
        assert max(bounds) <= TARGET_BOUND, (task.instance_id, bounds, plan.candidates)
        # every group's members (the original and its variants) are there to be chosen from
        for group, members in plan.candidates.items():
            variants = [c for c in plan.canaries if c.original == group and c.kind == "variant"]
            assert members == 1 + len(variants), (group, members, variants)
    print("\n".join(f"{iid}: blind guess {b:.2g} (FAIL_TO_PASS groups only {f:.2g}), groups {c}"
                    for iid, b, f, c in seen))
    assert len(seen) >= 5


def test_fail_to_pass_groups_get_variants_enough_for_the_target_where_their_literal_allows():
    """One FAIL_TO_PASS test with a literal of many values: 99 variants (a guess of one in 100). A digit
    offers the other digits but those the module holds elsewhere (a fresh value is unique in the module,
    as the original's is): here 1, 2 and 3 are taken, 7 members. Two tests share the target (10 each),
    and where one cannot offer its share the other makes up for it."""
    module = ("from calc import name\n\n\ndef test_name():\n    assert name(1) == 'nolu'\n\n\n"
              "def test_digit():\n    assert len(name(2)) == 4\n\n\ndef test_other():\n    assert name(3) == 'kafe'\n")
    one = plan_canaries(["t.py::test_name"], {"t.py": module}, prefer=["t.py::test_name"])
    assert one.candidates == {"t.py::test_name": 100} and one.guess_bound_f2p == pytest.approx(0.01)
    digit = plan_canaries(["t.py::test_digit"], {"t.py": module}, prefer=["t.py::test_digit"])
    assert digit.candidates == {"t.py::test_digit": 7} and digit.guess_bound == pytest.approx(1 / 7)
    values = re.findall(r"[=!]= (\d+)$", digit.files["t.py"], re.M)
    # the original and six variants: every value of the shape that is not taken
    assert len(values) == 7 and set(values) == {"0", "4", "5", "6", "7", "8", "9"}, values
    two = plan_canaries(["t.py::test_name", "t.py::test_other"], {"t.py": module},
                        prefer=["t.py::test_name", "t.py::test_other"])
    assert two.candidates == {"t.py::test_name": 10, "t.py::test_other": 10}
    both = plan_canaries(["t.py::test_digit", "t.py::test_name", "t.py::test_other"], {"t.py": module},
                         prefer=["t.py::test_digit", "t.py::test_name"])
    assert both.candidates["t.py::test_digit"] == 7 and both.candidates["t.py::test_name"] == 15  # 7 * 15 >= 100
    assert both.candidates["t.py::test_other"] == 3  # a PASS_TO_PASS group: two variants
    assert both.guess_bound_f2p == pytest.approx(1 / 105) and both.guess_bound == pytest.approx(1 / 315)
    assert {function_id(c.nodeid) for c in both.canaries} == {c.nodeid for c in both.canaries}
    # a FAIL_TO_PASS test that cannot be grouped (no top-level assertion) leaves the target to the other
    looped = module + "\n\ndef test_loop():\n    for i in range(2):\n        assert name(i)\n"
    alone = plan_canaries(["t.py::test_loop", "t.py::test_name"], {"t.py": looped},
                          prefer=["t.py::test_loop", "t.py::test_name"])
    assert alone.candidates == {"t.py::test_name": 100} and alone.guess_bound_f2p == pytest.approx(0.01)
    # a FAIL_TO_PASS test with no literal: a negation and word variants (``assert name(4) == 'kopeva'``)
    # flip an object equal to everything, but code that reads the members tells the original apart (it
    # compares with an expression, they with a word): worth nothing to the guess that reads them
    flag = plan_canaries(["t.py::test_flag"], {"t.py": module + "\n\ndef test_flag():\n    assert name(4)\n"},
                         prefer=["t.py::test_flag"])
    assert flag.readable == {"t.py::test_flag"} and flag.candidates["t.py::test_flag"] == 100
    assert flag.guess_bound == pytest.approx(0.01) and flag.guess_bound_f2p == 1.0
    assert not both.readable and both.guess_bound_f2p == pytest.approx(1 / 105)
