"""Test double: a local OpenAI-compatible chat-completions server on loopback.

A script decides each reply: a tool call (optionally slow), an HTTP error (5xx, or 429
with Retry-After), or a malformed answer. The server records every request as received
and bills what it reports in `usage`, so tests can check the client from the outside.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from env_client.processes import free_port, wait_healthy


@dataclass
class Reply:
    """What the fake answers to one request."""

    tool_name: str | None = None
    arguments: Any = None
    """A dict (sent as JSON text), or a str sent verbatim as the arguments field."""
    delay: float = 0.0
    status: int = 200
    retry_after: str | None = None
    raw_body: str | None = None
    """Sent verbatim instead of a chat-completion JSON (malformed answers)."""
    content: str | None = None
    completion_tokens: int | None = None
    usage: bool = True
    echo_auth: bool = False
    """Error replies quote the request's Authorization header (as careless servers do)."""

    @classmethod
    def call(cls, tool_name: str, delay: float = 0.0, **arguments) -> Reply:
        return cls(tool_name=tool_name, arguments=arguments, delay=delay)


Script = Callable[[str, dict, int], Reply]
"""(model, request body, nth request for this model and state, from 0) -> Reply."""


@dataclass
class Received:
    model: str
    body: bytes
    headers: dict[str, str]


@dataclass
class FakeTeacherServer:
    """Run with `with FakeTeacherServer(script, prices) as fake: fake.base_url ...`."""

    script: Script
    prices: dict[str, tuple[float, float]] = field(default_factory=dict)
    """model -> (price_in, price_out) per token, for the server-side bill."""
    requests: list[Received] = field(default_factory=list)
    billed_usd: float = 0.0
    max_in_flight: Counter = field(default_factory=Counter)
    _in_flight: Counter = field(default_factory=Counter)
    _counts: dict = field(default_factory=lambda: defaultdict(int))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        app = FastAPI()
        app.post("/v1/chat/completions")(self._handle)
        app.get("/health")(lambda: {"status": "healthy"})  # readiness (not a teacher route: not recorded)
        port = free_port()
        self._origin = f"http://127.0.0.1:{port}"
        self.base_url = f"{self._origin}/v1"
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                                     lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def __enter__(self) -> FakeTeacherServer:
        self._thread.start()
        try:
            wait_healthy(self._origin, self._thread, timeout_s=10, name="the fake teacher server")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def bodies(self, model: str | None = None) -> list[dict]:
        return [json.loads(r.body) for r in self.requests if model is None or r.model == model]

    async def _handle(self, request: Request) -> Response:
        raw = await request.body()
        body = json.loads(raw)
        model = body["model"]
        key = (model, json.dumps(body["messages"], sort_keys=True))
        with self._lock:
            self.requests.append(Received(model, raw, dict(request.headers)))
            n = self._counts[key]
            self._counts[key] += 1
            self._in_flight[model] += 1
            self.max_in_flight[model] = max(self.max_in_flight[model], self._in_flight[model])
        try:
            reply = self.script(model, body, n)
            if reply.delay:
                await asyncio.sleep(reply.delay)
            return self._render(model, body, reply, request.headers.get("authorization", ""))
        finally:
            with self._lock:
                self._in_flight[model] -= 1

    def _render(self, model: str, body: dict, reply: Reply, auth: str) -> Response:
        if reply.status != 200:
            headers = {"Retry-After": reply.retry_after} if reply.retry_after else {}
            msg = f"invalid credentials: {auth}" if reply.echo_auth else "scripted failure"
            return JSONResponse({"error": {"message": msg}}, reply.status, headers=headers)
        if reply.raw_body is not None:
            return Response(reply.raw_body, media_type="application/json")
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_name is not None:
            args = reply.arguments if isinstance(reply.arguments, str) else json.dumps(reply.arguments)
            message["tool_calls"] = [{"id": "call_0", "type": "function",
                                      "function": {"name": reply.tool_name, "arguments": args}}]
        prompt = len(json.dumps([body["messages"], body.get("tools", [])]).encode()) // 4
        completion = reply.completion_tokens
        if completion is None:
            completion = min(body.get("max_tokens", 1024), 10 + len(json.dumps(message)) // 4)
        data: dict[str, Any] = {"id": "cmpl-fake", "object": "chat.completion", "model": model,
                                "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}
        if reply.usage:
            data["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion,
                             "total_tokens": prompt + completion}
        p_in, p_out = self.prices.get(model, (0.0, 0.0))
        with self._lock:  # billed whether or not usage is reported, as a provider would
            self.billed_usd += prompt * p_in + completion * p_out
        return JSONResponse(data)
