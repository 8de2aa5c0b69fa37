"""grade_submission in the real sandbox: gold, no-op, tampering with tests, cache, pass-rate."""

from __future__ import annotations

from env_support import requires_sandbox, run
from support.git_repos import git

from sandbox import SandboxConfig
from verifier import GradeCache, grade_submission

pytestmark = requires_sandbox


def test_gold_resolves_and_only_verdicts_no_draw_decides_are_cached(demo_task):
    """An identical (normalised) diff is graded again with a fresh draw of canaries, never answered
    with the first draw's verdict; an empty diff and a diff that does not apply are decided by no
    draw, and are answered from the cache."""
    cache = GradeCache()
    first = run(grade_submission(demo_task, demo_task.patch, SandboxConfig(), cache=cache))
    assert first.reward == 1.0 and first.resolved and not first.cached and first.grading_id
    assert first.tests_passed == len(demo_task.tests) and first.tests_failed == 0
    assert first.guess_bound is not None and 0 < first.guess_bound <= 0.01
    again = run(grade_submission(demo_task, demo_task.patch.replace("index ", "index 0"), SandboxConfig(),
                                 cache=cache))
    assert not again.cached and again.grading_id != first.grading_id
    assert again.reward == 1.0 and not again.tampered  # an honest fix gets the same verdict on every draw
    empty = [run(grade_submission(demo_task, "", SandboxConfig(), cache=cache)) for _ in range(2)]
    assert not empty[0].cached and empty[1].cached and empty[1].grading_id == empty[0].grading_id
    broken = "diff --git a/six.py b/six.py\n--- a/six.py\n+++ b/six.py\n@@ -1,1 +1,1 @@\n-no such line\n+x\n"
    refused = [run(grade_submission(demo_task, broken, SandboxConfig(), cache=cache)) for _ in range(2)]
    assert not refused[0].cached and refused[1].cached and refused[1].error_source == "agent"


def test_concurrent_identical_diffs_share_a_grading_only_when_no_draw_decides_it(demo_task):
    """A GRPO group submits the same diff at once: each copy of a non-empty diff is graded with its own
    draw; copies of an empty diff (the pristine code's verdict) share one grading."""
    import asyncio

    async def both(diff: str) -> list:
        cache = GradeCache()
        return await asyncio.gather(*(grade_submission(demo_task, diff, SandboxConfig(), cache=cache)
                                      for _ in range(2)))

    gold = run(both(demo_task.patch))
    assert [r.reward for r in gold] == [1.0, 1.0] and not any(r.cached for r in gold)
    assert gold[0].grading_id != gold[1].grading_id
    empty = run(both(""))
    assert sorted(r.cached for r in empty) == [False, True] and empty[0].grading_id == empty[1].grading_id


def test_no_fix_fails_and_pass_rate_counts(demo_task):
    res = run(grade_submission(demo_task, "", SandboxConfig(), cache=GradeCache()))
    assert res.reward == 0.0 and res.fail_to_pass == {demo_task.FAIL_TO_PASS[0]: "failed"}
    rate = run(grade_submission(demo_task, "", SandboxConfig(), "pass_rate", cache=GradeCache()))
    assert 0.0 < rate.reward < 1.0 and rate.reward == rate.tests_passed / len(demo_task.tests)


def test_agent_edits_to_tests_are_dropped(demo_task):
    # an agent that "fixes" by shipping its own test_six.py (and a .pyc) gets no credit for it
    fake_tests = ("diff --git a/test_six.py b/test_six.py\nnew file mode 100644\n--- /dev/null\n+++ b/test_six.py\n"
                  "@@ -0,0 +1,2 @@\n+def test_b():\n+    pass\n")
    pyc = ("diff --git a/__pycache__/six.cpython-311.pyc b/__pycache__/six.cpython-311.pyc\nnew file mode 100644\n"
           "Binary files /dev/null and b/__pycache__/six.cpython-311.pyc differ\n")
    res = run(grade_submission(demo_task, fake_tests + pyc, SandboxConfig(), cache=GradeCache()))
    assert res.reward == 0.0 and len(res.dropped) == 2
    assert "test_six.py (test file)" in res.dropped


def test_a_diff_that_does_not_apply_is_an_agent_error(demo_task):
    broken = "diff --git a/six.py b/six.py\n--- a/six.py\n+++ b/six.py\n@@ -1,1 +1,1 @@\n-no such line\n+x\n"
    res = run(grade_submission(demo_task, broken, SandboxConfig(), cache=GradeCache()))
    assert res.reward == 0.0 and res.error_source == "agent" and not res.applied


def test_a_diff_that_kills_the_test_run_is_charged_to_the_agent(demo_task, tmp_path):
    """No test report after the agent's code ran (here: its six.py hangs on import past the grading
    timeout) is the agent's failure, never env/infra, which a trainer would mask instead of scoring."""
    hang = _diff_appending(demo_task, tmp_path, "six.py", "\nimport time\ntime.sleep(3600)\n")
    res = run(grade_submission(demo_task, hang, SandboxConfig(), cache=GradeCache(), timeout_s=3))
    assert res.applied and res.reward == 0.0 and "no test report (timeout)" in (res.error or ""), res
    assert res.error_source == "agent", res


def _diff_appending(task, tmp_path, path: str, text: str) -> str:
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(task.repo_path), str(clone))
    git(clone, "checkout", "-q", task.base_commit)
    with open(clone / path, "a") as f:
        f.write(text)
    return git(clone, "diff")
