"""One multiplexed WebSocket (`/mux`) to one replica: request ids, reconnect with re-send, backpressure.

Every frame has a client-chosen `request_id`; replies are matched by id, so replies of
different sessions may interleave and a reply that arrives after its request timed out is
dropped instead of desyncing the stream. When a connection drops, the client reconnects and
re-sends the requests still in flight under the same ids (the server answers a repeated id
from its cache, so nothing runs twice); when the replica stays unreachable, it is marked
dead and in-flight requests fail with `EnvConnectionError`. `max_in_flight` bounds the
requests outstanding on one connection.

Auth: the token is sent as `Authorization: Bearer <token>` on the handshake; a refused
handshake (HTTP 401/403) or an UNAUTHORIZED frame raises `EnvAuthError` at once (no retries);
the token never appears in URLs, logs or exception texts.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from env_server.protocol import MUX_SUBPROTOCOL, ErrorCode  # public wire types only

from .config import ClientConfig, auth_headers, split_token
from .errors import EnvAuthError, EnvConnectionError, EnvTimeoutError, server_error

__all__ = ["MuxConnection", "mux_url"]


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
