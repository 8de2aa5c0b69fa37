"""SWE-bench rows whose test ids are cut the way swebench's ``parse_log_pytest`` cuts them.

The parser keeps what comes before the first whitespace of a summary line's id, so a
parametrized ``toolz/tests/test_cut_ids.py::test_frequencies_of_words[a b]`` is in the row as
``...::test_frequencies_of_words[a``, and two tests can share one id
(``test_countby_parity[odd 1 2 3]`` and ``[odd none]``). The rows are built by
docker/swebench_layout.py on the toolz layout image (its variants ``toolz-cut-ids`` and
``toolz-cut-ids-harness``: the toolz bug, hidden tests added by the row's test_patch), their
FAIL_TO_PASS / PASS_TO_PASS measured by the image's own harness and read by swebench's parser,
imported with `task-factory import`: one graded by the project's pytest grader, one by the
instance's harness command. A third row names a test that does not exist.

`task-factory validate` on the docker backend: gold 1.0 and empty 0.0 on both graders, and the
row that cannot reach 1.0 named with its reason; each cut id has its real outcome (never missing).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.layouts import import_rows, layout_module

from task_factory.cli import main as task_factory_cli
from verifier.task import TaskInstance, load_tasks

ROOT = Path(__file__).resolve().parents[2]
MODULE = "toolz/tests/test_cut_ids.py"
GHOST = f"{MODULE}::test_frequencies_of_ghosts"  # names no test of the module
pytestmark = pytest.mark.timeout(900)  # the first run measures the rows (~30 s); later runs read the cache


@pytest.fixture(scope="module")
def tasks_file(client, tmp_path_factory) -> Path:
    """The two cut-id rows and a copy of the first that names a test that does not exist, imported."""
    layout = layout_module(client)
    out = tmp_path_factory.mktemp("cut-ids")
    rows = [layout.build_variant(v, log=lambda m: None) for v in layout.VARIANTS.values()
            if v.name.startswith("toolz-cut-ids")]
    ghost = dict(rows[0], instance_id=rows[0]["instance_id"] + "-ghost",
                 PASS_TO_PASS=json.dumps(json.loads(rows[0]["PASS_TO_PASS"]) + [GHOST]))
    return import_rows([*rows, ghost], out)


@pytest.fixture(scope="module")
def tasks(tasks_file) -> dict[str, TaskInstance]:
    return {t.instance_id.rsplit("-layout-1.0.0-", 1)[1]: t for t in load_tasks(tasks_file)}


def test_rows_carry_ids_cut_as_the_parser_cuts_them(tasks):
    own, harness = tasks["cut-ids"], tasks["cut-ids-harness"]
    assert own.test_cmd is None  # plain `pytest -rA`: the project's pytest grader (canaries)
    assert harness.log_parser == "parse_log_pytest" and harness.test_cmd.startswith("python -X faulthandler")
    for task in (own, harness):
        assert f"{MODULE}::test_frequencies_of_words[a" in task.FAIL_TO_PASS  # [a b]
        assert f"{MODULE}::test_frequencies_of_words[[x," in task.FAIL_TO_PASS  # [[x, y]]
        assert f"{MODULE}::test_frequencies_of_words[x" in task.FAIL_TO_PASS  # [x - y]
        assert f"{MODULE}::test_frequencies_of_floats[floats" in task.FAIL_TO_PASS  # explicit id [floats [1.5, ...]]
        assert f"{MODULE}::test_countby_parity[odd" in task.FAIL_TO_PASS  # two tests, one fails on the bug
        assert f"{MODULE}::test_frequencies_of_range[2]" in task.FAIL_TO_PASS  # an exact id beside them
        assert {f"{MODULE}::test_unique_words[a", f"{MODULE}::test_frequency_lookup[in"} <= set(task.PASS_TO_PASS)


def test_validate_gold_one_empty_zero_on_both_graders_each_cut_id_its_real_outcome(tasks, tasks_file, capsys,
                                                                                  monkeypatch):
    """One `task-factory validate` run; the gradings it makes are recorded to read each test's outcome."""
    from task_factory import check  # the one task check (check.check_task): it calls the verifier's grader

    graded: dict[tuple[str, str], object] = {}
    real = check.grade_submission

    async def recording(task, diff, *args, **kwargs):
        res = await real(task, diff, *args, **kwargs)
        graded[task.instance_id.rsplit("-layout-1.0.0-", 1)[1], "gold" if diff.strip() else "empty"] = res
        return res

    monkeypatch.setattr(check, "grade_submission", recording)
    assert task_factory_cli(["validate", str(tasks_file), "--backend", "docker", "--concurrency", "2"]) == 1
    table = capsys.readouterr().out
    lines = {line.split()[0]: line for line in table.splitlines() if line.startswith("pytoolz__")}
    for name in ("cut-ids", "cut-ids-harness"):
        assert lines[f"pytoolz__toolz-layout-1.0.0-{name}"].split()[1:4] == ["1.00", "0.00", "yes"], table
        gold, empty = graded[name, "gold"], graded[name, "empty"]
        assert set({**gold.fail_to_pass, **gold.pass_to_pass}.values()) == {"passed"}, gold
        assert set(empty.fail_to_pass.values()) == {"failed"}, empty.fail_to_pass  # none missing
        assert set(empty.pass_to_pass.values()) == {"passed"}, empty.pass_to_pass
        assert not gold.tampered and not empty.tampered and gold.error is None and empty.error is None
    # the row naming a test that does not exist: named, with the reason
    ghost = lines["pytoolz__toolz-layout-1.0.0-cut-ids-ghost"]
    assert ghost.split()[1:4] == ["0.00", "0.00", "NO"] and f"{GHOST} not found" in ghost, table
    assert "2 passed, 1 failed" in table, table
    # ... and that test is missing for itself only: every other test has its real outcome
    gold, empty = graded["cut-ids-ghost", "gold"], graded["cut-ids-ghost", "empty"]
    assert gold.pass_to_pass.pop(GHOST) == "missing" and gold.not_found == [GHOST]
    assert gold.reward == 0.0 and not gold.tampered and gold.error is None
    own = graded["cut-ids", "gold"]
    assert {**gold.fail_to_pass, **gold.pass_to_pass} == {**own.fail_to_pass, **own.pass_to_pass}
    assert empty.pass_to_pass.pop(GHOST) == "missing"
    own = graded["cut-ids", "empty"]
    assert (empty.fail_to_pass, empty.pass_to_pass) == (own.fail_to_pass, own.pass_to_pass)
