"""Append-only episode traces (one JSONL file per episode) and state(t) replay.

A record is written (and flushed; fsync'd when asked) before its observation is
sent, so a client that disconnects loses nothing. Line 1 is the reset record,
then one record per step. ``diff`` is stored only when it changed (``null``
means "same as the step before"), which keeps traces small; a diff that could not
be read is ``null`` with ``diff_error`` (state(t) then reports the diff as unknown).

Forks (``reset`` with ``fork_of`` and ``t``, docs/rfcs/009-episode-fork.md): :func:`fork_point`
reads what a fork of a recorded episode at step t starts from: its task, its workspace (the diff,
and the exact ``--binary`` patch where the text diff cannot carry the files) and its context (the
original's step records up to t, kept in the fork's reset record as ``history``).

Owners: on a server with tokens, the reset record names the client that created the episode
(``owner``); :meth:`TraceStore.owner` reads it back (cached), so listings after a restart still
show each client only its own episodes. A trace without ``owner`` is visible to operators only.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from contract import NextAction, StateRecord, SWEObservation, compact_json, render_context

_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
# A binary file's change as a text diff shows it: the text alone cannot rebuild the file.
BINARY_DIFF = re.compile(r"^Binary files .* differ$", re.MULTILINE)


class TraceError(LookupError):
    """Unknown episode, or a step index past the end of the trace."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


def valid_episode_id(episode_id: str) -> bool:
    return bool(_ID.match(episode_id)) and episode_id not in (".", "..")


# Record fields kept on disk only: state(t) never reads them (a fork reads the trace from disk).
DISK_ONLY_FIELDS = frozenset({"exact_patch"})


class TraceWriter:
    """Appends records of one episode; keeps them in memory for live state(t) (but ``DISK_ONLY_FIELDS``)."""

    def __init__(self, path: Path, fsync: bool = False) -> None:
        self.path = path
        self.fsync = fsync
        self.records: list[dict[str, Any]] = []
        # O_EXCL: never clobber a trace. One write(2) per record, no buffering in between.
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o644)

    def append(self, record: dict[str, Any]) -> None:
        self.records.append({k: v for k, v in record.items() if k not in DISK_ONLY_FIELDS}
                            if not DISK_ONLY_FIELDS.isdisjoint(record) else record)
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


def not_found(episode_id: str) -> TraceError:
    """The answer for an unknown episode: also for one the caller may not see (the same words)."""
    return TraceError(f"no trace for episode {episode_id!r}", "EPISODE_NOT_FOUND")


class TraceStore:
    """Traces under ``<data_dir>/traces``."""

    def __init__(self, data_dir: Path, fsync: bool = False) -> None:
        self.dir = Path(data_dir) / "traces"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self._owners: dict[str, str | None] = {}  # episode id -> its reset record's owner

    def path(self, episode_id: str) -> Path:
        if not valid_episode_id(episode_id):
            raise TraceError(f"invalid episode id {episode_id!r}", "EPISODE_NOT_FOUND")
        return self.dir / f"{episode_id}.jsonl"

    def exists(self, episode_id: str) -> bool:
        return valid_episode_id(episode_id) and self.path(episode_id).exists()

    def writer(self, episode_id: str, owner: str | None = None) -> TraceWriter:
        """A new trace (never an existing one); ``owner``: what its reset record will name."""
        writer = TraceWriter(self.path(episode_id), self.fsync)
        self._owners[episode_id] = owner
        return writer

    def owner(self, episode_id: str) -> str | None:
        """The owner named by the episode's reset record (None: none recorded); TraceError if unknown."""
        if episode_id in self._owners:
            return self._owners[episode_id]
        try:
            with open(self.path(episode_id), "rb") as fh:
                head = _head_owner(fh.readline())
        except FileNotFoundError:
            raise not_found(episode_id) from None
        if head is not _NO_RESET:  # an empty or torn first line (a reset being written): ask again later
            self._owners[episode_id] = head
        return None if head is _NO_RESET else head

    def load(self, episode_id: str) -> list[dict[str, Any]]:
        path = self.path(episode_id)
        if not path.exists():
            raise not_found(episode_id)
        records = []
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:  # a torn last line after a crash
                    break
        return records

    def list(self, limit: int = 1000, visible: Callable[[str | None], bool] | None = None) -> list[str]:
        """Episode ids, most recent first; ``visible(owner)``: only those it accepts."""
        files = sorted(self.dir.glob("*.jsonl"), key=lambda p: p.stat().st_mtime, reverse=True)
        if visible is None:
            return [p.stem for p in files[:limit]]
        out: list[str] = []
        for p in files:
            if len(out) >= limit:
                break
            try:
                owner = self.owner(p.stem)
            except TraceError:  # not an episode id, or deleted meanwhile
                continue
            if visible(owner):
                out.append(p.stem)
        return out

    def iter_lines(self, episode_id: str) -> Iterator[bytes]:
        path = self.path(episode_id)
        if not path.exists():
            raise not_found(episode_id)
        with open(path, "rb") as fh:
            yield from fh


_NO_RESET = object()


def _head_owner(line: bytes) -> Any:
    """The ``owner`` of a trace's first line (None when it names none), or ``_NO_RESET``."""
    try:
        head = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return _NO_RESET
    if not isinstance(head, dict) or head.get("kind") != "reset":
        return _NO_RESET
    owner = head.get("owner")
    return owner if isinstance(owner, str) else None


def state_at(records: list[dict[str, Any]], t: int) -> StateRecord:
    """Rebuild what the agent had seen after ``t`` steps from a trace (``render_context``)."""
    if not records or records[0].get("kind") != "reset":
        raise TraceError("trace has no reset record", "EPISODE_NOT_FOUND")
    head = records[0]
    steps = records[1:]
    if t < 0 or t > len(steps):
        raise TraceError(f"step {t} out of range 0..{len(steps)}", "STEP_OUT_OF_RANGE")
    messages, tools, turn_ids = render_context(head, context_steps(head, steps[:t]))
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
                       submission=steps[t - 1].get("submission") if t >= 1 else None,
                       next_action=next_action, turn_token_ids=turn_ids)


# ---------------------------------------------------------------- forks


def shift_steps(steps: list[dict[str, Any]], offset: int) -> list[dict[str, Any]]:
    """Step records as they render after ``offset`` earlier steps (those of a fork's history).

    ``t`` is shifted (tool-call ids ``call_<t>`` stay unique and equal the original's) and a
    client's ``turn`` key becomes ``[offset, turn]``: turns of different episodes never merge into
    one assistant message, while the grouping inside each episode is unchanged. Only what
    ``render_context`` reads is kept.
    """
    out = []
    for rec in steps:
        action = rec["action"]
        meta = action.get("metadata")
        if isinstance(meta, dict) and "turn" in meta:
            action = {**action, "metadata": {**meta, "turn": [offset, meta["turn"]]}}
        out.append({"kind": "step", "t": rec["t"] + offset, "action": action, "observation": rec["observation"]})
    return out


def context_steps(head: dict[str, Any], steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The steps whose messages make the context: a fork's history, then its own steps."""
    history = head.get("history")
    if history is None:
        return steps
    return list(history) + shift_steps(steps, len(history))


@dataclass(frozen=True)
class ForkPoint:
    """What a fork of ``episode_id`` at step ``t`` starts from (read from the original's trace)."""

    episode_id: str
    t: int
    instance_id: str
    diff: str  # the text diff against the base after step t (the original's state(t).diff)
    exact_patch: str | None  # base64 ``git diff --binary --full-index``, where the text diff is lossy
    head: dict[str, Any] = field(repr=False)  # the original's reset record: system, issue, tools, context
    history: list[dict[str, Any]] = field(repr=False)  # step records rendering the original's context at t


def fork_point(records: list[dict[str, Any]], t: int) -> ForkPoint:
    """Where a fork at step ``t`` starts; TraceError with the wire code when it cannot start there.

    The workspace is known exactly only where the trace says so: a diff that could not be read
    (``diff_error``), a ``bash`` step whose diff was not taken (``diff_skipped``, ``--trace-diffs
    edits``), or files the text diff cannot carry whose exact patch was not kept (``exact_patch_error``)
    leave it unknown until a later step records a diff again. Traces from servers before forks
    (no ``trace_diffs`` in the reset record) are refused: their diffs are not known to be exact.
    """
    if not records or records[0].get("kind") != "reset":
        raise TraceError("trace has no reset record", "EPISODE_NOT_FOUND")
    head, steps = records[0], records[1:]
    episode_id = head["episode_id"]
    if t < 0 or t > len(steps):
        raise TraceError(f"step {t} out of range 0..{len(steps)} of episode {episode_id!r}", "STEP_OUT_OF_RANGE")
    if "trace_diffs" not in head:
        raise TraceError(f"episode {episode_id!r} was recorded by a server without episode forks: "
                         "its diffs are not known to restore the workspace exactly", "FORK_UNAVAILABLE")
    diff: str = head.get("diff") or ""
    patch: str | None = head.get("exact_patch")
    why: str | None = None
    for rec in steps[:t]:
        if rec.get("diff") is not None:
            diff, patch = rec["diff"], rec.get("exact_patch")
            why = None
            if rec.get("exact_patch_error"):
                why = (f"after step {rec['t']} the workspace held files its text diff cannot carry (binary or "
                       f"not UTF-8) and their exact patch was not kept: {rec['exact_patch_error']}")
        elif rec.get("diff_error"):
            why = f"the workspace diff could not be read after step {rec['t']}: {rec['diff_error']}"
        elif rec.get("diff_skipped"):
            why = (f"step {rec['t']} (bash) changed files and the server took no diff after it "
                   "(--trace-diffs edits)")
    if why is None and patch is None and BINARY_DIFF.search(diff):
        why = "the recorded diff has binary files and no exact patch"
    if why is not None:
        raise TraceError(f"cannot fork episode {episode_id!r} at step {t}: the workspace is not known exactly: {why}",
                         "FORK_UNAVAILABLE")
    history = list(head.get("history") or [])
    history += shift_steps(steps[:t], len(history))
    return ForkPoint(episode_id=episode_id, t=t, instance_id=head["instance_id"], diff=diff, exact_patch=patch,
                     head=head, history=history)
