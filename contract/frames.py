"""Requests and frames on ``/ws`` and ``/mux``, and the one JSON encoder frames and traces use."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .rendering import ContextSpec

# Frames and trace records: compact UTF-8 JSON. One encoder, built once (json.dumps with
# options builds a new one on every call, and this runs on every step).
compact_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

PROTOCOL_VERSION = "1.0.0"
MUX_SUBPROTOCOL = "swe-openenv.mux.v1"


class ResetParams(BaseModel):
    """``reset`` data. Pick a task by ``instance_id``, else ``index``, else ``seed``, else round robin;
    or (``fork_of`` + ``t``) continue a recorded episode from its step t in a new episode."""

    model_config = ConfigDict(extra="ignore")

    instance_id: str | None = None
    index: int | None = Field(None, ge=0)
    seed: int | None = None
    episode_id: str | None = Field(None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$")
    context: "ContextSpec | None" = Field(None, description="how this client presents the episode to its policy")
    profile: str | None = Field(None, min_length=1, max_length=64, description=(
        "the tool profile the episode serves (contract/tools.py PROFILES: \"default\", \"bash-only\"); "
        "None: the default. A fork serves its original's"))
    fork_of: str | None = Field(None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$", description=(
        "episode-fork extension: start from this recorded episode after its step `t` (its task, its workspace "
        "byte for byte, its context); see docs/rfcs/009-episode-fork.md"))
    t: int | None = Field(None, ge=0, strict=True, description="with fork_of: the step of the recorded episode "
                                                               "to fork at (0 = right after its reset)")

    @model_validator(mode="after")
    def _fork_fields(self) -> "ResetParams":
        if (self.fork_of is None) != (self.t is None):
            raise ValueError("fork_of and t go together (fork the recorded episode fork_of after its step t)")
        return self


class StateParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    t: int | None = Field(None, ge=0)


WsRequestType = Literal["reset", "step", "state", "mcp", "close"]
WsReplyType = Literal["observation", "state", "mcp", "error"]


class WsRequest(BaseModel):
    """A ``/ws`` frame from the client (OpenEnv's envelope). ``type`` stays a plain string here so
    that an unknown one reaches the server and is answered with ``UNKNOWN_TYPE``."""

    type: str
    data: Any = None


class WsReply(BaseModel):
    """A ``/ws`` frame from the server: one per request, in order (``close`` gets none)."""

    type: WsReplyType
    data: Any = Field(default_factory=dict)


MuxRequestType = Literal["reset", "step", "state", "close", "ping"]
MuxReplyType = Literal["observation", "state", "closed", "pong", "error"]


class MuxRequest(BaseModel):
    """A ``/mux`` frame from the client: every request names its session and itself."""

    model_config = ConfigDict(extra="forbid")

    request_id: str = Field(min_length=1, max_length=128)
    session_id: str = Field(min_length=1, max_length=128)
    type: MuxRequestType
    data: dict[str, Any] = Field(default_factory=dict)


class MuxReply(BaseModel):
    """A ``/mux`` frame from the server: the ids of the request it answers (None when the request
    was unreadable), and its result."""

    request_id: str | None = None
    session_id: str | None = None
    type: MuxReplyType
    data: dict[str, Any] = Field(default_factory=dict)
