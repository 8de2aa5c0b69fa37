"""Typed errors of the env client: one root, each also the matching stdlib type; server error
codes (the contract's ErrorCode) map to their own classes, whether they came in an `error`
frame (/ws, /mux) or an HTTP error body (`{"error": {"code", "message"}}`).

Tool failures are not exceptions: they are observations with `metadata.error_kind`."""

from __future__ import annotations

from contract import ErrorCode  # public wire types only

from .config import TOKEN_ENV

__all__ = ["EnvAuthError", "EnvCapacityError", "EnvClientError", "EnvConnectionError", "EnvForkError",
           "EnvGraderBusyError", "EnvImageError", "EnvNotFoundError",
           "EnvRequestError", "EnvSandboxError", "EnvServerError", "EnvSessionError", "EnvTimeoutError",
           "MissingDependencyError", "NoLiveReplicaError", "http_error", "server_error"]


class EnvClientError(Exception):
    """Root of every env-client failure."""


class EnvConnectionError(EnvClientError, ConnectionError):
    """The replica could not be reached, or the connection was lost and not recovered."""


class NoLiveReplicaError(EnvConnectionError):
    """Every replica of the pool is dead."""


class EnvTimeoutError(EnvClientError, TimeoutError):
    """No reply within the request timeout."""


class EnvAuthError(EnvClientError, PermissionError):
    """The replica refused the bearer token (HTTP 401/403 at the handshake, or an UNAUTHORIZED frame).

    The message says what a caller of this library does about it (`HINT`); a command-line tool
    that takes the token as a flag says so in its own words with `reword` (the trainer CLI:
    "pass --env-token or set ENV_SERVER_TOKEN")."""

    #: the remedy, in the library's terms (the message ends with it, in parentheses)
    HINT = (f"pass the replica's token to the client: token=..., ClientConfig(token=...) or ?token= on its "
            f"URL; resolve_token() reads ${TOKEN_ENV}")

    def __init__(self, url: str):
        super().__init__(f"env replica {url} refused the connection: missing or wrong bearer token ({self.HINT})")
        self.url = url

    @classmethod
    def reword(cls, text: str, hint: str) -> str:
        """`text` (this error's message, or one that quotes it) with the library's remedy replaced by `hint`."""
        return text.replace(cls.HINT, hint)


class MissingDependencyError(EnvClientError, ImportError):
    """An optional dependency of one feature is not installed (e.g. pyarrow for Parquet export)."""


class EnvServerError(EnvClientError):
    """An error the server answered with; `code` is the wire code (ErrorCode), `status` the HTTP
    status when it came over HTTP (None on a socket)."""

    def __init__(self, code: str, message: str, data: dict | None = None, status: int | None = None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.data = data or {}
        self.status = status


class EnvCapacityError(EnvServerError):
    """CAPACITY_REACHED: the replica has no free session slot."""


class EnvGraderBusyError(EnvServerError):
    """GRADER_BUSY: the replica's grading queue is full; the submit did nothing and may be sent again
    after ``data["retry_after_s"]`` (the session's `step` does so itself, up to
    `ClientConfig.grader_busy_wait_s`)."""

    @property
    def retry_after_s(self) -> float:
        try:
            return max(0.1, float(self.data.get("retry_after_s", 2.0)))
        except (TypeError, ValueError):
            return 2.0


class EnvSessionError(EnvServerError, LookupError):
    """The session is unknown, closed, or broken on the server."""


class EnvSandboxError(EnvServerError):
    """SANDBOX_ERROR: an infrastructure failure on the replica; the session may be gone."""


class EnvImageError(EnvSandboxError):
    """IMAGE_UNAVAILABLE: the task's image could not be pulled onto the replica (``data["image"]``,
    ``data["reason"]``: the registry's answer); the task's environment is at fault, not the agent."""


class EnvForkError(EnvServerError):
    """FORK_UNAVAILABLE: the recorded episode's workspace at step t cannot be restored exactly
    (docs/rfcs/009-episode-fork.md); nothing was started."""


class EnvNotFoundError(EnvServerError, LookupError):
    """EPISODE_NOT_FOUND, STEP_OUT_OF_RANGE, TASK_NOT_FOUND: what was asked for does not exist."""


class EnvRequestError(EnvServerError, ValueError):
    """The request itself was malformed (bad JSON, unknown type, invalid envelope, frame too large, a tool
    profile the server does not serve)."""


_ERRORS_BY_CODE: dict[str, type[EnvServerError]] = {
    ErrorCode.CAPACITY_REACHED.value: EnvCapacityError,
    ErrorCode.SESSION_ERROR.value: EnvSessionError,
    ErrorCode.SESSION_NOT_FOUND.value: EnvSessionError,
    ErrorCode.SESSION_CLOSED.value: EnvSessionError,
    ErrorCode.NO_EPISODE.value: EnvSessionError,
    ErrorCode.EPISODE_DONE.value: EnvSessionError,
    ErrorCode.SANDBOX_ERROR.value: EnvSandboxError,
    ErrorCode.IMAGE_UNAVAILABLE.value: EnvImageError,
    ErrorCode.EPISODE_NOT_FOUND.value: EnvNotFoundError,
    ErrorCode.STEP_OUT_OF_RANGE.value: EnvNotFoundError,
    ErrorCode.TASK_NOT_FOUND.value: EnvNotFoundError,
    ErrorCode.INVALID_JSON.value: EnvRequestError,
    ErrorCode.UNKNOWN_TYPE.value: EnvRequestError,
    ErrorCode.VALIDATION_ERROR.value: EnvRequestError,
    ErrorCode.UNKNOWN_PROFILE.value: EnvRequestError,
    ErrorCode.INVALID_ACTION.value: EnvRequestError,
    ErrorCode.FRAME_TOO_LARGE.value: EnvRequestError,
    ErrorCode.FORK_UNAVAILABLE.value: EnvForkError,
    ErrorCode.GRADER_BUSY.value: EnvGraderBusyError,
}
#: codes that stay the generic EnvServerError on purpose (a failure of the server or of the request's
#: execution, nothing a client can act on by type); UNAUTHORIZED is EnvAuthError (never retried)
GENERIC_CODES = frozenset({ErrorCode.EXECUTION_ERROR.value, ErrorCode.FACTORY_ERROR.value,
                           ErrorCode.INTERNAL_ERROR.value})


def server_error(data: dict, status: int | None = None) -> EnvServerError:
    """The typed exception for an `error` frame's data (or an HTTP error body's `error`)."""
    code = str(data.get("code", "UNKNOWN"))
    return _ERRORS_BY_CODE.get(code, EnvServerError)(code, str(data.get("message", "")), data, status)


def http_error(status: int, body: object, url: str) -> EnvClientError:
    """The typed exception for an HTTP error response: `EnvAuthError` for 401/403 or UNAUTHORIZED,
    the code's class for a `{"error": {"code", "message"}}` body, else `EnvServerError` with
    code `HTTP_<status>` (a proxy's page, an unknown route)."""
    error = body.get("error") if isinstance(body, dict) else None
    if status in (401, 403) or (isinstance(error, dict) and error.get("code") == ErrorCode.UNAUTHORIZED.value):
        return EnvAuthError(url)
    if isinstance(error, dict) and "code" in error:
        return server_error(error, status)
    detail = body.get("detail") if isinstance(body, dict) else body
    return EnvServerError(f"HTTP_{status}", str(detail or "")[:300], {}, status)
