"""The FastAPI app: OpenEnv's routes, ``/ws``, ``/mux``, ``/mcp``, traces and metrics.

Production mode in OpenEnv's terms: no HTTP ``/reset`` ``/step`` ``/state``
(sessions live on WebSockets or HTTP MCP sessions); finished episodes are read
back over ``/episodes/...``. Auth and who sees what: ``env_server/auth.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

from fastapi import APIRouter, Depends, FastAPI, Request, WebSocket
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import TypeAdapter

from contract import (DEFAULT_PROFILE, MUX_SUBPROTOCOL, PROFILES, PROTOCOL_VERSION, Action, EpisodeState, ErrorCode,
                      StateRecord, SWEObservation, get_profile)
from verifier.task import TaskFileError, TaskInstance, check_backend, load_tasks

from .auth import Authenticator, Identity, redact_server_logs
from .config import ServerConfig
from .errors import ProtocolError
from .mcp import PARSE_ERROR, handle_jsonrpc
from .mux import serve_mux
from .service import EnvService
from .tools import missing_handlers
from .traces import TraceError
from .ws import serve_ws

_STATUS = {ErrorCode.UNAUTHORIZED: 401, ErrorCode.EPISODE_NOT_FOUND: 404, ErrorCode.STEP_OUT_OF_RANGE: 404,
           ErrorCode.SESSION_NOT_FOUND: 404, ErrorCode.TASK_NOT_FOUND: 404, ErrorCode.GRADER_BUSY: 503}


def uvicorn_config(app: FastAPI, config: ServerConfig, host: str, port: int, log_level: str = "info") -> Any:
    """The uvicorn settings the server runs under (the CLI and the tests share them).

    uvloop when installed (uvicorn's default pick), keep-alive pings, frames up to twice
    the protocol's frame limit (oversized frames get a clear error frame, not a dropped
    socket), and no permessage-deflate (see docs/protocol.md). Token values never reach uvicorn's
    logs (the access log prints query strings, ``?token=`` included): see ``RedactSecrets``.
    """
    import uvicorn

    settings = uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on",
                              ws_max_size=config.max_frame_bytes * 2, ws_ping_interval=20, ws_ping_timeout=60,
                              ws_per_message_deflate=False)
    redact_server_logs()  # after uvicorn.Config set up its loggers and handlers
    return settings


def check_repositories(tasks: list[TaskInstance]) -> None:
    """Raise TaskFileError, before the server says it is ready, when a task's repository cannot serve
    resets under this process's uid: unreadable, or owned by another uid (git refuses a repository
    another user owns: "dubious ownership", whose own advice does not apply in the container). The
    message names the path, the owner and the fix (docs/deploy.md, Tasks)."""
    uid = os.geteuid()
    seen: set[Path] = set()
    for task in tasks:
        repo = task.repo_path
        if repo is None or repo in seen:
            continue
        seen.add(repo)
        for path in (repo, repo / ".git"):
            try:
                owner = path.stat().st_uid
            except FileNotFoundError:
                continue  # (.git of a bare layout, or none: the template step says what is missing)
            except OSError as exc:
                raise TaskFileError(f"task {task.instance_id}: cannot read its repository {path}: {exc.strerror} "
                                    f"(this server runs as uid {uid})") from None
            if not os.access(path, os.R_OK | os.X_OK):
                raise TaskFileError(f"task {task.instance_id}: its repository {path} is not readable by this "
                                    f"server's uid {uid} (owner uid {owner}): chown -R {uid}:{uid} on the pack, or "
                                    f"run the server as uid {owner} (compose: SWE_ENV_UID={owner})")
            if owner != uid:
                raise TaskFileError(f"task {task.instance_id}: its repository {path} belongs to uid {owner}, not to this "
                                    f"server's uid {uid}, and git refuses a repository another user owns: chown -R "
                                    f"{uid}:{uid} on the pack, or run the server as uid {owner} (compose: "
                                    f"SWE_ENV_UID={owner})")


def create_app(config: ServerConfig, tasks: list[TaskInstance] | None = None) -> FastAPI:
    """Build the app; ``tasks`` defaults to loading ``config.tasks_path``."""
    tasks = tasks if tasks is not None else load_tasks(config.tasks_path)
    check_backend(tasks, config.sandbox.backend_name)
    check_repositories(tasks)
    unrun = missing_handlers()
    if unrun:  # a tool entry of the contract's registry without a handler here: refuse to serve it
        raise RuntimeError(f"no handler runs the tools {', '.join(unrun)}: register one with "
                           "env_server.tools.handles(<its arguments model>)")
    service = EnvService(config, tasks)
    auth = Authenticator.from_config(config)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        reaper = asyncio.create_task(service.reap_idle())
        service.look_ahead(0)  # the first tasks of the queue, while the first clients connect
        try:
            yield
        finally:
            reaper.cancel()
            await service.shutdown()

    app = FastAPI(title="swe-openenv env server", version=PROTOCOL_VERSION, lifespan=lifespan)
    app.state.service = service

    async def identify(request: Request) -> Identity:
        """The caller of an HTTP route: ``Authorization: Bearer`` only (``?token=`` is refused)."""
        return auth.http(request.headers, request.query_params)

    @app.exception_handler(ProtocolError)
    async def _protocol_error(_: Request, exc: ProtocolError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.code is ErrorCode.UNAUTHORIZED else None
        return JSONResponse({"error": exc.data()}, status_code=_STATUS.get(exc.code, 400), headers=headers)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "healthy"}

    api = APIRouter(dependencies=[Depends(identify)])

    @api.get("/metadata")
    async def metadata() -> dict[str, Any]:
        return {"name": "swe-openenv", "version": PROTOCOL_VERSION,
                "description": "SWE-style coding episodes in a hardened sandbox, graded by hidden tests.",
                "tasks": len(service.tasks), "tools": [t.mcp() for t in get_profile(None).specs()],
                "profiles": {name: {"about": p.about, "tools": p.names} for name, p in PROFILES.items()},
                "default_profile": DEFAULT_PROFILE, "backend": config.sandbox.backend_name,
                "extensions": ["error-site-markers", "state-t-replay", "multiplexed-websocket",
                               "episode-fork"],
                "mux_subprotocol": MUX_SUBPROTOCOL, "max_sessions": config.max_sessions}

    @api.get("/schema")
    async def schema() -> dict[str, Any]:
        return {"action": TypeAdapter(Action).json_schema(), "observation": SWEObservation.model_json_schema(),
                "state": EpisodeState.model_json_schema(), "state_record": StateRecord.model_json_schema()}

    @api.post("/mcp")
    async def mcp(request: Request, identity: Identity = Depends(identify)) -> dict[str, Any]:
        try:
            body = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return {"jsonrpc": "2.0", "id": None, "error": {"code": PARSE_ERROR, "message": f"Parse error: {exc}"}}
        return await handle_jsonrpc(service, body, identity=identity)

    @api.get("/metrics")
    async def metrics() -> Response:
        return Response(service.metrics.render(), media_type="text/plain; version=0.0.4")

    @api.get("/episodes")
    async def episodes(limit: int = 1000, identity: Identity = Depends(identify)) -> dict[str, Any]:
        return {"episodes": await service.episode_ids(limit, identity)}

    @api.get("/episodes/{episode_id}/state/{t}")
    async def episode_state(episode_id: str, t: int, identity: Identity = Depends(identify)) -> dict[str, Any]:
        return service.episode_state(episode_id, t, identity)

    @api.get("/episodes/{episode_id}/trace")
    async def episode_trace(episode_id: str, identity: Identity = Depends(identify)) -> StreamingResponse:
        lines = service.trace_lines(episode_id, identity)
        try:
            first = next(lines, b"")
        except TraceError as exc:
            raise ProtocolError(ErrorCode(exc.code), str(exc)) from None

        def body() -> Any:
            yield first
            yield from lines
        return StreamingResponse(body(), media_type="application/x-ndjson")

    app.include_router(api)

    async def _identify(ws: WebSocket) -> Identity | None:
        """The caller of a WebSocket upgrade (header, else ``?token=``); refused (HTTP 403) without one."""
        identity = auth.websocket(ws.headers, ws.query_params)
        if identity is None:
            await ws.close(code=1008, reason="missing or wrong bearer token")
        return identity

    @app.websocket("/ws")
    async def ws_endpoint(ws: WebSocket) -> None:
        if (identity := await _identify(ws)) is not None:
            await serve_ws(ws, service, identity)

    @app.websocket("/mux")
    async def mux_endpoint(ws: WebSocket) -> None:
        if (identity := await _identify(ws)) is not None:
            await serve_mux(ws, service, identity)

    return app
