"""Server configuration (one per process; the CLI builds it from flags)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from sandbox.models import SandboxConfig

from .episode import EpisodeConfig


class ServerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tasks_path: Path | None = Field(None, description="JSON/JSONL task file")
    data_dir: Path = Field(Path("data"), description="traces live under <data_dir>/traces")
    max_sessions: int = Field(64, gt=0, description="live sessions before CAPACITY_REACHED")
    idle_timeout_s: float = Field(600.0, gt=0, description="close detached sessions idle this long")
    auth_token: str | None = Field(None, description="require 'Authorization: Bearer <token>' when set")
    max_frame_bytes: int = Field(16 * 1024 * 1024, gt=0, description="larger frames get FRAME_TOO_LARGE")
    mux_reply_cache: int = Field(16, gt=0, description="replies kept per mux session for retried request ids")
    mux_closed_replies: int = Field(1024, ge=0, description=(
        "closed mux sessions per connection whose close reply is kept for a retried close; older closed "
        "sessions keep only their id (later requests get SESSION_CLOSED)"))
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    episode: EpisodeConfig = Field(default_factory=EpisodeConfig)
