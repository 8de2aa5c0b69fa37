"""``import_files``: read dataset files, normalise each row, validate it, write tasks + report.

Every input row ends up in the report as imported or rejected (with each problem's row and
field); none is dropped silently. A record is imported only when it validates as both the
task-file ``TaskRecord`` and the loader's ``TaskInstance`` and its instance_id is new.
Outputs in DIR: ``tasks.jsonl`` (the imported records), ``import_report.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, Sequence

from pydantic import Field, ValidationError

from verifier.task import TaskInstance, TaskRecord

from ..task_sources import Log, SourceOptions, TaskSource
from .families import ImportOptions, detect, normalise
from .readers import BadRow, ReadError, read_rows
from .report import FAMILIES, FileResult, ImportReport, Problem, RowResult
from .rows import Issues


def _validation_issues(rec: dict[str, Any], issues: Issues) -> TaskRecord | None:
    """The record as a TaskRecord, also loadable as a TaskInstance; problems go to issues."""
    try:
        record = TaskRecord.model_validate(rec)
        TaskInstance.model_validate(record.model_dump())
    except ValidationError as exc:
        for err in exc.errors():
            issues.error(".".join(str(p) for p in err["loc"]) or "(row)", err["msg"])
        return None
    return record


def import_files(paths: Sequence[str | Path], out_dir: str | Path, family: str = "auto",
                 options: ImportOptions | None = None) -> ImportReport:
    """Import every row of ``paths`` read as ``family`` (or detected per file); raises ReadError
    (before writing anything) when a file cannot be read."""
    options = options or ImportOptions()
    out_dir = Path(out_dir)
    read = [read_rows(p) for p in paths]  # all files readable, or nothing is written
    files: list[FileResult] = []
    rows: list[RowResult] = []
    records: list[TaskRecord] = []
    seen: dict[str, str] = {}
    for rf in read:
        fam, why = (family, f"--format {family}") if family != "auto" else detect(rf.columns)
        files.append(FileResult(path=str(rf.path), family=fam, detection=why, rows=len(rf.rows)))
        for where, raw in rf.rows:
            issues = Issues()
            rec: dict[str, Any] = {}
            if isinstance(raw, BadRow):
                issues.error("(row)", raw.message)
            elif fam is None:
                issues.error("(family)", why)
            else:
                try:
                    rec, issues = normalise(fam, raw, options)
                except Exception as exc:  # a shape no rule foresaw: this row's problem, not the import's
                    issues.error("(row)", f"could not be mapped ({type(exc).__name__}: {exc})")
            record = _validation_issues(rec, issues) if issues.ok else None
            iid = rec.get("instance_id") or (raw.get("instance_id") if isinstance(raw, dict) else None)
            if record is not None and record.instance_id in seen:
                issues.error("instance_id", f"duplicate of the row at {seen[record.instance_id]}")
                record = None
            if record is not None:
                seen[record.instance_id] = where
                records.append(record)
            rows.append(RowResult(
                row=where, instance_id=iid if isinstance(iid, str) and iid else None, family=fam,
                status="imported" if record is not None else "rejected",
                problems=[Problem(row=where, field=f, message=m, severity=s) for f, m, s in issues.items]))
    out_dir.mkdir(parents=True, exist_ok=True)
    tasks_file = out_dir / "tasks.jsonl"
    tasks_file.write_text("".join(json.dumps(r.model_dump(mode="json"), ensure_ascii=False) + "\n"
                                  for r in records), encoding="utf-8")
    report = ImportReport(out_dir=str(out_dir), tasks_file=str(tasks_file), files=files, rows=rows)
    (out_dir / "import_report.json").write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return report


# -- the task source (task_sources.SOURCES["swe-bench"]; `task-factory import`) ----------------------


class DatasetOptions(SourceOptions):
    """The settings of ``task-factory import`` (``make swe-bench --set KEY=VALUE``)."""

    files: list[Path] = Field(min_length=1, description=".jsonl, .json or .parquet file(s) of dataset rows")
    format: Literal[(*FAMILIES, "auto")] = Field(  # type: ignore[valid-type]
        "auto", description="dataset family of every file (default: detected per file from its columns)")
    image_namespace: str | None = Field(None, description="registry namespace of derived image names (default per "
                                                          "family: swebench, xingyaoww, swerebench); a row's own "
                                                          "image is kept")
    arch: str = Field("x86_64", description="architecture part of derived image names")


class DatasetSource(TaskSource):
    """SWE-bench-family dataset rows (``import_files``): image-resident tasks, checked by ``task-factory
    validate --backend docker`` (the same check, ``check.py``)."""

    name = label = "swe-bench"
    summary = "import SWE-bench-family dataset rows (local JSONL/JSON/Parquet) as tasks"
    command = "import"
    options_class = DatasetOptions
    errors = (ReadError, OSError)

    def make(self, out: str | Path, log: Log | None = None) -> ImportReport:
        o = self.options
        return import_files(o.files, out, family=o.format,
                            options=ImportOptions(image_namespace=o.image_namespace, arch=o.arch))

    def render(self, report: ImportReport, quiet: bool = False) -> str:
        table = report.table()
        return table.splitlines()[-1] if quiet else table

    def exit_code(self, report: ImportReport) -> int:
        return report.exit_code
