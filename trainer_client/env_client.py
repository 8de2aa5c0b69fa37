"""Asyncio client of the env server's multiplexed WebSocket (`/mux`, docs/contracts.md).

One connection per env replica carries many sessions. Every frame has a client-chosen
`request_id`; replies are matched by id, so replies of different sessions may interleave
and a reply that arrives after its request timed out is dropped instead of desyncing the
stream. When a connection drops, the client reconnects and re-sends the requests still in
flight under the same ids (the server answers a repeated id from its cache, so nothing
runs twice); when the replica stays unreachable, the replica is marked dead, in-flight
requests fail with `EnvConnectionError`, and the pool stops placing sessions on it.
`max_in_flight` bounds the requests outstanding on one connection (backpressure).

Errors: one root (`EnvClientError`); each also subclasses the matching stdlib type;
server error codes come back as their own classes (a trainer can tell CAPACITY_REACHED
from EXECUTION_ERROR).

Capacity: when every live replica answers CAPACITY_REACHED, `ReplicaPool.open_session` waits
(retrying with backoff, at most `capacity_wait_s`) instead of failing; one log line when the
pool starts waiting and one when the wait is over; `capacity_waits` / `capacity_wait_s` count
the waiting opens and their seconds (the trainer logs them per step as `env/capacity_*`).
`ReplicaPool.capacity()` reads each replica's advertised `max_sessions` (GET /metadata).

Auth: `ClientConfig.token` (or a `?token=` on one replica's URL, which wins for that replica
and is stripped from the URL) is sent as `Authorization: Bearer <token>` on the handshake. A
refused handshake (HTTP 401/403) or an UNAUTHORIZED frame raises `EnvAuthError` at once (no
retries); the token never appears in URLs, logs or exception texts.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import time
import uuid
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from env_server.protocol import MUX_SUBPROTOCOL, ErrorCode  # public wire types only

__all__ = [
    "TOKEN_ENV",
    "ClientConfig",
    "EnvAuthError",
    "EnvCapacityError",
    "EnvClientError",
    "EnvConnectionError",
    "EnvSandboxError",
    "EnvServerError",
    "EnvSessionError",
    "EnvTimeoutError",
    "MuxConnection",
    "NoLiveReplicaError",
    "RemoteSession",
    "ReplicaPool",
    "auth_headers",
    "mux_url",
    "resolve_token",
    "split_token",
]

#: the environment variable the clients read the env server's bearer token from
TOKEN_ENV = "ENV_SERVER_TOKEN"


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


class ClientConfig(BaseModel):
    """Timeouts, retry and flow-control settings of the env client."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    request_timeout_s: float = Field(600.0, gt=0, description="reply deadline of one request (tests can be slow)")
    reset_timeout_s: float = Field(900.0, gt=0, description="reply deadline of a reset (sandbox boot)")
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


class _RedactingLogger(logging.LoggerAdapter):
    """websockets' client logger minus the Authorization header's value (its debug log prints every header)."""

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if len(args) == 2 and str(args[0]).lower() == "authorization":
            args = (args[0], "<redacted>")
        super().log(level, msg, *args, **kwargs)


_WS_LOGGER = _RedactingLogger(logging.getLogger("websockets.client"), {})
log = logging.getLogger(__name__)


def mux_url(url: str) -> str:
    """`http://h:p[/base]` or `ws://h:p[/base]` -> `ws://h:p[/base]/mux` (an explicit /mux is kept;
    the query, `?token=` included, is dropped: see `split_token`)."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    path = parts.path.rstrip("/")
    if not path.endswith("/mux"):
        path += "/mux"
    return urlunsplit((scheme, parts.netloc, path, "", ""))


class MuxConnection:
    """One WebSocket to one replica, shared by all sessions placed there."""

    def __init__(self, url: str, config: ClientConfig = ClientConfig()):
        base, url_token = split_token(url)
        self.url = mux_url(base)
        self.config = config
        self._headers = auth_headers(url_token or config.token)
        self.dead = False
        self.reconnects = 0
        self._ws: Any = None
        self._reader: asyncio.Task | None = None
        self._pending: dict[str, tuple[dict, asyncio.Future]] = {}
        self._slots = asyncio.Semaphore(config.max_in_flight)
        self._connect_lock = asyncio.Lock()
        self._closing = False

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def _open(self) -> Any:
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidStatus

        try:
            return await asyncio.wait_for(
                connect(
                    self.url,
                    additional_headers=self._headers,
                    logger=_WS_LOGGER,
                    max_size=self.config.max_frame_bytes,
                    subprotocols=[MUX_SUBPROTOCOL],
                    ping_interval=self.config.ping_interval_s,
                    ping_timeout=self.config.ping_timeout_s,
                    open_timeout=self.config.connect_timeout_s,
                ),
                self.config.connect_timeout_s,
            )
        except InvalidStatus as exc:
            if exc.response.status_code in (401, 403):
                raise EnvAuthError(self.url) from None
            raise

    async def connect(self) -> None:
        """Open the socket (idempotent); raises EnvConnectionError if the replica is unreachable,
        EnvAuthError (not retried) if it refuses the token."""
        async with self._connect_lock:
            if self.dead:
                raise EnvConnectionError(f"replica {self.url} is dead")
            if self._ws is not None:
                return
            delay = self.config.reconnect_backoff_s
            for attempt in range(self.config.reconnect_attempts + 1):
                try:
                    self._ws = await self._open()
                    break
                except EnvAuthError:
                    raise
                except Exception as exc:  # noqa: BLE001 - any other failure means unreachable
                    if attempt == self.config.reconnect_attempts:
                        self._mark_dead(exc)
                        raise EnvConnectionError(f"cannot connect to {self.url}: {exc!r}") from exc
                    await asyncio.sleep(delay)
                    delay *= 2
            self._reader = asyncio.create_task(self._read_loop(), name=f"mux-reader {self.url}")

    async def request(
        self,
        session_id: str,
        type_: str,
        data: dict | None = None,
        *,
        request_id: str | None = None,
        timeout_s: float | None = None,
    ) -> dict:
        """Send one request and return the reply frame's `data`; raise the typed error otherwise."""
        async with self._slots:
            await self.connect()
            rid = request_id or uuid.uuid4().hex
            frame = {"request_id": rid, "session_id": session_id, "type": type_, "data": data or {}}
            future: asyncio.Future = asyncio.get_running_loop().create_future()
            self._pending[rid] = (frame, future)
            try:
                await self._send(frame)
                reply = await asyncio.wait_for(future, timeout_s or self.config.request_timeout_s)
            except asyncio.TimeoutError as exc:
                raise EnvTimeoutError(f"{type_} on session {session_id} timed out ({self.url})") from exc
            finally:
                self._pending.pop(rid, None)
        if reply.get("type") == "error":
            data = reply.get("data") or {}
            if data.get("code") == ErrorCode.UNAUTHORIZED.value:
                raise EnvAuthError(self.url)
            raise server_error(data)
        return reply

    async def _send(self, frame: dict) -> None:
        """Send on the current socket; a closed socket is left to the reader (it re-sends pending frames)."""
        from websockets.exceptions import ConnectionClosed

        ws = self._ws
        if ws is None:
            return
        try:
            await ws.send(json.dumps(frame))
        except ConnectionClosed:
            pass

    async def _read_loop(self) -> None:
        from websockets.exceptions import ConnectionClosed

        while True:
            try:
                async for raw in self._ws:
                    msg = json.loads(raw)
                    entry = self._pending.get(msg.get("request_id"))
                    if entry is not None and not entry[1].done():
                        entry[1].set_result(msg)
                    # else: a late reply to a request that timed out, or a duplicate: dropped
            except ConnectionClosed:
                pass
            except Exception as exc:  # noqa: BLE001 - a malformed frame breaks the stream
                self._mark_dead(exc)
                return
            if self._closing:
                return
            if not await self._reconnect():
                return
            for frame, future in list(self._pending.values()):
                if not future.done():
                    await self._send(frame)

    async def _reconnect(self) -> bool:
        delay = self.config.reconnect_backoff_s
        last: BaseException | None = None
        for _ in range(self.config.reconnect_attempts):
            await asyncio.sleep(delay)
            delay *= 2
            try:
                self._ws = await self._open()
                self.reconnects += 1
                return True
            except EnvAuthError as exc:  # the replica now wants another token: no use retrying
                last = exc
                break
            except Exception as exc:  # noqa: BLE001
                last = exc
        self._mark_dead(last or ConnectionError("connection lost"))
        return False

    def _mark_dead(self, exc: BaseException) -> None:
        self.dead = True
        self._ws = None
        for _, future in list(self._pending.values()):
            if not future.done():
                future.set_exception(EnvAuthError(self.url) if isinstance(exc, EnvAuthError)
                                     else EnvConnectionError(f"replica {self.url} lost: {exc!r}"))

    async def close(self) -> None:
        self._closing = True
        ws, self._ws = self._ws, None
        for _, future in list(self._pending.values()):
            if not future.done():
                future.set_exception(EnvConnectionError(f"connection to {self.url} closed by the client"))
        if ws is not None:
            await ws.close()
        if self._reader is not None:
            self._reader.cancel()
            try:
                await self._reader
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass


def observation_from_reply(reply: dict) -> dict:
    """Flatten an `observation` reply: OpenEnv's envelope lifts reward/done out of the observation."""
    data = reply.get("data") or {}
    if "observation" in data and isinstance(data["observation"], dict):
        obs = dict(data["observation"])
        if data.get("reward") is not None or "reward" not in obs:
            obs["reward"] = data.get("reward")
        obs["done"] = bool(data.get("done", obs.get("done", False)))
        if data.get("metadata"):
            obs["metadata"] = {**data["metadata"], **(obs.get("metadata") or {})}
    else:
        obs = dict(data)
    obs.setdefault("metadata", {})
    return obs


class RemoteSession:
    """One env session on one replica (sticky: all its requests go to that replica)."""

    def __init__(self, connection: MuxConnection, session_id: str | None = None):
        self.connection = connection
        self.session_id = session_id or uuid.uuid4().hex
        self._ids = itertools.count()
        self.closed = False

    def _next_id(self) -> str:
        return f"{self.session_id}:{next(self._ids)}"

    async def _call(self, type_: str, data: dict | None, timeout_s: float | None = None) -> dict:
        return await self.connection.request(
            self.session_id, type_, data, request_id=self._next_id(), timeout_s=timeout_s
        )

    async def reset(self, **kwargs: Any) -> dict:
        reply = await self._call("reset", kwargs, self.connection.config.reset_timeout_s)
        return observation_from_reply(reply)

    async def step(self, action: dict, timeout_s: float | None = None) -> dict:
        return observation_from_reply(await self._call("step", action, timeout_s))

    async def call_tool(self, tool_name: str, arguments: dict, timeout_s: float | None = None,
                        metadata: dict | None = None) -> dict:
        action = {"type": "call_tool", "tool_name": tool_name, "arguments": arguments}
        if metadata:
            action["metadata"] = metadata
        return await self.step(action, timeout_s)

    async def state(self, t: int | None = None) -> dict:
        reply = await self._call("state", {} if t is None else {"t": t})
        return reply.get("data") or {}

    async def close(self) -> None:
        """Close on the server; best effort (a dead replica has nothing left to close)."""
        if self.closed:
            return
        self.closed = True
        try:
            await self._call("close", {}, timeout_s=30.0)
        except EnvClientError:
            pass


class ReplicaPool:
    """Sessions spread over env replicas; a dead replica is taken out of rotation."""

    def __init__(self, urls: list[str] | tuple[str, ...], config: ClientConfig = ClientConfig(), offset: int = 0):
        """`offset` starts the round robin at that replica: the trainer passes its process index,
        so the ranks of a multi-process run place their sessions on different replicas first."""
        if not urls:
            raise ValueError("ReplicaPool needs at least one env URL")
        self.config = config
        self.connections = [MuxConnection(u, config) for u in urls]
        self._sessions: dict[MuxConnection, int] = {c: 0 for c in self.connections}
        self._rr = itertools.count(offset)
        self.opened: dict[str, int] = {c.url: 0 for c in self.connections}  # sessions opened per replica (cumulative)
        self.capacity_waits = 0  # opens that had to wait for a free slot (cumulative)
        self.capacity_wait_s = 0.0  # seconds they waited (cumulative)
        self._waiting = 0
        self._episode: tuple[float, int] | None = None  # (start, opens that waited in this episode)

    @property
    def live(self) -> list[MuxConnection]:
        return [c for c in self.connections if not c.dead]

    def _candidates(self) -> list[MuxConnection]:
        live = self.live
        if not live:
            raise NoLiveReplicaError("no live env replica: " + ", ".join(c.url for c in self.connections))
        start = next(self._rr)
        rotated = live[start % len(live):] + live[: start % len(live)]
        return sorted(rotated, key=lambda c: self._sessions[c])  # stable: least-loaded, then round robin

    async def open_session(self, **reset_kwargs: Any) -> tuple[RemoteSession, dict]:
        """Create a session (reset) on the least-loaded live replica, falling over to the next
        one on a connection failure or a full replica. When every live replica is full, wait
        for a free slot (up to `capacity_wait_s`, then EnvCapacityError). Returns (session,
        first observation)."""
        start = time.monotonic()
        delay = self.config.capacity_poll_s
        waited = False
        try:
            while True:
                try:
                    return await self._open_once(reset_kwargs)
                except EnvCapacityError as exc:
                    elapsed = time.monotonic() - start
                    if elapsed + delay > self.config.capacity_wait_s:
                        if waited:
                            raise EnvCapacityError(exc.code, f"{exc.message} (every replica still full after "
                                                   f"waiting {elapsed:.0f} s; capacity_wait_s="
                                                   f"{self.config.capacity_wait_s:g})", exc.data) from exc
                        raise
                    if not waited:
                        waited = True
                        self._start_waiting()
                    await asyncio.sleep(delay)
                    delay = min(delay * 1.5, 5.0)
        finally:
            if waited:
                self._stop_waiting(time.monotonic() - start)

    async def _open_once(self, reset_kwargs: dict) -> tuple[RemoteSession, dict]:
        last: EnvClientError | None = None
        for connection in self._candidates():
            session = RemoteSession(connection)
            try:
                obs = await session.reset(**reset_kwargs)
            except (EnvConnectionError, EnvCapacityError) as exc:
                last = exc
                continue
            self._sessions[connection] += 1
            self.opened[connection.url] += 1
            return session, obs
        if isinstance(last, EnvCapacityError):
            raise last
        raise NoLiveReplicaError(f"no replica could open a session: {last!r}") from last

    def _start_waiting(self) -> None:
        self._waiting += 1
        if self._episode is None:
            self._episode = (time.monotonic(), 0)
            log.warning("every env replica is at its session limit: new rollouts wait for a free slot "
                        "(up to %g s each; %d replica(s): %s)", self.config.capacity_wait_s, len(self.live),
                        ", ".join(c.url for c in self.live))
        self._episode = (self._episode[0], self._episode[1] + 1)

    def _stop_waiting(self, seconds: float) -> None:
        self._waiting -= 1
        self.capacity_waits += 1
        self.capacity_wait_s += seconds
        if self._waiting == 0 and self._episode is not None:
            begun, n = self._episode
            self._episode = None
            log.warning("env capacity wait over after %.1f s (%d rollout(s) waited)", time.monotonic() - begun, n)

    async def capacity(self, timeout_s: float = 10.0) -> dict[str, int | None]:
        """Each live replica's advertised session limit (`max_sessions` of GET /metadata); None
        where a replica does not say (an older server, or the request failed)."""
        import httpx

        async def one(connection: MuxConnection) -> int | None:
            parts = urlsplit(connection.url)
            scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
            path = parts.path[: -len("/mux")] if parts.path.endswith("/mux") else parts.path
            url = urlunsplit((scheme, parts.netloc, path.rstrip("/") + "/metadata", "", ""))
            try:
                async with httpx.AsyncClient(timeout=timeout_s) as client:
                    reply = await client.get(url, headers=connection._headers)
                value = reply.json().get("max_sessions") if reply.status_code == 200 else None
                return int(value) if value is not None else None
            except (httpx.HTTPError, ValueError, TypeError, AttributeError):
                return None

        live = self.live
        values = await asyncio.gather(*(one(c) for c in live))
        return {c.url: v for c, v in zip(live, values)}

    async def connect(self) -> None:
        """Open every replica's socket now (fail fast before a run): EnvAuthError when a replica
        refuses the token; unreachable replicas are marked dead, NoLiveReplicaError when none is left."""
        results = await asyncio.gather(*(c.connect() for c in self.connections), return_exceptions=True)
        for result in results:
            if isinstance(result, EnvAuthError):
                raise result
        if not self.live:
            raise NoLiveReplicaError("no live env replica: " + ", ".join(c.url for c in self.connections))

    async def release(self, session: RemoteSession) -> None:
        """Close a session and free its slot in the placement count."""
        if session.connection in self._sessions and not session.closed:
            self._sessions[session.connection] = max(0, self._sessions[session.connection] - 1)
        await session.close()

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self.connections), return_exceptions=True)
