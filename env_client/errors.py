"""Typed errors of the env client: one root, each also the matching stdlib type; server error
codes (the contract's ErrorCode) map to their own classes."""

from __future__ import annotations

from env_server.protocol import ErrorCode  # public wire types only

from .config import TOKEN_ENV

__all__ = ["EnvAuthError", "EnvCapacityError", "EnvClientError", "EnvConnectionError", "EnvSandboxError",
           "EnvServerError", "EnvSessionError", "EnvTimeoutError", "NoLiveReplicaError", "server_error"]


class EnvClientError(Exception):
    """Root of every env-client failure."""


class EnvConnectionError(EnvClientError, ConnectionError):
    """The replica could not be reached, or the connection was lost and not recovered."""


class NoLiveReplicaError(EnvConnectionError):
    """Every replica of the pool is dead."""


class EnvTimeoutError(EnvClientError, TimeoutError):
    """No reply within the request timeout."""


class EnvAuthError(EnvClientError, PermissionError):
    """The replica refused the bearer token (HTTP 401/403 at the handshake, or an UNAUTHORIZED frame)."""

    def __init__(self, url: str):
        super().__init__(f"env replica {url} refused the connection: missing or wrong bearer token "
                         f"(pass --env-token or set {TOKEN_ENV})")
        self.url = url


class EnvServerError(EnvClientError):
    """An `error` frame from the server; `code` is the wire code."""

    def __init__(self, code: str, message: str, data: dict | None = None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.data = data or {}


class EnvCapacityError(EnvServerError):
    """CAPACITY_REACHED: the replica has no free session slot."""


class EnvSessionError(EnvServerError, LookupError):
    """The session is unknown, closed, or broken on the server."""


class EnvSandboxError(EnvServerError):
    """SANDBOX_ERROR: an infrastructure failure on the replica; the session may be gone."""


_ERRORS_BY_CODE: dict[str, type[EnvServerError]] = {
    ErrorCode.CAPACITY_REACHED.value: EnvCapacityError,
    ErrorCode.SESSION_ERROR.value: EnvSessionError,
    ErrorCode.SESSION_NOT_FOUND.value: EnvSessionError,
    ErrorCode.SESSION_CLOSED.value: EnvSessionError,
    ErrorCode.NO_EPISODE.value: EnvSessionError,
    ErrorCode.EPISODE_DONE.value: EnvSessionError,
    ErrorCode.SANDBOX_ERROR.value: EnvSandboxError,
}


def server_error(data: dict) -> EnvServerError:
    """The typed exception for an `error` frame's data."""
    code = str(data.get("code", "UNKNOWN"))
    return _ERRORS_BY_CODE.get(code, EnvServerError)(code, str(data.get("message", "")), data)
