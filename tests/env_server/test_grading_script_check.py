"""The script check (verifier/script_check.py): a fix must hold in a plain script on the agent's own tree.

Real tasks, real sandboxes: the demo task (six, its tests hidden in ``test_patch``) and a built
task (inflection, its tests in the workspace). The plan is recorded from the gold patch; the gold
patch holds, an empty diff does not, and the gold fix behind a condition that holds only in a
grading run (pytest loaded, a test frame on the stack, pytest's environment variable, a node id on
the command line) passes its tests honestly and is still scored 0 by the script check, on both backends.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from env_support import docker_or_fail, requires_sandbox, run
from support.git_repos import commit_files, diff_to, export_tree, git

from sandbox import SandboxConfig
from verifier import script_check
from verifier.grade import GradeCache, grade_submission
from verifier.task import TaskInstance

from grading_attacks_r3_support import GATES, _gated, gold_source

pytestmark = [requires_sandbox, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def built_task() -> TaskInstance:
    from support.taskpacks import load_small_pack

    return TaskInstance.model_validate(load_small_pack(3)[0])


def _gated_diff(task: TaskInstance, gate: str) -> str:
    """The target module with the gold fix behind ``gate``, as the agent's diff."""
    import tempfile

    from verifier.diffs import split_diff

    target = split_diff(task.patch)[0].new_path
    gold = gold_source(task, target)
    assert gold is not None
    with tempfile.TemporaryDirectory() as tmp:
        work = export_tree(task.repo_path, task.base_commit or "HEAD", Path(tmp), task.setup_patch)
        git(work, "init", "-q")
        git(work, "add", "-A")
        path = work / target
        code = (_gated(gold, gate).replace("__SWE_HEAD__", "x").replace("__SWE_NEWEST__", "0")
                .replace("__SWE_DUPS__", "0"))
        path.write_text(path.read_text() + "\n" + code)
        return git(work, "diff")


def test_plan_checks_the_bug_and_gold_holds_where_empty_does_not(demo_task: TaskInstance, built_task: TaskInstance):
    config = SandboxConfig(backend="bwrap")

    async def main():
        out = {}
        for task in (demo_task, built_task):
            plan = await script_check.prepare(task, config)
            gold = await script_check.check(task, task.patch, plan, config)
            empty = await script_check.check(task, "", plan, config)
            out[task.instance_id] = (plan, gold, empty)
        return out

    for task_id, (plan, gold, empty) in run(main()).items():
        assert plan.checked >= 1 and plan.tests_checked, (task_id, plan.summary())
        # the checked calls are those whose outcome tells the fixed tree from the buggy one
        assert gold.holds and gold.checked == plan.checked, (task_id, gold)
        assert not empty.holds and empty.mismatched, (task_id, empty)
        assert "expected" in empty.mismatched[0] and "got" in empty.mismatched[0]


# A correct fix that is not the gold patch: of a mined release's gold patch, only the hunks its hidden
# tests need (the release's other changes, its version bump among them, left out). Found by dropping one
# hunk at a time while the hidden tests still passed; on the 25-task mined catalog (`task-factory mine`)
# every fix found so scored 1.0, the script check holding (docs/grading.md, guarantee 8, limits).
MINIMAL_FIXES = {"six__1.12.0-1.13.0": ("@@ -824,7 +827,15 @@",),
                 "six__1.13.0-1.14.0": ("@@ -259,7 +259,7 @@", "@@ -644,9 +644,11 @@", "@@ -684,6 +687,10 @@")}


def _some_hunks(patch: str, heads: tuple[str, ...]) -> str:
    """``patch`` with only the hunks whose header starts with one of ``heads`` (file headers kept where a hunk is)."""
    import re

    from verifier.diffs import split_diff

    out, found = "", []
    for block in split_diff(patch):
        header, *hunks = re.split(r"(?m)^(?=@@ )", block.text)
        kept = [h for h in hunks if h.startswith(heads)]
        found += [h.split("\n", 1)[0] for h in kept]
        out += header + "".join(kept) if kept else ""
    assert len(found) == len(heads), (heads, found)
    return out


def test_a_correct_fix_other_than_the_gold_patch_scores_one():
    """The hidden tests and the script check ask for the fix, not for the gold patch's every change."""
    from support.taskpacks import mined_pack_or_missing

    from verifier.task import load_tasks

    tasks = {t.instance_id: t for t in load_tasks(mined_pack_or_missing())}
    config = SandboxConfig(backend="bwrap")

    async def main():
        return {iid: await grade_submission(tasks[iid], _some_hunks(tasks[iid].patch, heads), config,
                                            cache=GradeCache())
                for iid, heads in MINIMAL_FIXES.items()}

    for iid, res in run(main()).items():
        gold_hunks = tasks[iid].patch.count("\n@@ ")
        assert gold_hunks > len(MINIMAL_FIXES[iid]), iid  # a fix the gold patch is not
        assert res.reward == 1.0 and res.resolved, (iid, res.error, res.fail_to_pass)
        assert res.script_check["ran"] and res.script_check["holds"], (iid, res.script_check)


@pytest.mark.parametrize("backend", ["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def test_a_fix_active_only_while_graded_scores_zero(backend: str, demo_task: TaskInstance, built_task: TaskInstance):
    if backend == "docker":
        docker_or_fail()
    config = SandboxConfig(backend=backend)
    gates = ("pytest_loaded", "test_frame_on_stack", "pytest_current_test", "node_id_on_command_line")

    async def main():
        results = {}
        for task in (demo_task, built_task):
            results[(task.instance_id, "gold")] = await grade_submission(task, task.patch, config, cache=GradeCache(0))
            results[(task.instance_id, "empty")] = await grade_submission(task, "", config, cache=GradeCache(0))
            for gate in gates:
                diff = _gated_diff(task, GATES[gate])
                results[(task.instance_id, gate)] = await grade_submission(task, diff, config, cache=GradeCache(0))
        return results

    results = run(main())
    for task in (demo_task, built_task):
        gold, empty = results[(task.instance_id, "gold")], results[(task.instance_id, "empty")]
        assert gold.reward == 1.0 and gold.script_check and gold.script_check["ran"] and gold.script_check["holds"], gold
        assert empty.reward == 0.0 and empty.script_check is None, empty
        for gate in gates:
            res = results[(task.instance_id, gate)]
            # the hidden tests pass (the fix is active under pytest) ...
            assert all(o == "passed" for o in res.fail_to_pass.values()), (gate, res.fail_to_pass, res.error)
            assert not res.tampered, (gate, res.tamper_reasons)
            # ... and the script check, a plain script on the agent's tree, shows the bug: 0, the agent's
            assert res.reward == 0.0 and res.error_source == "agent", (gate, res)
            assert res.script_check and res.script_check["ran"] and not res.script_check["holds"], (gate, res.script_check)
            assert "does not hold outside the test run" in (res.error or ""), (gate, res.error)


def test_script_forms_and_labels_are_drawn_fresh(demo_task: TaskInstance):
    plan = run(script_check.prepare(demo_task, SandboxConfig(backend="bwrap")))
    forms, labels = set(), set()
    for seed in range(40):
        rng = random.Random(seed)
        script = script_check.render(plan.scenes, set(plan.expected), rng)
        form, cmd = script_check.command(script.source, "python", rng)
        forms.add(form)
        labels |= set(script.labels)
        # nothing of the grader is in what runs: no expected value, no test source, no pytest
        for want in plan.expected.values():
            assert want not in script.source
        assert "pytest" not in cmd and "/.grade" not in cmd and "test_" not in cmd
    assert forms == {"stdin", "tmp_file", "workspace_file", "dash_c"}
    assert len(labels) >= 40 * plan.checked


def test_every_style_of_script_holds_for_gold_and_not_for_the_bug(built_task: TaskInstance):
    """The script is written each time in a style drawn from the ways agents write theirs; none of
    them changes what it shows: gold holds and the buggy tree does not, in each."""
    config = SandboxConfig(backend="bwrap")

    async def main():
        plan = await script_check.prepare(built_task, config)
        out = []
        for n, (labels, printer) in enumerate(
                [(lab, pr) for lab in ("hex", "expression", "step", "case") for pr in ("args", "fstring", "ascii")]):
            style = script_check.Style(labels=labels, printer=printer, stream=("flush", "stderr_null", "unbuffered")[n % 3],
                                 guard=("all", "risky")[n % 2], names=("v", "obj", "r", "x", "res")[n % 5])
            gold = await script_check.check(built_task, built_task.patch, plan, config, style=style)
            empty = await script_check.check(built_task, "", plan, config, style=style)
            out.append((style, gold, empty))
        return plan, out

    plan, out = run(main())
    assert plan.checked
    for style, gold, empty in out:
        assert gold.holds and gold.checked == plan.checked, (style, gold)
        assert not empty.holds, (style, empty)


def test_outcomes_compare_by_value_not_by_spelling():
    assert script_check.same("0.30000000000000004", "0.3")
    assert script_check.same("{'a': 1, 'b': 2}", "{'b': 2, 'a': 1}")
    assert script_check.same("{3, 1, 2}", "{1, 2, 3}")
    assert script_check.same("raised ValueError", "raised ValueError")
    assert not script_check.same("raised ValueError", "raised TypeError")
    assert not script_check.same("raised ValueError", "'raised ValueError'")
    assert not script_check.same("1", "True")  # bool is not int here
    assert not script_check.same("(1, 2)", "[1, 2]")
    assert not script_check.same("b'\\xff'", "b'\\xc3\\xbf'")
    assert not script_check.same("1", None)


def test_a_label_printed_twice_is_no_witness():
    labels = {"abc123": "0.0", "def456": "0.1"}
    out = script_check.parse("abc123 1\nabc123 1\ndef456 'x'\nnoise\n", labels)
    assert out == {"0.1": "'x'"}
    # an outcome is its own line: what others print around it is not part of it
    assert script_check.parse("warning: x\nabc123 [1, 2]\nstray\n", labels) == {"0.0": "[1, 2]"}


def _listing_task(root: Path, demo_task: TaskInstance) -> TaskInstance:
    """A task whose FAIL_TO_PASS test lists the workspace: ``py_files`` keeps ``.pyc`` names, the fix ``.py``."""
    repo = root / "repo"
    files = ("import os\n\n\ndef py_files(root):\n"
             "    return sorted(n for n in os.listdir(root) if n.endswith('.pyc'))\n")
    base = commit_files(repo, {"files.py": files,
                               "test_files.py": "from files import py_files\n\n\ndef test_py_files():\n"
                                                "    assert py_files('/workspace') == ['files.py', 'test_files.py']\n"})
    gold = diff_to(repo, {"files.py": files.replace("'.pyc'", "'.py'")})
    return TaskInstance.model_validate({
        "instance_id": "local__files-1", "repo": "local/files", "base_commit": base,
        "problem_statement": "py_files lists .pyc files", "patch": gold, "repo_path": str(repo),
        "python_env": str(demo_task.python_env), "FAIL_TO_PASS": ["test_files.py::test_py_files"]})


def test_a_call_that_sees_how_its_script_ran_is_no_witness(demo_task: TaskInstance, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch):
    """A reproducer written into /workspace shows up in a listing of it. When the check's own scripts ran
    that way, the fixed tree is asked again with the very same commands before the fix is failed: the
    call prints the same there, is no witness, and is dropped; a correct fix keeps its 1.0."""
    task = _listing_task(tmp_path, demo_task)
    config = SandboxConfig(backend="bwrap")
    check_states: list = []
    armed = False

    def command(source: str, python: str, rng: random.Random, stream: str = "flush") -> tuple[str, str]:
        # once armed, the check's commands (the first drawn, and any drawn from the same state again) write
        # the script into /workspace; the plan's runs and commands drawn afresh run it from stdin
        state = rng.getstate()
        if armed and (not check_states or state in check_states):
            check_states.append(state)
            return "workspace_file", (f"cd /workspace && cat > example.py <<'EOF'\n{source}EOF\n"
                                      f"{python} example.py; rm -f example.py")
        return "stdin", f"cd /workspace && {python} - <<'EOF'\n{source}EOF"

    monkeypatch.setattr(script_check, "command", command)
    plan = run(script_check.PLANS.get(task, config))
    listing = [k for k, want in plan.expected.items() if "files.py" in want]
    assert plan.checked and listing, plan.expected

    armed = True
    res = run(script_check.check(task, task.patch, plan, config))
    assert res.form.startswith("workspace_file") and res.mismatched == [] and res.error is None, res
    assert len(check_states) >= 2  # the fixed tree was asked with the check's own commands
    assert not set(listing) & set(plan.expected)  # the listing is dropped from the plan for good
