"""The import report: per input row, what became of it and why (errors as data, row + field)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

Family = Literal["swebench", "swe-gym", "swe-smith", "r2e-gym", "swe-rebench"]
FAMILIES: tuple[str, ...] = ("swebench", "swe-gym", "swe-smith", "r2e-gym", "swe-rebench")


class Problem(BaseModel):
    """One thing the importer could not map (error: the row is rejected) or mapped with a caveat (warning)."""

    model_config = ConfigDict(extra="forbid")

    row: str = Field(description="file:line (JSONL) or file[index] (JSON array, Parquet)")
    field: str = Field(description="the input field at fault; '(row)' for the row as a whole")
    message: str
    severity: Literal["error", "warning"] = "error"


class RowResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    row: str
    instance_id: str | None = None
    family: Family | None = None
    status: Literal["imported", "rejected"]
    problems: list[Problem] = Field(default_factory=list)


class FileResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    family: Family | None = Field(description="the family its rows were read as (None: not detected)")
    detection: str = Field(description="'--format X' or why auto detection chose (or could not choose) it")
    rows: int


class ImportReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    out_dir: str
    tasks_file: str
    files: list[FileResult]
    rows: list[RowResult]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def n_imported(self) -> int:
        return sum(r.status == "imported" for r in self.rows)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def n_rejected(self) -> int:
        return sum(r.status == "rejected" for r in self.rows)

    @property
    def exit_code(self) -> int:
        """0: every row imported; 1: some rejected (the imported ones are still written)."""
        return 0 if self.n_rejected == 0 else 1

    def table(self) -> str:
        """A human table: one line per row, then its problems indented."""
        lines = [f"{f.path}: {f.rows} row(s) read as {f.family or '?'} ({f.detection})" for f in self.files]
        width = max([len(r.row) for r in self.rows] + [3])
        idw = max([len(r.instance_id or "-") for r in self.rows] + [11])
        lines.append(f"{'row':<{width}}  {'instance_id':<{idw}}  status")
        for r in self.rows:
            lines.append(f"{r.row:<{width}}  {r.instance_id or '-':<{idw}}  {r.status}")
            for p in r.problems:
                lines.append(f"{'':<{width}}    {p.severity}: {p.field}: {p.message}")
        lines.append(f"{len(self.rows)} row(s): {self.n_imported} imported, {self.n_rejected} rejected "
                     f"-> {self.tasks_file}")
        return "\n".join(lines)
