"""Append-only episode traces (one JSONL file per episode) and state(t) replay.

A record is written (and flushed; fsync'd when asked) before its observation is
sent, so a client that disconnects loses nothing. Line 1 is the reset record,
then one record per step. ``diff`` is stored only when it changed (``null``
means "same as the step before"), which keeps traces small; a diff that could not
be read is ``null`` with ``diff_error`` (state(t) then reports the diff as unknown).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Iterator

from .protocol import NextAction, StateRecord, SWEObservation, compact_json, render_context

_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


class TraceError(LookupError):
    """Unknown episode, or a step index past the end of the trace."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


def valid_episode_id(episode_id: str) -> bool:
    return bool(_ID.match(episode_id)) and episode_id not in (".", "..")


class TraceWriter:
    """Appends records of one episode; keeps them in memory for live state(t)."""

    def __init__(self, path: Path, fsync: bool = False) -> None:
        self.path = path
        self.fsync = fsync
        self.records: list[dict[str, Any]] = []
        # O_EXCL: never clobber a trace. One write(2) per record, no buffering in between.
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o644)

    def append(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        if self._fd is None:
            return
        try:
            data = (compact_json(record) + "\n").encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: \u-escaped, still exact JSON
            data = (json.dumps(record, separators=(",", ":")) + "\n").encode("ascii")
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
        if self.fsync:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class TraceStore:
    """Traces under ``<data_dir>/traces``."""

    def __init__(self, data_dir: Path, fsync: bool = False) -> None:
        self.dir = Path(data_dir) / "traces"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync

    def path(self, episode_id: str) -> Path:
        if not valid_episode_id(episode_id):
            raise TraceError(f"invalid episode id {episode_id!r}", "EPISODE_NOT_FOUND")
        return self.dir / f"{episode_id}.jsonl"

    def exists(self, episode_id: str) -> bool:
        return valid_episode_id(episode_id) and self.path(episode_id).exists()

    def writer(self, episode_id: str) -> TraceWriter:
        return TraceWriter(self.path(episode_id), self.fsync)

    def load(self, episode_id: str) -> list[dict[str, Any]]:
        path = self.path(episode_id)
        if not path.exists():
            raise TraceError(f"no trace for episode {episode_id!r}", "EPISODE_NOT_FOUND")
        records = []
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:  # a torn last line after a crash
                    break
        return records

    def list(self, limit: int = 1000) -> list[str]:
        files = sorted(self.dir.glob("*.jsonl"), key=lambda p: p.stat().st_mtime, reverse=True)
        return [p.stem for p in files[:limit]]

    def iter_lines(self, episode_id: str) -> Iterator[bytes]:
        path = self.path(episode_id)
        if not path.exists():
            raise TraceError(f"no trace for episode {episode_id!r}", "EPISODE_NOT_FOUND")
        with open(path, "rb") as fh:
            yield from fh


def state_at(records: list[dict[str, Any]], t: int) -> StateRecord:
    """Rebuild what the agent had seen after ``t`` steps from a trace (``render_context``)."""
    if not records or records[0].get("kind") != "reset":
        raise TraceError("trace has no reset record", "EPISODE_NOT_FOUND")
    head = records[0]
    steps = records[1:]
    if t < 0 or t > len(steps):
        raise TraceError(f"step {t} out of range 0..{len(steps)}", "STEP_OUT_OF_RANGE")
    messages, tools, turn_ids = render_context(head, steps[:t])
    diff: str | None = head.get("diff") or ""
    observation = head["observation"]
    for rec in steps[:t]:
        observation = rec["observation"]
        if rec.get("diff") is not None:
            diff = rec["diff"]
        elif rec.get("diff_error"):  # unknown from here until a diff is recorded again
            diff = None
    nxt = steps[t]["action"] if t < len(steps) else None
    next_action = None
    if nxt is not None:
        next_action = NextAction(tool_name=nxt.get("tool_name") or nxt.get("type", ""),
                                 arguments=nxt.get("arguments", {}))
    return StateRecord(episode_id=head["episode_id"], instance_id=head["instance_id"], t=t, messages=messages,
                       tools=tools, observation=SWEObservation.model_validate(observation), diff=diff,
                       next_action=next_action, turn_token_ids=turn_ids)
