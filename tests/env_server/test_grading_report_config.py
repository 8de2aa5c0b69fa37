"""A repository's own pytest configuration never hides a result from the grader's log reader.

humanize's configuration sets ``--color=yes``: its ``-rA`` summary lines carry ANSI colour
codes, and a reader that did not remove them scored the gold patch 0 ("223 of 223 test(s) not
passing"). Small repositories graded for real (bwrap sandbox, the real grader, the demo task's
pytest), each with a configuration that reshapes the report, and hidden tests whose ids hold
spaces, `` - ``, nested brackets and non-ASCII text (escaped as pytest escapes them, or raw where
the configuration says so); the task's ids are what SWE-bench's parser reads from a real log of
the same repository (cut at the first space). Gold scores 1.0 with every test passed, the empty
diff 0.0 with every FAIL_TO_PASS test *failed* (read from the log, not missing).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from env_support import requires_sandbox, run
from support.git_repos import added_diff, commit_files, diff_to

from sandbox import SandboxConfig
from verifier import GradeCache, grade_submission
from verifier.runner_config import runner_config
from verifier.task import TaskInstance

LIBRARY = '''\
def normalize(text):
    """``text`` with each run of whitespace made one space, and none at the ends."""
    return " ".join(text.split(" "))
'''
FIX = ('text.split(" ")', "text.split()")
HIDDEN = "tests/test_hidden.py"  # arrives in the task's test_patch
# (id, text, expected): the ids hold spaces, " - ", nested brackets and non-ASCII text
FAILING = [("a  b", "a  b", "a b"), ("x[y]  z", "x[y]  z", "x[y] z"), ("a[b] - c", "a[b]  -  c", "a[b] - c"),
           ("é  ü", "é  ü", "é ü"), ("[x] - [y]", " [x] - [y] ", "[x] - [y]"),
           ("n[a[b]]", "n  [a[b]]", "n [a[b]]"), ("u[é]", "u  é", "u é")]
PASSING = [("one", "one", "one"), ("k[l] m", "k[l] m", "k[l] m"), ("p - q", "p - q", "p - q"), ("ü[ü]", "ü", "ü")]
HIDDEN_TESTS = f'''\
import pytest

from textnorm import normalize

CASES = {[(text, expected) for _, text, expected in FAILING + PASSING]!r}
IDS = {[i for i, _, _ in FAILING + PASSING]!r}


@pytest.mark.parametrize("text, expected", CASES, ids=IDS)
def test_normalize(text, expected):
    assert normalize(text) == expected


@pytest.mark.parametrize("text", ["q  r s", "[t]  u"])
def test_no_double_spaces(text):
    assert "  " not in normalize(text)
'''
# A conftest that reformats the progress report (its own letters and words), as plugins do
REFORMAT = '''\
def pytest_report_teststatus(report, config):
    if report.when == "call" and report.passed:
        return "passed", "+", ("PASSED", {"green": True})
'''
# A plugin the configuration loads with -p: it would hide the short test summary
HIDE = '''\
def pytest_configure(config):
    config.option.reportchars = "N"
'''
CONFIGS = {
    # kept as it is (nothing in it loads code): the graded log is coloured and quiet
    "color-quiet": {"pytest.ini": "[pytest]\naddopts = --color=yes -q -rfE\nconsole_output_style = count\n",
                    "conftest.py": REFORMAT},
    # sanitized (-p, --no-summary dropped): very verbose, non-ASCII ids unescaped
    "verbose-plugins": {
        "pyproject.toml": ('[tool.pytest.ini_options]\naddopts = ["-vv", "--no-summary", "-p", "no:cacheprovider", '
                           '"-p", "tests.hide"]\n'
                           "disable_test_id_escaping_and_forfeit_all_rights_to_community_support = true\n"),
        "tests/hide.py": HIDE},
}


def _swebench_ids(python: Path, repo: Path) -> dict[str, str]:
    """``{id: status}`` as SWE-bench's ``parse_log_pytest`` reads a plain ``-rA`` run of ``repo`` (the
    configuration's addopts left out, so the summary is there to read): each id cut at its first space."""
    env = {**os.environ, "PYTHONPATH": str(repo), "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run([str(python), "-m", "pytest", "-rA", "--color=no", "-o", "addopts=", "-p",
                          "no:cacheprovider", HIDDEN], cwd=repo, env=env, capture_output=True, text=True).stdout
    ids = {}
    for line in out.split("\n"):
        if line.startswith(("PASSED", "FAILED", "ERROR", "XFAIL", "SKIPPED")):
            words = (line.replace(" - ", " ") if line.startswith("FAILED") else line).split()
            ids[words[1]] = words[0]
    assert ids, out
    return ids


def _task(tmp: Path, name: str, python_env: Path) -> TaskInstance:
    repo = tmp / name
    base = commit_files(repo, {"textnorm.py": LIBRARY, "tests/__init__.py": "", **CONFIGS[name]})
    (repo / HIDDEN).write_text(HIDDEN_TESTS, encoding="utf-8")
    bug = _swebench_ids(python_env / "bin/python", repo)
    (repo / "textnorm.py").write_text(LIBRARY.replace(*FIX))
    fixed = _swebench_ids(python_env / "bin/python", repo)
    (repo / HIDDEN).unlink()
    gold = diff_to(repo, {"textnorm.py": LIBRARY.replace(*FIX)})
    test_patch = added_diff(repo, {HIDDEN: HIDDEN_TESTS})
    f2p = sorted(t for t, s in fixed.items() if s == "PASSED" and bug.get(t) == "FAILED")
    p2p = sorted(t for t, s in fixed.items() if s == "PASSED" and bug.get(t) == "PASSED")
    return TaskInstance(instance_id=f"report__{name}", problem_statement="fix it", repo_path=repo, base_commit=base,
                        python_env=python_env, patch=gold, test_patch=test_patch, FAIL_TO_PASS=f2p,
                        PASS_TO_PASS=p2p)


@requires_sandbox
@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_configuration_that_reshapes_the_report_hides_no_result(name, tmp_path, demo_task):
    task = _task(tmp_path, name, demo_task.python_env)
    # the ids are what the dataset would hold: cut at spaces, with " - ", nested brackets, non-ASCII text
    first = name == "color-quiet"  # coloured, and non-ASCII ids escaped as pytest escapes them by default
    assert f"{HIDDEN}::test_normalize[a[b]" in task.FAIL_TO_PASS and f"{HIDDEN}::test_normalize[p" in task.PASS_TO_PASS
    assert f"{HIDDEN}::test_normalize[n[a[b]]]" in task.FAIL_TO_PASS  # nested brackets, an exact id
    unicode_id = f"{HIDDEN}::test_normalize[u[\\xe9]]" if first else f"{HIDDEN}::test_normalize[u[é]]"
    assert unicode_id in task.FAIL_TO_PASS, task.FAIL_TO_PASS
    assert len(task.FAIL_TO_PASS) == len(FAILING) + 2 and len(task.PASS_TO_PASS) == len(PASSING), task.tests
    config = runner_config(task)
    assert bool(config.dropped_options) == (name == "verbose-plugins"), config
    sandbox = SandboxConfig(backend="bwrap")
    gold = run(grade_submission(task, task.patch, sandbox, cache=GradeCache()))
    outcomes = {**gold.fail_to_pass, **gold.pass_to_pass}
    assert gold.reward == 1.0 and gold.resolved, (gold.error, gold.tamper_reasons, outcomes, gold.log_tail)
    assert set(outcomes.values()) == {"passed"} and gold.not_found == [] and not gold.tampered
    assert ("\x1b[" in gold.log_tail) == first, gold.log_tail  # the graded report really was coloured
    empty = run(grade_submission(task, "", sandbox, cache=GradeCache()))
    assert empty.reward == 0.0 and empty.error is None and not empty.tampered, empty
    assert set(empty.fail_to_pass.values()) == {"failed"}, empty.fail_to_pass  # read from the log, not missing
    assert set(empty.pass_to_pass.values()) == {"passed"}, empty.pass_to_pass
