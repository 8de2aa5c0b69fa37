"""JSON-RPC 2.0 tool calls (OpenEnv RFC 003): ``POST /mcp`` and ``{"type": "mcp"}`` on /ws.

``tools/list`` needs no session. ``tools/call`` runs a step in the caller's
session: the /ws connection's own, or over HTTP one made with
``openenv/session/create`` (closed by ``openenv/session/close`` or the idle timeout).
Sessions are addressed by id: a client's request naming a session it did not create is
answered as for a missing one (SESSION_NOT_FOUND).
"""

from __future__ import annotations

from typing import Any

from contract import ErrorCode, ResetParams

from .auth import Identity
from .errors import ProtocolError
from .service import EnvService, Session

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, SERVER_ERROR = -32700, -32600, -32601, -32602, -32000


def _error(req_id: Any, code: int, message: str, data: dict[str, Any] | None = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if data:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": req_id, "error": err}


def _ok(req_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": req_id, "result": result}


async def handle_jsonrpc(service: EnvService, body: Any, session: Session | None = None, *,
                         identity: Identity) -> dict[str, Any]:
    """Answer one JSON-RPC request from ``identity``; every failure is a JSON-RPC error object."""
    if not isinstance(body, dict) or body.get("jsonrpc") != "2.0" or not isinstance(body.get("method"), str):
        return _error(body.get("id") if isinstance(body, dict) else None, INVALID_REQUEST,
                      'Invalid Request: expected {"jsonrpc": "2.0", "method": ..., "params": {...}, "id": ...}')
    req_id, method, params = body.get("id"), body["method"], body.get("params") or {}
    if not isinstance(params, dict):
        return _error(req_id, INVALID_PARAMS, "params must be an object")
    try:
        if method == "tools/list":  # the tools of the session's episode, else of params.profile (default)
            episode = session.episode if session is not None else None
            profile = (episode.profile if episode is not None else
                       service.profile_of(ResetParams(profile=params.get("profile") or None)))
            return _ok(req_id, {"tools": [t.mcp() for t in profile.specs()]})
        if method == "tools/call":
            return _ok(req_id, await _call(service, params, session, identity))
        if method == "openenv/session/create":
            new = service.open_session(attached=False, owner=identity.name)
            try:
                obs = await service.reset(new, params, identity)
            except BaseException:
                await service.close_session(new)
                raise
            return _ok(req_id, {"session_id": new.id, "observation": obs.envelope()})
        if method == "openenv/session/close":
            target = params.get("session_id")
            if not isinstance(target, str) or (session is not None and target == session.id):
                return _error(req_id, INVALID_PARAMS, "params.session_id must name an HTTP MCP session")
            await service.close(service.get(target, identity))
            return _ok(req_id, {"session_id": target, "closed": True})
    except ProtocolError as exc:
        code = INVALID_PARAMS if exc.code in (ErrorCode.SESSION_NOT_FOUND, ErrorCode.TASK_NOT_FOUND, ErrorCode.UNKNOWN_PROFILE,
                                              ErrorCode.VALIDATION_ERROR, ErrorCode.INVALID_ACTION,
                                              ErrorCode.EPISODE_NOT_FOUND, ErrorCode.STEP_OUT_OF_RANGE,
                                              ErrorCode.FORK_UNAVAILABLE) else SERVER_ERROR
        return _error(req_id, code, exc.message, exc.data())
    return _error(req_id, METHOD_NOT_FOUND, f"Method not found: {method}")


async def _call(service: EnvService, params: dict[str, Any], session: Session | None,
                identity: Identity) -> dict[str, Any]:
    if session is None:
        sid = params.get("session_id")
        if not isinstance(sid, str):
            raise ProtocolError(ErrorCode.VALIDATION_ERROR,
                                "params.session_id is required over HTTP (create one with openenv/session/create)")
        session = service.get(sid, identity)
    name, arguments = params.get("name"), params.get("arguments") or {}
    obs = await service.step(session, {"type": "call_tool", "tool_name": name, "arguments": arguments})
    return obs.mcp_result()
