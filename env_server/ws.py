"""``/ws``: OpenEnv's WebSocket protocol, one session per connection.

One reply per request, in order, no unsolicited frames. A disconnect while a
step runs cancels the step and frees the sandbox; the trace keeps every
completed step. ``/ws?session_id=<id>`` drives an HTTP MCP session (made with
``openenv/session/create``) instead of a new one, as OpenEnv's ``MCPToolClient``
does: closing the socket hands that session back (it stays open for ``/mcp``); only its
creator (or an operator) may attach it.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError
from starlette.websockets import WebSocket, WebSocketDisconnect

from contract import ErrorCode, WsReply, WsRequest

from .auth import Identity
from .connection import FrameReader
from .errors import ProtocolError
from .mcp import handle_jsonrpc
from .service import EnvService, Session

log = logging.getLogger(__name__)


async def dispatch(service: EnvService, session: Session, frame: dict[str, Any],
                   identity: Identity) -> WsReply | None:
    """The reply to one decoded frame of ``identity``'s connection (None for ``close``)."""
    try:
        request = WsRequest.model_validate(frame)
    except ValidationError:
        raise ProtocolError(ErrorCode.UNKNOWN_TYPE, f"Unknown message type: {frame.get('type')!r} "
                            "(expected reset, step, state, mcp or close)") from None
    kind, data = request.type, request.data
    if data is not None and not isinstance(data, dict) and kind != "mcp":
        raise ProtocolError(ErrorCode.VALIDATION_ERROR, "data must be a JSON object")
    if kind == "reset":
        return WsReply(type="observation", data=(await service.reset(session, data, identity)).envelope(mcp_result=True))
    if kind == "step":
        return WsReply(type="observation", data=(await service.step(session, data)).envelope(mcp_result=True))
    if kind == "state":
        return WsReply(type="state", data=await service.state(session, data))
    if kind == "mcp":
        return WsReply(type="mcp", data=await handle_jsonrpc(service, data, session, identity=identity))
    if kind == "close":
        return None
    raise ProtocolError(ErrorCode.UNKNOWN_TYPE, f"Unknown message type: {kind!r} "
                        "(expected reset, step, state, mcp or close)")


async def close_quietly(ws: WebSocket) -> None:
    """Close 1000; a peer that has already gone (OpenEnv's clients send ``close`` and hang up) is fine."""
    try:
        await ws.close(1000)
    except (WebSocketDisconnect, RuntimeError, OSError):
        pass


def error_frame(service: EnvService, exc: ProtocolError) -> WsReply:
    service.metrics.protocol_errors.labels(exc.code.value).inc()
    return WsReply(type="error", data=exc.data())


async def serve_ws(ws: WebSocket, service: EnvService, identity: Identity) -> None:
    await ws.accept()
    reader = FrameReader(ws, service.config.max_frame_bytes)
    shared = ws.query_params.get("session_id")
    try:
        try:
            session = service.attach(shared, identity) if shared else service.open_session(owner=identity.name)
        except ProtocolError as exc:  # OpenEnv: one CAPACITY_REACHED (SESSION_*) frame, then close 1000
            await reader.send(error_frame(service, exc))
            await close_quietly(ws)
            return
        cut = False  # the peer went away mid-request: that request was cancelled
        try:
            while (raw := await reader.next()) is not None:
                try:
                    request = dispatch(service, session, reader.decode(raw), identity)
                    finished, reply = await reader.run_or_disconnect(request)
                except ProtocolError as exc:
                    finished, reply = True, error_frame(service, exc)
                except Exception as exc:  # noqa: BLE001 - the session survives a server bug
                    log.exception("ws request failed")
                    finished, reply = True, error_frame(service, ProtocolError(ErrorCode.EXECUTION_ERROR, str(exc)))
                if not finished:
                    cut = True
                    break
                if reply is None:
                    await close_quietly(ws)
                    break
                await reader.send(reply)
        finally:
            if shared and not cut:
                service.detach(session)
            else:
                await service.close_session(session)
    finally:
        await reader.stop()
