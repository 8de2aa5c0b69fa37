"""Typed records of teacher replay: frozen states in, teacher calls and per-state outcomes out.

The actions and the pairs are the contract's own records (`contract.ToolCall`,
`contract.PairRecord`), one definition for the env server and the trainer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from trainer_client.pair_records import ToolCall

from .agreement import Verdict

__all__ = ["CallRecord", "FrozenState", "StepResult"]


class FrozenState(BaseModel):
    """state(t) of one finished episode, read back from its trace to be shown to the teachers.

    The env server exports it as a `contract.StateRecord`; this reading of it is deliberately
    loose: `messages` and `tools` stay plain JSON values, so that what the teacher receives is
    exactly what the student saw (no defaults added, no keys reordered), and unknown fields are
    kept.
    """

    model_config = ConfigDict(extra="allow")

    episode_id: str
    instance_id: str = ""
    t: int
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = Field(default_factory=list)
    observation: dict[str, Any] = Field(default_factory=dict)
    diff: str | None = ""
    next_action: ToolCall | None = None

    @property
    def state_id(self) -> str:
        return f"{self.episode_id}:{self.t}"

    @property
    def obs_metadata(self) -> dict[str, Any]:
        meta = self.observation.get("metadata")
        return meta if isinstance(meta, dict) else {}


class CallRecord(BaseModel):
    """One teacher call (all its attempts): what it cost and what came back."""

    model_config = ConfigDict(extra="forbid")

    teacher: str
    model: str
    state_id: str
    ok: bool
    action: ToolCall | None = None
    error: str | None = None
    """None on success; else a kind: budget_exhausted, http_429, http_5xx, http_4xx,
    timeout, transport, malformed_json, no_tool_call, bad_arguments, unknown_tool."""
    error_detail: str | None = None
    attempts: int = 0
    attempt_errors: list[str] = Field(default_factory=list)
    """The error kind of every failed attempt, retried ones included."""
    latency_s: float = 0.0
    """Time spent in HTTP requests (all attempts), excluding queueing and backoff."""
    wall_s: float = 0.0
    """The whole call: waiting for a concurrency slot and budget, retries and backoff."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cost_estimated: bool = False
    """True when some attempt was charged its worst case (no usage reported, or unknown outcome)."""


@dataclass
class StepResult:
    """What replay did with one frozen state: gated out or queried, the teachers' calls, the verdict."""

    state: FrozenState
    queried: bool
    calls: list[CallRecord] = field(default_factory=list)
    verdict: Verdict | None = None
