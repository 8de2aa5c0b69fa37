"""import_files end to end: files in, tasks.jsonl + import_report.json out, no row dropped silently."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.requirements import missing

from task_factory.datasets import ReadError, import_files
from verifier.task import load_tasks

FIXTURES = Path(__file__).parent / "fixtures"
GOOD = ["swebench_4x.jsonl", "swe_gym.jsonl", "swe_smith.jsonl", "r2e_gym.jsonl", "swe_rebench.jsonl"]


def _lines(path: Path) -> int:
    return sum(1 for line in path.read_text().splitlines() if line.strip())


def test_imported_records_load_as_image_resident_tasks(tmp_path: Path) -> None:
    report = import_files([FIXTURES / f for f in GOOD], tmp_path / "out")
    tasks = load_tasks(tmp_path / "out" / "tasks.jsonl")
    imported = [r.instance_id for r in report.rows if r.status == "imported"]
    assert [t.instance_id for t in tasks] == imported and len(tasks) == 8
    assert {t.dataset for t in tasks} == {"swebench", "swe-gym", "swe-smith", "r2e-gym", "swe-rebench"}
    for task in tasks:
        assert task.source == "swe-bench" and task.image_resident and task.image and task.workdir == "/testbed"
        assert task.patch and task.FAIL_TO_PASS
        assert task.workspace_spec().image_workdir == "/testbed"
    smith = next(t for t in tasks if t.dataset == "swe-smith")
    assert smith.workspace_spec().setup_patch == smith.setup_patch != ""
    django = next(t for t in tasks if t.instance_id == "django__django-11099")
    assert (django.log_parser, django.test_cmd.split(";")[-1].split()[-1]) == ("parse_log_django",
                                                                                "auth_tests.test_validators")


def test_bad_rows_are_reported_with_row_and_field_and_none_dropped(tmp_path: Path) -> None:
    src = FIXTURES / "swebench_bad.jsonl"
    report = import_files([src], tmp_path)
    assert len(report.rows) == _lines(src) == report.n_imported + report.n_rejected
    rejected = {r.row: [(p.field, p.severity) for p in r.problems] for r in report.rows if r.status == "rejected"}
    assert rejected == {
        "swebench_bad.jsonl:1": [("base_commit", "error")],
        "swebench_bad.jsonl:2": [("FAIL_TO_PASS", "error")],
        "swebench_bad.jsonl:3": [("test_cmd", "error")],
        "swebench_bad.jsonl:4": [("(row)", "error")],
        "swebench_bad.jsonl:5": [("(row)", "error")],
        "swebench_bad.jsonl:7": [("instance_id", "error")],
    }
    assert report.rows[0].instance_id == "astropy__astropy-14182" and report.exit_code == 1
    assert _lines(tmp_path / "tasks.jsonl") == report.n_imported == 1
    saved = json.loads((tmp_path / "import_report.json").read_text())
    assert (saved["n_imported"], saved["n_rejected"]) == (1, 6)
    problem = saved["rows"][1]["problems"][0]
    assert (problem["row"], problem["field"], problem["severity"]) == ("swebench_bad.jsonl:2", "FAIL_TO_PASS", "error")
    assert problem["message"].startswith("not a JSON list of test ids")
    table = report.table()
    assert "swebench_bad.jsonl:3" in table and "error: test_cmd:" in table and "1 imported, 6 rejected" in table


def test_every_fixture_row_is_accounted_for(tmp_path: Path) -> None:
    files = [FIXTURES / f for f in GOOD + ["swebench_bad.jsonl"]]
    report = import_files(files, tmp_path)
    n_in = sum(_lines(f) for f in files)
    assert len(report.rows) == n_in == report.n_imported + report.n_rejected
    assert sum(f.rows for f in report.files) == n_in


def test_parquet_input_with_list_and_timestamp_columns(tmp_path: Path) -> None:
    from datetime import datetime

    try:  # the `datasets` extra (in `dev`) brings pyarrow
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        missing("pyarrow", f"it does not import ({exc})")

    rows = [json.loads(line) for line in (FIXTURES / "swebench_4x.jsonl").read_text().splitlines()]
    table = pa.table({
        **{k: [r[k] for r in rows] for k in rows[0] if k not in ("FAIL_TO_PASS", "PASS_TO_PASS", "created_at")},
        "FAIL_TO_PASS": [r["FAIL_TO_PASS"] if isinstance(r["FAIL_TO_PASS"], list) else json.loads(r["FAIL_TO_PASS"])
                         for r in rows],
        "PASS_TO_PASS": [json.dumps(r["PASS_TO_PASS"]) if isinstance(r["PASS_TO_PASS"], list) else r["PASS_TO_PASS"]
                         for r in rows],
        "created_at": [datetime(2022, 3, 3, 15, 14, 54)] * len(rows),
    })
    pq.write_table(table, tmp_path / "test-00000-of-00001.parquet")
    report = import_files([tmp_path / "test-00000-of-00001.parquet"], tmp_path / "out")
    assert report.files[0].family == "swebench" and report.n_imported == 3, report.table()
    assert [r.row for r in report.rows] == [f"test-00000-of-00001.parquet[{i}]" for i in range(3)]
    task = load_tasks(tmp_path / "out" / "tasks.jsonl")[0]
    assert task.created_at == "2022-03-03T15:14:54" and len(task.FAIL_TO_PASS) == 2


def test_detection_is_per_file_and_format_overrides_it(tmp_path: Path) -> None:
    report = import_files([FIXTURES / "swe_gym.jsonl", FIXTURES / "swe_smith.jsonl"], tmp_path / "a")
    assert [(f.family, f.detection.startswith("auto:")) for f in report.files] == [("swe-gym", True),
                                                                                   ("swe-smith", True)]
    report = import_files([FIXTURES / "swe_gym.jsonl"], tmp_path / "b", family="swebench")
    assert report.files[0].detection == "--format swebench"
    assert load_tasks(tmp_path / "b" / "tasks.jsonl")[0].image.startswith("swebench/sweb.eval.x86_64.getmoto_1776_")


def test_rows_of_an_undetectable_file_are_each_rejected(tmp_path: Path) -> None:
    src = tmp_path / "mswe.jsonl"
    src.write_text("".join(json.dumps({"org": "zeromicro", "repo": "go-zero", "number": n, "fix_patch": ""}) + "\n"
                           for n in (1, 2)))
    report = import_files([src], tmp_path / "out")
    assert report.files[0].family is None and report.n_rejected == 2 and report.n_imported == 0
    assert {p.field for r in report.rows for p in r.problems} == {"(family)"}
    assert (tmp_path / "out" / "tasks.jsonl").read_text() == ""


@pytest.mark.parametrize("name, content", [
    ("missing.jsonl", None), ("broken.json", "[{\"a\": 1},"), ("table.csv", "a,b\n"), ("bad.parquet", "not parquet"),
])
def test_unreadable_input_raises_before_anything_is_written(tmp_path: Path, name: str, content: str | None) -> None:
    if content is not None:
        (tmp_path / name).write_text(content)
    with pytest.raises(ReadError, match=name):
        import_files([FIXTURES / "swe_gym.jsonl", tmp_path / name], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_row_of_unforeseen_shape_is_rejected_not_fatal(tmp_path: Path) -> None:
    good, _ = [json.loads(line) for line in (FIXTURES / "r2e_gym.jsonl").read_text().splitlines()]
    odd_result = {**json.loads(good["execution_result_content"]), "test_file_codes": [5]}
    src = tmp_path / "r2e.jsonl"
    src.write_text(json.dumps({**good, "execution_result_content": json.dumps(odd_result)}) + "\n"
                   + json.dumps({**good, "created_at": 1683022272}) + "\n")
    report = import_files([src], tmp_path / "out")
    assert [r.status for r in report.rows] == ["rejected", "imported"]
    assert report.rows[0].problems[0].field == "(row)" and "could not be mapped" in report.rows[0].problems[0].message
