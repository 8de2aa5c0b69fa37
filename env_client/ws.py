"""OpenEnv's `/ws`: one session per WebSocket, one reply per request, in order.

`WsSession` speaks the envelope of env_server/ws.py: `{"type": "reset"|"step"|"state"|"mcp"|
"close", "data": {...}}` -> `{"type": "observation"|"state"|"mcp"|"error", "data": {...}}`.
There are no request ids, so a request that times out leaves its reply in flight: the
session is then broken (its socket closed, which closes it on the server) rather than letting
the next request read the wrong reply. A dropped socket loses the session too (the server
closes sessions with their connection): `EnvConnectionError`, then `EnvSessionError` on any
later request. Over capacity the server sends one CAPACITY_REACHED frame and closes:
`EnvCapacityError` on the first request.

`WsReplica` is one replica's /ws endpoint: the settings, token and liveness its sessions share
(`ReplicaPool(..., transport="ws")` places sessions on replicas like /mux does).
"""

from __future__ import annotations

import asyncio
from typing import Any

from contract import ErrorCode, WsReply, WsRequest, compact_json  # public wire types only

from .config import ClientConfig, auth_headers, split_token
from .errors import EnvAuthError, EnvClientError, EnvConnectionError, EnvSessionError, EnvTimeoutError, server_error
from .mux import open_websocket
from .session import SessionBase
from .urls import http_base, ws_url

__all__ = ["WsReplica", "WsSession", "ws_url"]

#: codes after which the server has closed the socket: the session is gone
_FATAL = {ErrorCode.CAPACITY_REACHED.value, ErrorCode.SESSION_NOT_FOUND.value, ErrorCode.SESSION_ERROR.value}


class WsReplica:
    """One replica's `/ws` endpoint: each session opens its own socket here."""

    def __init__(self, url: str, config: ClientConfig = ClientConfig(), *, token: str | None = None):
        base, url_token = split_token(url)
        self.url = ws_url(base)
        self.base_url = http_base(base)
        self.config = config
        self._token = url_token or token or config.token
        self._headers = auth_headers(self._token)
        self.dead = False

    async def open_socket(self) -> Any:
        """A new socket (= a new session on the server), with retries and back-off; EnvAuthError
        at once for a refused token; EnvConnectionError (the replica marked dead) when unreachable."""
        if self.dead:
            raise EnvConnectionError(f"replica {self.url} is dead")
        delay = self.config.reconnect_backoff_s
        for attempt in range(self.config.reconnect_attempts + 1):
            try:
                return await open_websocket(self.url, self._headers, self.config)
            except EnvAuthError:
                raise
            except Exception as exc:  # noqa: BLE001 - any other failure means unreachable
                if attempt == self.config.reconnect_attempts:
                    self.dead = True
                    raise EnvConnectionError(f"cannot connect to {self.url}: {exc!r}") from exc
                await asyncio.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    async def connect(self) -> None:
        """Check the replica now (HTTP `GET /metadata`, which also checks the token: opening a
        socket would open a session): EnvAuthError, or EnvConnectionError (marked dead)."""
        from .http import AsyncHttpClient

        async with AsyncHttpClient(self.base_url, token=self._token, config=self.config) as http:
            try:
                await http.metadata()
            except EnvConnectionError:
                self.dead = True
                raise

    async def close(self) -> None:
        """Nothing shared to close (each session closes its own socket)."""


class WsSession(SessionBase):
    """One env session over its own `/ws` socket (OpenEnv's protocol).

        async with WsSession("http://127.0.0.1:8000") as session:
            obs = await session.reset(instance_id="six__demo-1")
            obs = await session.call_tool("bash", {"command": "ls"})
    """

    def __init__(self, replica: WsReplica | str, config: ClientConfig | None = None, *, token: str | None = None):
        if isinstance(replica, str):
            replica = WsReplica(replica, config or ClientConfig(), token=token)
        super().__init__(replica.config)
        self.connection = replica
        self.broken: str | None = None  # why the session can no longer be used
        self._ws: Any = None
        self._lock = asyncio.Lock()

    async def __aenter__(self) -> "WsSession":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _request(self, type_: str, data: dict | None, timeout_s: float | None = None) -> dict:
        from websockets.exceptions import ConnectionClosed

        async with self._lock:
            if self.closed:
                raise EnvSessionError(ErrorCode.SESSION_CLOSED.value, "this /ws session was closed")
            if self.broken:
                raise EnvSessionError(ErrorCode.SESSION_ERROR.value, self.broken)
            if self._ws is None:
                self._ws = await self.connection.open_socket()
            ws = self._ws
            try:
                try:
                    await ws.send(compact_json(WsRequest(type=type_, data=data or {}).model_dump()))
                except ConnectionClosed:
                    pass  # the server may have said why (CAPACITY_REACHED) before closing: read it
                async with asyncio.timeout(timeout_s or self.config.request_timeout_s):
                    raw = await ws.recv()
            except TimeoutError:
                await self._break(f"{type_} timed out; its reply would desync the socket")
                raise EnvTimeoutError(f"{type_} on {self.connection.url} timed out (the /ws session is "
                                      "closed: its reply would desync the socket)") from None
            except ConnectionClosed as exc:
                await self._break(f"the socket closed ({exc.rcvd.code if exc.rcvd else 'no close frame'})")
                raise EnvConnectionError(f"/ws session on {self.connection.url} lost: {self.broken}") from None
        reply = WsReply.model_validate_json(raw).model_dump()
        if reply["type"] == "error":
            err = reply["data"] or {}
            if err.get("code") == ErrorCode.UNAUTHORIZED.value:
                raise EnvAuthError(self.connection.url)
            if err.get("code") in _FATAL:
                await self._break(f"{err.get('code')}: {err.get('message', '')}")
            raise server_error(err)
        return reply

    async def _break(self, why: str) -> None:
        self.broken = why
        ws, self._ws = self._ws, None
        if ws is not None:
            try:
                await ws.close()
            except Exception:  # noqa: BLE001 - already gone
                pass

    async def mcp(self, request: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        """A JSON-RPC request (`tools/list`, `tools/call`) run in this session; the JSON-RPC reply."""
        return (await self._request("mcp", request, timeout_s)).get("data") or {}

    async def close(self) -> None:
        """Close the session (`close` frame; the server closes the socket); idempotent, best effort."""
        if self.closed:
            return
        self.closed = True
        ws, self._ws = self._ws, None
        if ws is None:
            return
        try:
            await ws.send('{"type":"close"}')
            await asyncio.wait_for(ws.wait_closed(), 5)
        except (EnvClientError, Exception):  # noqa: BLE001 - gone already
            pass
        finally:
            await ws.close()
