"""One multiplexed WebSocket (`/mux`) to one replica: request ids, reconnect with re-send, backpressure.

Every frame has a client-chosen `request_id`; replies are matched by id, so replies of
different sessions may interleave and a reply that arrives after its request timed out is
dropped instead of desyncing the stream. When a connection drops, the client reconnects and
re-sends the requests still in flight under the same ids (the server answers a repeated id
from its cache, so nothing runs twice); when the replica stays unreachable, it is marked
dead and in-flight requests fail with `EnvConnectionError`. `max_in_flight` bounds the
requests outstanding on one connection.

Reading: a request that finds nobody reading the socket reads it itself until its own reply
arrives, handing other sessions' replies to their futures on the way (one session stepping
alone pays no extra task switch per step); when it leaves with requests still outstanding, a
reader task takes over until none is left. An idle connection has no reader: a drop is noticed
(and repaired) by the next request.

Auth: the token is sent as `Authorization: Bearer <token>` on the handshake; a refused
handshake (HTTP 401/403) or an UNAUTHORIZED frame raises `EnvAuthError` at once (no retries);
the token never appears in URLs, logs or exception texts.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import math
import uuid
from typing import Any

from contract import (  # public wire types only
    MUX_SUBPROTOCOL,
    ErrorCode,
    MuxReply,
    MuxRequest,
    MuxRequestType,
    compact_json,
)

from .config import ClientConfig, auth_headers, split_token
from .errors import EnvAuthError, EnvConnectionError, EnvTimeoutError, server_error
from .urls import mux_url

__all__ = ["MuxConnection", "mux_url", "open_websocket"]


class _RedactingLogger(logging.LoggerAdapter):
    """websockets' client logger minus the Authorization header's value (its debug log prints every header)."""

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if len(args) == 2 and str(args[0]).lower() == "authorization":
            args = (args[0], "<redacted>")
        super().log(level, msg, *args, **kwargs)


_WS_LOGGER = _RedactingLogger(logging.getLogger("websockets.client"), {})
log = logging.getLogger(__name__)


class _Expired(Exception):
    """A request's deadline passed (set on its future; raised as EnvTimeoutError)."""


_CLOCK_SLACK_S = 0.001  # timers may fire up to a clock tick early: count those deadlines as past


def _expired(future: asyncio.Future) -> bool:
    return future.done() and not future.cancelled() and isinstance(future.exception(), _Expired)


_ConnectionClosed: Any = None


def _closed_error() -> Any:
    """websockets' ConnectionClosed (imported on first use: `import env_client` stays light)."""
    global _ConnectionClosed
    if _ConnectionClosed is None:
        from websockets.exceptions import ConnectionClosed

        _ConnectionClosed = ConnectionClosed
    return _ConnectionClosed


async def open_websocket(url: str, headers: dict[str, str], config: ClientConfig,
                         subprotocols: list[str] | None = None) -> Any:
    """One WebSocket handshake under the client's settings; a refused token (HTTP 401/403) raises
    EnvAuthError, anything else the transport's own exception (callers retry those)."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus

    try:
        return await asyncio.wait_for(
            connect(url, additional_headers=headers, logger=_WS_LOGGER, max_size=config.max_frame_bytes,
                    subprotocols=subprotocols, ping_interval=config.ping_interval_s,
                    ping_timeout=config.ping_timeout_s, open_timeout=config.connect_timeout_s,
                    compression=None),
            config.connect_timeout_s,
        )
    except InvalidStatus as exc:
        if exc.response.status_code in (401, 403):
            raise EnvAuthError(url) from None
        raise


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
        self._reading = False  # a request or the reader task is in recv() (websockets allows one)
        self._pending: dict[str, tuple[dict, asyncio.Future, float]] = {}  # id -> (frame, future, deadline)
        self._timer: asyncio.TimerHandle | None = None  # one timer, at the earliest pending deadline
        self._timer_at = math.inf
        self._slot_waiters: collections.deque[asyncio.Future] = collections.deque()  # backpressure
        self._leader: tuple[asyncio.Task, asyncio.Future] | None = None  # a request reading for itself
        self._connect_lock = asyncio.Lock()
        self._closing = False

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def _open(self) -> Any:
        return await open_websocket(self.url, self._headers, self.config, [MUX_SUBPROTOCOL])

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

    async def request(
        self,
        session_id: str,
        type_: MuxRequestType,
        data: dict | None = None,
        *,
        request_id: str | None = None,
        timeout_s: float | None = None,
    ) -> dict:
        """Send one request and return the reply frame; raise the typed error otherwise."""
        if len(self._pending) >= self.config.max_in_flight:
            await self._wait_for_slot()
        if self._ws is None:
            await self.connect()
        rid = request_id or uuid.uuid4().hex
        frame = MuxRequest(request_id=rid, session_id=session_id, type=type_, data=data or {}).model_dump()
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        deadline = loop.time() + (timeout_s or self.config.request_timeout_s)
        self._pending[rid] = (frame, future, deadline)
        if deadline < self._timer_at:  # else the timer fires earlier and re-arms for what is left
            self._arm(deadline)
        try:
            await self._send(frame)
            reply = await (future if self._reading else self._read_until(future))
        except _Expired:
            raise EnvTimeoutError(f"{type_} on session {session_id} timed out ({self.url})") from None
        except asyncio.CancelledError:
            if not _expired(future):
                raise
            asyncio.current_task().uncancel()  # our own deadline interrupted our read
            raise EnvTimeoutError(f"{type_} on session {session_id} timed out ({self.url})") from None
        finally:
            self._pending.pop(rid, None)
            if self._slot_waiters:
                self._wake_slot_waiter()
        reply = MuxReply.model_validate(reply).model_dump()
        if reply["type"] == "error":
            data = reply["data"]
            if data.get("code") == ErrorCode.UNAUTHORIZED.value:
                raise EnvAuthError(self.url)
            raise server_error(data)
        return reply

    async def _send(self, frame: dict) -> None:
        """Send on the current socket; a closed socket is left to the reading side (it reconnects
        and re-sends the pending frames)."""
        ws = self._ws
        if ws is None:
            return
        try:
            await ws.send(compact_json(frame))
        except _closed_error():
            pass

    async def _wait_for_slot(self) -> None:
        """Wait until fewer than `max_in_flight` requests are outstanding (FIFO)."""
        while len(self._pending) >= self.config.max_in_flight:
            waiter = asyncio.get_running_loop().create_future()
            self._slot_waiters.append(waiter)
            try:
                await waiter
            finally:
                if not waiter.done():
                    waiter.cancel()

    def _wake_slot_waiter(self) -> None:
        while self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = asyncio.get_running_loop().call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        """Expire the requests past their deadline; re-arm for the earliest one left."""
        self._timer, self._timer_at = None, math.inf
        now = asyncio.get_running_loop().time() + _CLOCK_SLACK_S
        earliest = math.inf
        for _, future, when in list(self._pending.values()):
            if future.done():
                continue
            if when <= now:
                self._expire(future)
            else:
                earliest = min(earliest, when)
        if earliest < math.inf:
            self._arm(earliest)

    def _expire(self, future: asyncio.Future) -> None:
        """A request's deadline: fail its future; interrupt its read when it reads for itself."""
        if future.done():
            return
        future.set_exception(_Expired())
        if self._leader is not None and self._leader[1] is future:
            self._leader[0].cancel()

    async def _read_until(self, future: asyncio.Future) -> dict:
        """Read the socket until `future` (this request's) is answered, then hand reading over."""
        self._reading = True
        self._leader = (asyncio.current_task(), future)
        try:
            await self._read(future.done)
        finally:
            self._reading = False
            self._leader = None
            self._hand_over()
        if not future.done():
            raise EnvConnectionError(f"connection to {self.url} closed")
        return future.result()

    def _hand_over(self) -> None:
        """Start the reader task when requests are still waiting and nobody reads for them."""
        if self._reading or self._closing or not self._waiting():
            return
        self._reading = True
        self._reader = asyncio.get_running_loop().create_task(self._reader_loop(), name=f"mux-reader {self.url}")

    def _waiting(self) -> bool:
        """Some request still waits for its reply."""
        pending = self._pending
        if len(pending) == 1:  # the common case: only the request now leaving
            return not next(iter(pending.values()))[1].done()
        return any(not entry[1].done() for entry in pending.values())

    async def _reader_loop(self) -> None:
        try:
            await self._read(lambda: not self._waiting())
        finally:
            self._reading = False
            self._hand_over()

    async def _read(self, stop: Any) -> None:
        """Dispatch replies to their requests' futures until `stop()`; on a drop, reconnect and
        re-send the pending frames (the replica marked dead when that fails)."""
        closed = _closed_error()
        while not stop():
            ws = self._ws
            if ws is None:
                return
            try:
                raw = await ws.recv()
                msg = json.loads(raw)
            except closed:
                if self._closing or not await self._reconnect():
                    return
                for frame, future, _ in list(self._pending.values()):
                    if not future.done():
                        await self._send(frame)
                continue
            except Exception as exc:  # noqa: BLE001 - a malformed frame breaks the stream
                self._mark_dead(exc)
                return
            entry = self._pending.get(msg.get("request_id")) if isinstance(msg, dict) else None
            if entry is not None and not entry[1].done():
                entry[1].set_result(msg)
            # else: a late reply to a request that timed out, or a duplicate: dropped

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
        for _, future, _ in list(self._pending.values()):
            if not future.done():
                future.set_exception(EnvAuthError(self.url) if isinstance(exc, EnvAuthError)
                                     else EnvConnectionError(f"replica {self.url} lost: {exc!r}"))

    async def close(self) -> None:
        self._closing = True
        ws, self._ws = self._ws, None
        if self._timer is not None:
            self._timer.cancel()
            self._timer, self._timer_at = None, math.inf
        for _, future, _ in list(self._pending.values()):
            if not future.done():
                future.set_exception(EnvConnectionError(f"connection to {self.url} closed by the client"))
        if ws is not None:
            await ws.close()
        if self._reader is not None and not self._reader.done():
            self._reader.cancel()
            try:
                await self._reader
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
