"""predictions.jsonl is SWE-bench's own format: swebench's loader reads it back, one prediction
(sample 0's graded diff) per SWE-bench task, none for the other tasks."""

from __future__ import annotations

import json
from pathlib import Path

from swebench.harness.utils import get_predictions_from_file

from evaluation import EpisodeResult, EvalConfig, finish

PATCH_1 = ("diff --git a/astropy/modeling/separable.py b/astropy/modeling/separable.py\n"
           "--- a/astropy/modeling/separable.py\n+++ b/astropy/modeling/separable.py\n"
           "@@ -242,7 +242,7 @@ def _cstack(left, right):\n-        cright[-right.shape[0]:, -right.shape[1]:] = 1\n"
           "+        cright[-right.shape[0]:, -right.shape[1]:] = right\n")
PATCH_2 = ("diff --git a/django/core/validators.py b/django/core/validators.py\n"
           "--- a/django/core/validators.py\n+++ b/django/core/validators.py\n@@ -7 +7 @@\n"
           "-    regex = r'^[\\w.@+-]+$'\n+    regex = r'^[\\w.@+-]+\\Z'  # \"quoted\", tab\\t, ünïcode\n")


def _result(iid: str, sample: int, status: str, source: str, patch: str | None = None) -> EpisodeResult:
    return EpisodeResult(instance_id=iid, sample=sample, status=status, task_source=source, repo=iid.split("__")[0],
                         reward=None if status == "lost" else float(status == "resolved"),
                         end_reason=None if status == "lost" else "submitted", model_patch=patch,
                         episode_id=None if status == "lost" else f"ep-{iid}-{sample}",
                         lost_reasons=["env: gone"] if status == "lost" else [])


def test_predictions_round_trip_through_swebench_loader(tmp_path: Path):
    rows = [{"instance_id": "django__django-11099", "source": "swe-bench", "repo": "django/django"},
            {"instance_id": "astropy__astropy-12907", "source": "swe-bench", "repo": "astropy/astropy"},
            {"instance_id": "psf__requests-2317", "source": "swe-bench", "repo": "psf/requests"},
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
        _result("psf__requests-2317", 0, "lost", "swe-bench"),  # no graded diff: no prediction
        _result("psf__requests-2317", 1, "unresolved", "swe-bench", None),
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
    ], "sample 0 of each scored SWE-bench task, its graded diff byte for byte; the synthetic task is not there"
    assert summary["overall"]["lost"] == 1 and summary["by_source"]["swe-bench"]["scored"] == 5
    assert (out / "report.json").exists() and (out / "report.md").exists()


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
