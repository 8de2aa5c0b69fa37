"""``/mux``: many sessions over one WebSocket (see docs/protocol.md).

Every frame carries ``session_id`` and ``request_id``. Each request runs in its
own task chained after the previous request of the same session, so sessions
never wait for each other while each session's requests run in order. Replies
are cached per session by ``request_id``: a retry is answered, not re-executed.
Closing the connection closes its sessions (and cancels their running steps).
A closed session's state is dropped at once (a trainer opens a new session id per
episode on one long-lived connection): only its id and, for the last
``mux_closed_replies`` closed sessions, the close reply are kept. Session ids name sessions of
this connection only; its sessions and episodes are owned by the connection's identity.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque
from typing import Any

from pydantic import ValidationError
from starlette.websockets import WebSocket

from contract import ErrorCode, MuxReply, MuxReplyType, MuxRequest

from .auth import Identity
from .connection import FrameReader
from .errors import ProtocolError
from .service import EnvService, Session

log = logging.getLogger(__name__)


class MuxConnection:
    def __init__(self, service: EnvService, reader: FrameReader, identity: Identity) -> None:
        self.service = service
        self.reader = reader
        self.identity = identity
        self.sessions: dict[str, Session] = {}
        self.closed_ids: set[str] = set()
        self.tails: dict[str, asyncio.Task[Any]] = {}  # last request task per session
        self.replies: dict[str, OrderedDict[str, asyncio.Task[MuxReply]]] = {}
        self.closed_order: deque[str] = deque()  # closed sessions still holding their close reply
        self.inflight: set[asyncio.Task[Any]] = set()  # strong references until each request is done

    def reply(self, req: MuxRequest | None, kind: MuxReplyType, data: dict[str, Any],
              raw: dict[str, Any] | None = None) -> MuxReply:
        src = raw or {}
        return MuxReply(request_id=req.request_id if req else _str(src.get("request_id")),
                        session_id=req.session_id if req else _str(src.get("session_id")), type=kind, data=data)

    def error(self, req: MuxRequest | None, exc: ProtocolError, raw: dict[str, Any] | None = None) -> MuxReply:
        self.service.metrics.protocol_errors.labels(exc.code.value).inc()
        return self.reply(req, "error", exc.data(), raw)

    async def on_frame(self, raw_frame: str | bytes) -> None:
        raw: dict[str, Any] | None = None
        try:
            raw = self.reader.decode(raw_frame)
            req = MuxRequest.model_validate(raw)
        except ProtocolError as exc:
            await self.reader.send(self.error(None, exc, raw))
            return
        except ValidationError as exc:
            code = ErrorCode.UNKNOWN_TYPE if any(e["loc"] == ("type",) and e["type"] == "literal_error"
                                                 for e in exc.errors()) else ErrorCode.VALIDATION_ERROR
            msg = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            await self.reader.send(self.error(None, ProtocolError(code, f"invalid mux frame: {msg}"), raw))
            return
        if req.type == "ping":
            await self.reader.send(self.reply(req, "pong", {}))
            return
        closed = req.session_id in self.closed_ids
        cache = self.replies.get(req.session_id) if closed else self.replies.setdefault(req.session_id, OrderedDict())
        if cache is not None and req.request_id in cache:  # a retry: answer from the cache, never re-execute
            original = cache[req.request_id]
            original.add_done_callback(lambda t: asyncio.ensure_future(self._resend(t)))
            return
        if closed:  # answered at once, nothing kept
            await self.reader.send(self.error(req, ProtocolError(
                ErrorCode.SESSION_CLOSED, f"session {req.session_id!r} was closed")))
            return
        prev = self.tails.get(req.session_id)
        task = asyncio.create_task(self._run(req, prev))
        self.inflight.add(task)
        task.add_done_callback(self.inflight.discard)
        self.tails[req.session_id] = task
        cache[req.request_id] = task
        while len(cache) > self.service.config.mux_reply_cache:
            cache.popitem(last=False)

    async def _resend(self, task: asyncio.Task[MuxReply]) -> None:
        if not task.cancelled() and task.exception() is None:
            await self.reader.send(task.result())

    async def _run(self, req: MuxRequest, prev: asyncio.Task[Any] | None) -> MuxReply:
        if prev is not None and not prev.done():
            await asyncio.wait((prev,))  # in order within the session; prev's outcome is its own
        try:
            reply = await self._execute(req)
        except ProtocolError as exc:
            reply = self.error(req, exc)
        except Exception as exc:  # noqa: BLE001 - one bad request must not kill the connection
            log.exception("mux request failed")
            reply = self.error(req, ProtocolError(ErrorCode.EXECUTION_ERROR, str(exc)))
        await self.reader.send(reply)
        return reply

    def _session(self, req: MuxRequest) -> Session:
        if req.session_id in self.closed_ids:
            raise ProtocolError(ErrorCode.SESSION_CLOSED, f"session {req.session_id!r} was closed")
        session = self.sessions.get(req.session_id)
        if session is None:
            raise ProtocolError(ErrorCode.SESSION_NOT_FOUND,
                                f"no session {req.session_id!r} on this connection: send reset first")
        return session

    async def _execute(self, req: MuxRequest) -> MuxReply:
        svc = self.service
        if req.type == "reset":
            if req.session_id in self.closed_ids:
                raise ProtocolError(ErrorCode.SESSION_CLOSED, f"session {req.session_id!r} was closed")
            session = self.sessions.get(req.session_id)
            created = session is None
            if created:
                session = self.sessions[req.session_id] = svc.open_session(owner=self.identity.name)
            try:
                return self.reply(req, "observation", (await svc.reset(session, req.data, self.identity)).envelope())
            except BaseException:
                if created:
                    await self._close(req.session_id)
                    self.closed_ids.discard(req.session_id)  # a failed reset leaves the id free
                raise
        session = self._session(req)
        if req.type == "step":
            return self.reply(req, "observation", (await svc.step(session, req.data)).envelope())
        if req.type == "state":
            return self.reply(req, "state", await svc.state(session, req.data))
        await svc.close(session)  # "close"
        await self._close(req.session_id, keep_reply=req.request_id)
        return self.reply(req, "closed", {})

    async def _close(self, session_id: str, keep_reply: str | None = None) -> None:
        """Close a session and drop its per-connection state (replies, request chain).

        ``keep_reply``: the close request's id, whose reply stays cached for a retry (for the
        last ``mux_closed_replies`` closed sessions of this connection).
        """
        session = self.sessions.pop(session_id, None)
        self.closed_ids.add(session_id)
        self.tails.pop(session_id, None)
        cache = self.replies.pop(session_id, None)
        horizon = self.service.config.mux_closed_replies
        if keep_reply is not None and cache is not None and keep_reply in cache and horizon > 0:
            self.replies[session_id] = OrderedDict([(keep_reply, cache[keep_reply])])
            self.closed_order.append(session_id)
            while len(self.closed_order) > horizon:  # a closed id stays closed: its tombstone can go
                self.replies.pop(self.closed_order.popleft(), None)
        if session is not None:
            await self.service.close_session(session)

    async def shutdown(self) -> None:
        tasks = [t for t in self.inflight if not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(self.service.close_session(s) for s in self.sessions.values()),
                             return_exceptions=True)
        self.sessions.clear()


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


async def serve_mux(ws: WebSocket, service: EnvService, identity: Identity) -> None:
    await ws.accept()
    reader = FrameReader(ws, service.config.max_frame_bytes)
    conn = MuxConnection(service, reader, identity)
    try:
        while (raw := await reader.next()) is not None:
            await conn.on_frame(raw)
    finally:
        await conn.shutdown()
        await reader.stop()
