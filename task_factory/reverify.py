"""``task-factory reverify``: re-grade finished episodes from their traces with the current grader.

Every ``<episode_id>.jsonl`` trace yields one row. A finished episode (its last
step is ``done`` with a reward) is re-graded from the diff that was graded (the
last non-null ``diff`` of the trace) in the grade mode it was graded in, in a
fresh sandbox with no grading cache; the row says whether the reward changed.
Episodes that cannot be re-graded (unfinished, unknown instance id, unreadable
trace) get a row with ``skipped`` set, never none.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, Literal, cast

from pydantic import BaseModel, Field, computed_field

from sandbox import DEFAULT_BACKEND
from sandbox.models import SandboxConfig
from verifier import GradeCache, GradeMode, grade_submission
from verifier.task import TaskInstance, check_backend, load_tasks

Status = Literal["changed", "unchanged", "skipped", "error"]
GRADE_MODES: tuple[GradeMode, ...] = ("resolved", "pass_rate")
Job = tuple[TaskInstance, GradeMode, str]  # what to re-grade: task, mode, diff


class ReverifyError(ValueError):
    """Bad input: no traces folder, or no traces in it."""


class ReverifyRow(BaseModel):
    """One episode: its recorded reward and the current grader's."""

    episode_id: str
    instance_id: str | None = None
    grade_mode: str | None = None
    old_reward: float | None = None
    new_reward: float | None = Field(None, description="None when skipped or when re-grading failed (infra)")
    changed: bool = False
    tampered: bool = Field(False, description="the re-grading found the run tampered with (reward 0)")
    tamper_reasons: list[str] = Field(default_factory=list)
    dropped: list[str] = Field(default_factory=list, description="diff parts the re-grading did not apply")
    old_error: str | None = Field(None, description="the recorded grading's error, if any")
    new_error: str | None = None
    new_error_source: str | None = None
    skipped: str | None = Field(None, description="why the episode was not re-graded")
    duration_s: float = 0.0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def status(self) -> Status:
        """skipped (not re-graded), error (re-grading failed: infra), changed or unchanged."""
        if self.skipped is not None:
            return "skipped"
        if self.new_reward is None:
            return "error"
        return "changed" if self.changed else "unchanged"


class ReverifyReport(BaseModel):
    """One row per trace file, in episode id order."""

    traces_dir: str
    tasks_path: str
    backend: str
    rows: list[ReverifyRow]
    duration_s: float = 0.0

    @property
    def changed(self) -> list[ReverifyRow]:
        return [r for r in self.rows if r.changed]

    def counts(self) -> dict[Status, int]:
        out: dict[Status, int] = {"changed": 0, "unchanged": 0, "skipped": 0, "error": 0}
        for r in self.rows:
            out[r.status] += 1
        return out

    def table(self) -> str:
        """A fixed-width table, one line per episode, and a closing line of counts."""
        eid = max([len("episode_id")] + [len(r.episode_id) for r in self.rows])
        iid = max([len("instance_id")] + [len(r.instance_id or "-") for r in self.rows])
        head = f"{'episode_id':<{eid}}  {'instance_id':<{iid}}   old    new  status     detail"
        lines = [head, "-" * len(head)]
        for r in self.rows:
            old = "-" if r.old_reward is None else f"{r.old_reward:.2f}"
            new = "-" if r.new_reward is None else f"{r.new_reward:.2f}"
            detail = r.skipped or r.new_error or ""
            lines.append(f"{r.episode_id:<{eid}}  {r.instance_id or '-':<{iid}}  {old:>4}  {new:>5}  "
                         f"{r.status:<9}  {detail}".rstrip())
        c = self.counts()
        lines.append(f"reverify ({self.backend}): {len(self.rows)} episode(s): {c['changed']} changed, "
                     f"{c['unchanged']} unchanged, {c['skipped']} skipped, {c['error']} not re-graded (error)")
        return "\n".join(lines)


def traces_folder(path: str | Path) -> Path:
    """The traces folder of ``path``: a server ``--data-dir`` (its ``traces/``) or the folder itself."""
    path = Path(path)
    if (path / "traces").is_dir():
        return path / "traces"
    if not path.is_dir():
        raise ReverifyError(f"no such traces folder: {path}")
    return path


def read_trace(path: Path) -> list[dict[str, Any]]:
    """The records of one trace file, stopping at a torn last line (as ``TraceStore.load`` does)."""
    records = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                break
            if not isinstance(record, dict):
                break
            records.append(record)
    return records


def _plan(path: Path, by_id: dict[str, TaskInstance]) -> tuple[ReverifyRow, Job | None]:
    """The row as far as the trace alone tells it, and what to re-grade (None: the row says why not)."""
    try:
        records = read_trace(path)
    except (OSError, UnicodeDecodeError) as exc:
        return ReverifyRow(episode_id=path.stem, skipped=f"unreadable trace: {exc}"), None
    if not records or records[0].get("kind") != "reset":
        return ReverifyRow(episode_id=path.stem, skipped="unreadable trace: no reset record"), None
    fields: dict[str, Any] = {"episode_id": path.stem, "instance_id": records[0].get("instance_id")}
    steps = [r for r in records[1:] if r.get("kind") == "step"]
    obs = steps[-1].get("observation") if steps else None
    if not isinstance(obs, dict) or not obs.get("done"):
        return ReverifyRow(**fields, skipped=f"unfinished ({len(steps)} step(s), not done)"), None
    meta = obs.get("metadata") if isinstance(obs.get("metadata"), dict) else {}
    fields.update(old_reward=obs.get("reward"), old_error=meta.get("grade_error"),
                  grade_mode=meta.get("grade_mode", "resolved"))
    skipped = None
    if fields["old_reward"] is None:
        skipped = "ended without a reward (not graded)"
    elif fields["instance_id"] not in by_id:
        skipped = f"unknown instance id {fields['instance_id']!r}"
    elif fields["grade_mode"] not in GRADE_MODES:
        skipped = f"unknown grade mode {fields['grade_mode']!r}"
    if skipped is not None:
        return ReverifyRow(**fields, skipped=skipped), None
    # the graded diff: the last one recorded (null means "unchanged"; the reset record has "")
    diff = next((r["diff"] for r in reversed(records) if isinstance(r.get("diff"), str)), "")
    return ReverifyRow(**fields), (by_id[fields["instance_id"]], cast(GradeMode, fields["grade_mode"]), diff)


async def reverify(traces_dir: str | Path, tasks_path: str | Path, backend: str = DEFAULT_BACKEND,
                   concurrency: int = 2, sandbox_config: SandboxConfig | None = None,
                   timeout_s: float = 900.0) -> ReverifyReport:
    """Re-grade every finished episode under ``traces_dir``; one row per trace file, by episode id.

    Raises ``ReverifyError`` (no traces) or ``verifier.task.TaskFileError`` (bad task file).
    """
    folder = traces_folder(traces_dir)
    files = sorted(folder.glob("*.jsonl"))
    if not files:
        raise ReverifyError(f"no episode traces (*.jsonl) in {folder}")
    loaded = load_tasks(tasks_path)
    check_backend(loaded, sandbox_config.backend_name if sandbox_config else backend)
    by_id = {t.instance_id: t for t in loaded}
    config = sandbox_config or SandboxConfig(backend=backend)
    sem = asyncio.Semaphore(max(1, concurrency))
    start = time.monotonic()

    async def one(path: Path) -> ReverifyRow:
        try:
            row, job = await asyncio.to_thread(_plan, path, by_id)
        except (ValueError, TypeError) as exc:  # a record of the wrong shape (pydantic's ValidationError too)
            return ReverifyRow(episode_id=path.stem, skipped=f"unreadable trace: {exc}")
        if job is None:
            return row
        task, mode, diff = job
        async with sem:
            t0 = time.monotonic()
            try:
                res = await grade_submission(task, diff, config, mode, cache=GradeCache(max_entries=0),
                                             timeout_s=timeout_s)
            except Exception as exc:  # one failed grading must not hide the others' rows
                update: dict[str, Any] = {"new_error": f"{type(exc).__name__}: {exc}", "new_error_source": "infra"}
            else:
                ok = res.error_source != "infra"  # an infra failure is no verdict on the diff
                update = {"new_reward": res.reward if ok else None, "changed": ok and res.reward != row.old_reward,
                          "tampered": res.tampered, "tamper_reasons": res.tamper_reasons, "dropped": res.dropped,
                          "new_error": res.error, "new_error_source": res.error_source}
            update["duration_s"] = round(time.monotonic() - t0, 2)
            return row.model_copy(update=update)

    rows = await asyncio.gather(*(one(p) for p in files))
    return ReverifyReport(traces_dir=str(folder), tasks_path=str(tasks_path), backend=config.backend_name,
                          rows=list(rows), duration_s=round(time.monotonic() - start, 2))
