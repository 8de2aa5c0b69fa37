"""Server configuration: one model per process, every setting with its default written once.

``env-server serve`` builds it from ``--config FILE``, its flags and ``--set KEY=VALUE`` (``env_server/cli.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from sandbox.models import SandboxConfig

from .auth import check_identities
from .episode import EpisodeConfig


class ServerConfig(BaseModel):
    """Every setting of one env server (``env-server serve --print-config`` shows them resolved)."""

    # hide_input_in_errors: a validation error must not print the tokens
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    host: str = Field("127.0.0.1", description="address to listen on (0.0.0.0: every interface)")
    port: int = Field(8000, ge=0, le=65535, description="port to listen on")
    log_level: Literal["critical", "error", "warning", "info", "debug", "trace"] = Field(
        "warning", description="uvicorn's log level")
    tasks_path: Path | None = Field(None, description="JSON/JSONL task file")
    data_dir: Path = Field(Path("data"), description="traces live under <data_dir>/traces")
    max_sessions: int = Field(64, gt=0, description="live sessions before CAPACITY_REACHED")
    idle_timeout_s: float = Field(600.0, gt=0, description="close detached sessions idle this long")
    auth_token: SecretStr | None = Field(None, description=(
        "the legacy single token: an operator named 'operator' (sees every episode); with no token at "
        "all the server is open"))
    client_tokens: dict[str, SecretStr] = Field(default_factory=dict, description=(
        "client name -> token: each client sees and drives only the episodes and sessions it created "
        "(a value 'sha256:<hex>' is the token's SHA-256)"))
    operator_tokens: dict[str, SecretStr] = Field(default_factory=dict, description=(
        "operator name -> token: operators see and may fork every client's episodes"))
    max_frame_bytes: int = Field(16 * 1024 * 1024, gt=0, description="larger frames get FRAME_TOO_LARGE")
    mux_reply_cache: int = Field(16, gt=0, description="replies kept per mux session for retried request ids")
    mux_closed_replies: int = Field(1024, ge=0, description=(
        "closed mux sessions per connection whose close reply is kept for a retried close; older closed "
        "sessions keep only their id (later requests get SESSION_CLOSED)"))
    warm_pool: int = Field(0, ge=0, description=(
        "sandboxes kept pre-started (0: off): a reset claims a ready jail instead of starting one; each idle "
        "jail holds its processes and workspace (docs/deploy.md)"))
    warm_per_task: int = Field(8, gt=0, description=(
        "of warm_pool, the most one task may hold; each task is kept at the size of its bursts of resets "
        "(a GRPO group), up to this"))
    max_gradings: int = Field(0, ge=0, description=(
        "gradings run at once (0: one per CPU); the others wait in order (docs/deploy.md)"))
    max_waiting_gradings: int = Field(16, ge=0, description=(
        "gradings that may wait for a slot; a submit beyond gets GRADER_BUSY with retry_after_s (nothing is "
        "lost: the client library sends it again), never a timeout"))
    group_size: int = Field(1, gt=0, description=(
        "resets with no task named get each task of the round robin this many times in a row (a GRPO group "
        "of a framework that lets the server choose); prefetch_ahead primes that many jails per task"))
    prefetch_ahead: int = Field(0, ge=0, description=(
        "prepare the next N tasks of the round-robin queue in the background: their images pulled and derived "
        "(docker), and with warm_pool, jails started for them"))
    sandbox: SandboxConfig = Field(default_factory=dict, validate_default=True, description=(
        "the sandboxes of the sessions (their CPU policy defaults to idle here)"))
    episode: EpisodeConfig = Field(default_factory=EpisodeConfig)

    @field_validator("sandbox", mode="before")
    @classmethod
    def _idle_sandboxes(cls, value: Any) -> Any:
        """A server's sandboxes run at idle CPU priority unless the settings say otherwise: one busy
        session then never slows the other sessions' replies (docs/deploy.md)."""
        if isinstance(value, dict):
            value = dict(value)
            limits = value.get("limits")
            if limits is None or isinstance(limits, dict):
                value["limits"] = {"cpu_policy": "idle", **(limits or {})}
        return value

    @model_validator(mode="after")
    def _identities(self) -> "ServerConfig":
        check_identities(self.auth_token, self.client_tokens, self.operator_tokens)
        return self
