"""Client settings and the bearer token: where it comes from and how it is sent."""

from __future__ import annotations

import os
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr

__all__ = ["TOKEN_ENV", "ClientConfig", "auth_headers", "resolve_token", "split_token"]

#: the environment variable the clients read the env server's bearer token from
TOKEN_ENV = "ENV_SERVER_TOKEN"


class ClientConfig(BaseModel):
    """Timeouts, retry and flow-control settings of the env client."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    request_timeout_s: float = Field(600.0, gt=0, description="reply deadline of one request (tests can be slow)")
    reset_timeout_s: float = Field(900.0, gt=0, description="reply deadline of a reset (sandbox boot)")
    grader_busy_wait_s: float = Field(1800.0, ge=0, description=(
        "how long a step refused with GRADER_BUSY (a full grading queue: nothing was done) is sent again, "
        "after the server's retry_after_s each time, before EnvGraderBusyError is raised"))
    connect_timeout_s: float = Field(10.0, gt=0)
    reconnect_attempts: int = Field(3, ge=0, description="tries after a drop before the replica is declared dead")
    reconnect_backoff_s: float = Field(0.5, ge=0, description="first back-off; doubles per try")
    max_in_flight: int = Field(256, gt=0, description="outstanding requests per connection (backpressure)")
    ping_interval_s: float | None = Field(20.0, description="WebSocket keepalive; None disables")
    ping_timeout_s: float | None = Field(60.0)
    max_frame_bytes: int = Field(100 * 1024 * 1024, gt=0)
    capacity_wait_s: float = Field(600.0, ge=0, description="when every live replica is at its session limit, "
                                   "wait up to this long for a free slot before failing (0: fail at once)")
    capacity_poll_s: float = Field(0.5, gt=0, description="first retry delay while waiting for capacity; x1.5 "
                                   "per try, at most 5 s")
    record_episodes: bool = Field(True, description="keep each session's episode in memory for "
                                  "`session.export()` (training records; docs/client.md)")
    token: SecretStr | None = Field(None, description="bearer token of the replicas (the CLI: --env-token or "
                                    f"{TOKEN_ENV}); a `?token=` on a replica's URL wins for that replica")


def split_token(url: str) -> tuple[str, str | None]:
    """(`url` without its `token` query parameter, that token or None)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    token = next((v for k, v in query if k == "token"), None)
    rest = urlencode([(k, v) for k, v in query if k != "token"])
    return urlunsplit(parts._replace(query=rest)), token or None


def resolve_token(flag: str | None = None, env_var: str | None = TOKEN_ENV) -> str | None:
    """The bearer token: the CLI flag's value, else the environment variable's, else None."""
    return flag or (os.environ.get(env_var) if env_var else None) or None


def auth_headers(token: str | SecretStr | None) -> dict[str, str]:
    """`{"Authorization": "Bearer <token>"}`, or no header without a token."""
    value = token.get_secret_value() if isinstance(token, SecretStr) else token
    return {"Authorization": f"Bearer {value}"} if value else {}
