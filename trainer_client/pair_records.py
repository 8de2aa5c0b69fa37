"""The channel-3 pair record: written by the replay teachers (``replay/``), read by the pair-preference
loss (``losses/pairs.py``); one JSONL line each. The trainer's own format: it never crosses the network."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ToolCall(BaseModel):
    """One tool call in the env's action schema (``CallToolAction`` without the envelope)."""

    model_config = ConfigDict(extra="forbid")

    tool_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class PairProvenance(BaseModel):
    """Where a pair came from: the state it replays, the teachers asked, what they cost."""

    model_config = ConfigDict(extra="forbid")

    episode_id: str
    t: int
    instance_id: str = ""
    teachers: list[str] = Field(description="every teacher queried for this state, in config order")
    agreeing: list[str] = Field(default_factory=list, description="teachers whose action equals `chosen`")
    costs: dict[str, float] = Field(default_factory=dict, description="USD spent per teacher on this state")
    verification: Literal["agreement", "fork"] = Field("agreement", description=(
        "agreement: `chosen` is what enough teachers proposed; fork: every proposed action and the student's "
        "were executed in forks of the episode at step t and graded by the hidden tests, and `chosen` scored "
        "higher than `rejected`"))
    rewards: dict[str, float] = Field(default_factory=dict, description=(
        "fork mode: hidden-test reward of each executed action, by teacher name and 'student'"))
    forks: dict[str, str] = Field(default_factory=dict, description="fork mode: the fork's episode id per action")
    source: Literal["offline", "live"] = Field("offline", description=(
        "offline: `trainer-client replay`; live: the replay loop of a training run"))
    train_step: int | None = Field(None, ge=0, description="live: the optimizer step whose rollout this replays")


class PairRecord(BaseModel):
    """One (chosen, rejected) pair for the channel-3 preference loss (one JSONL line).

    ``messages`` and ``tools`` are the state(t) record's, unchanged (the context the policy saw).
    """

    model_config = ConfigDict(extra="forbid")

    state_id: str = Field(description="<episode_id>:<t>")
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    chosen: ToolCall
    rejected: ToolCall
    n_teachers_agreeing: int = Field(ge=0)
    provenance: PairProvenance
