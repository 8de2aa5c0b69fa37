"""predictions.jsonl is SWE-bench's own format: swebench's loader reads it back, one prediction
per SWE-bench task (its first scored sample whose graded diff is known), none for the other tasks;
a task without such a sample gets none and the report names it. An episode whose graded diff is
unknown says why in its row (through the real env server: a diff over the env's size limit is
not graded) and the report counts it, instead of an empty patch that reads as an empty answer."""

from __future__ import annotations

import json
from pathlib import Path

from eval_support import report, result_lines, run_eval

from support.servers import start_server_process
from support.policy_double import PolicyDouble
from swebench.harness.utils import get_predictions_from_file

from evaluation import EpisodeResult, EvalConfig, finish

PATCH_1 = ("diff --git a/astropy/modeling/separable.py b/astropy/modeling/separable.py\n"
           "--- a/astropy/modeling/separable.py\n+++ b/astropy/modeling/separable.py\n"
           "@@ -242,7 +242,7 @@ def _cstack(left, right):\n-        cright[-right.shape[0]:, -right.shape[1]:] = 1\n"
           "+        cright[-right.shape[0]:, -right.shape[1]:] = right\n")
PATCH_2 = ("diff --git a/django/core/validators.py b/django/core/validators.py\n"
           "--- a/django/core/validators.py\n+++ b/django/core/validators.py\n@@ -7 +7 @@\n"
           "-    regex = r'^[\\w.@+-]+$'\n+    regex = r'^[\\w.@+-]+\\Z'  # \"quoted\", tab\\t, ünïcode\n")
PATCH_3 = "diff --git a/requests/models.py b/requests/models.py\n--- a/requests/models.py\n+++ b/requests/models.py\n"


def _result(iid: str, sample: int, status: str, source: str, patch: str | None = None,
            patch_error: str | None = None) -> EpisodeResult:
    return EpisodeResult(instance_id=iid, sample=sample, status=status, task_source=source, repo=iid.split("__")[0],
                         reward=None if status == "lost" else float(status == "resolved"),
                         end_reason=None if status == "lost" else "submitted", model_patch=patch,
                         patch_error=patch_error, episode_id=None if status == "lost" else f"ep-{iid}-{sample}",
                         lost_reasons=["env: gone"] if status == "lost" else [])


def test_predictions_round_trip_through_swebench_loader(tmp_path: Path):
    rows = [{"instance_id": "django__django-11099", "source": "swe-bench", "repo": "django/django"},
            {"instance_id": "astropy__astropy-12907", "source": "swe-bench", "repo": "astropy/astropy"},
            {"instance_id": "psf__requests-2317", "source": "swe-bench", "repo": "psf/requests"},
            {"instance_id": "pallets__flask-4045", "source": "swe-bench", "repo": "pallets/flask"},
            {"instance_id": "sympy__sympy-20590", "source": "swe-bench", "repo": "sympy/sympy"},
            {"instance_id": "toolz__1.0.0-14640d55", "source": "synthetic-mutation", "repo": "pypi/toolz"}]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    results = [
        _result("astropy__astropy-12907", 0, "resolved", "swe-bench", PATCH_1),
        _result("astropy__astropy-12907", 1, "unresolved", "swe-bench", "diff --git a/x b/x\n"),
        _result("django__django-11099", 1, "resolved", "swe-bench", "diff --git a/y b/y\n"),
        _result("django__django-11099", 0, "unresolved", "swe-bench", PATCH_2),
        _result("psf__requests-2317", 0, "lost", "swe-bench"),  # sample 0 lost: sample 1's diff
        _result("psf__requests-2317", 1, "unresolved", "swe-bench", PATCH_3),
        _result("pallets__flask-4045", 0, "lost", "swe-bench"),  # every sample lost: no prediction
        _result("pallets__flask-4045", 1, "lost", "swe-bench"),
        _result("sympy__sympy-20590", 0, "unresolved", "swe-bench", None, "state(3) could not be read: timeout"),
        _result("sympy__sympy-20590", 1, "resolved", "swe-bench", ""),  # an empty answer, graded: an empty patch
        _result("toolz__1.0.0-14640d55", 0, "resolved", "synthetic-mutation", "diff --git a/t b/t\n"),
        _result("toolz__1.0.0-14640d55", 1, "resolved", "synthetic-mutation", "diff --git a/t b/t\n"),
    ]
    (out / "results.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in results), encoding="utf-8")
    config = EvalConfig(env_urls=["http://127.0.0.1:9"], tasks=str(tasks), samples=2, out=str(out),
                        model_name="org/model-7b@step-300", progress=False)

    summary = finish(config)

    predictions = get_predictions_from_file(str(out / "predictions.jsonl"), dataset_name="unused", split="test")
    name = "org/model-7b@step-300"
    assert predictions == [
        {"instance_id": "astropy__astropy-12907", "model_name_or_path": name, "model_patch": PATCH_1},
        {"instance_id": "django__django-11099", "model_name_or_path": name, "model_patch": PATCH_2},
        {"instance_id": "psf__requests-2317", "model_name_or_path": name, "model_patch": PATCH_3},
        {"instance_id": "sympy__sympy-20590", "model_name_or_path": name, "model_patch": ""},
    ], ("per SWE-bench task its first scored sample with a known graded diff, byte for byte (sample 1 where "
        "sample 0 was lost or its diff unknown); the synthetic task is not there")
    assert summary["overall"]["lost"] == 3 and summary["by_source"]["swe-bench"]["scored"] == 7
    assert summary["graded_diff_unknown"] == 1
    assert summary["predictions"] == {"tasks": 5, "written": 4, "without": {
        "pallets__flask-4045": "no scored sample (every sample lost)"}}
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "- graded diff unknown (scored, no patch kept): 1\n" in md
    assert ("- SWE-bench predictions: 4 of 5 tasks\n"
            "  - no prediction for pallets__flask-4045: no scored sample (every sample lost)\n") in md


def test_a_task_whose_graded_diffs_are_unknown_gets_no_prediction(tmp_path: Path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"instance_id": "psf__requests-2317", "source": "swe-bench"}) + "\n")
    out = tmp_path / "out"
    out.mkdir()
    results = [_result("psf__requests-2317", 0, "unresolved", "swe-bench", None, "state(3) could not be read: gone"),
               _result("psf__requests-2317", 1, "lost", "swe-bench")]
    (out / "results.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in results))
    summary = finish(EvalConfig(env_urls=["http://127.0.0.1:9"], tasks=str(tasks), samples=2, out=str(out),
                                progress=False))
    assert not (out / "predictions.jsonl").exists(), "no prediction rather than an empty patch"
    assert summary["predictions"]["without"] == {
        "psf__requests-2317": "graded diff unknown: state(3) could not be read: gone"}
    assert "no prediction for psf__requests-2317: graded diff unknown: state(3) could not be read: gone" in \
        (out / "report.md").read_text(encoding="utf-8")


def test_no_swebench_task_no_predictions_file(tmp_path: Path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"instance_id": "toolz__1.0.0-14640d55", "source": "synthetic-mutation"}) + "\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "predictions.jsonl").write_text("stale\n")  # left by an earlier run: not this evaluation's
    (out / "results.jsonl").write_text(
        _result("toolz__1.0.0-14640d55", 0, "resolved", "synthetic-mutation", "diff\n").model_dump_json() + "\n")
    finish(EvalConfig(env_urls=["http://127.0.0.1:9"], tasks=str(tasks), out=str(out), progress=False))
    assert not (out / "predictions.jsonl").exists()


def test_a_diff_the_env_did_not_grade_is_reported_not_emptied(gold_tasks_file: Path, gold_rows, tmp_path: Path):
    """An env whose diff limit (64 bytes) is below the gold patch's size grades no diff: the row says
    why (`patch_error`), `model_patch` is null, and the report counts the episode."""
    server = start_server_process(gold_tasks_file, tmp_path / "data", extra_args=["--set", "sandbox.limits.max_diff_bytes=64"])
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps(gold_rows[0]) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    try:
        with PolicyDouble(gold_tasks_file, "gold", tmp_path) as double:
            summary = run_eval([server.url], one, double.base_url, out)
    finally:
        server.stop()
    (r,) = result_lines(out)
    assert r["status"] == "unresolved" and r["end_reason"] == "submitted" and r["model_patch"] is None
    assert r["patch_error"].startswith("state(2) holds no graded diff: "), r["patch_error"]
    assert "over the 64-byte limit" in r["patch_error"]
    assert summary["graded_diff_unknown"] == report(out)["summary"]["graded_diff_unknown"] == 1
    assert "- graded diff unknown (scored, no patch kept): 1\n" in (out / "report.md").read_text(encoding="utf-8")
