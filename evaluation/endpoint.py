"""A policy behind an OpenAI-compatible chat-completions endpoint (vLLM, `transformers serve`, a paid API).

`ChatEndpoint.complete(messages, tools)` sends one turn's context and returns the assistant
message as a `PolicyReply`: its text, its tool calls, and, when the endpoint returns them, the
sampled token ids and log-probs (vLLM: `logprobs: true`, `return_token_ids: true`), kept
exactly as returned, never re-tokenized. `return_token_ids` is vLLM's own field: an endpoint
that refuses it (HTTP 400/422 naming the field, as OpenAI's API does) is asked again at once
without it, and not sent it again (log-probs only; token ids where the tokens carry them).
Transient failures (connection errors, timeouts,
429 and 5xx) are retried with backoff; what is left is an `EndpointError` with a kind that says
what the evaluator does with it (docs/evaluation.md):

| kind | meaning | the episode |
|---|---|---|
| `context_length` | the context no longer fits the model (HTTP 400 naming the context length) | auto-submit (graded) |
| `unavailable` | the endpoint kept failing after the retries | lost (retried, never a 0) |
| `auth` / `bad_request` | a wrong key, model name or request: nothing will work | the run stops |
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import time
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["UNNAMED_TOOL", "ChatEndpoint", "EndpointConfig", "EndpointError", "PolicyReply", "list_models",
           "wire_tool_calls"]

_CONTEXT = re.compile(r"context.{0,20}length|maximum context|too many tokens|prompt is too long|"
                      r"max_model_len|context window", re.I)
_TOKEN_ID = re.compile(r"^token_id:(\d+)$")


class EndpointConfig(BaseModel):
    """Where the policy is served and how it is sampled and priced."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(description="the OpenAI-compatible base URL, e.g. http://127.0.0.1:8001/v1")
    model: str = Field(min_length=1, description="the `model` field of each request")
    api_key_env: str | None = Field(None, description="environment variable holding the API key (never stored)")
    temperature: float | None = Field(0.0, ge=0.0, description="None: the endpoint's default")
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    max_tokens: int = Field(2048, gt=0, description="completion tokens per turn")
    logprobs: bool = Field(False, description="ask for the sampled tokens' log-probs and ids (vLLM returns both)")
    price_in: float = Field(0.0, ge=0.0, description="USD per million prompt tokens")
    price_out: float = Field(0.0, ge=0.0, description="USD per million completion tokens")
    timeout_s: float = Field(600.0, gt=0.0, description="one request, generation included")
    max_retries: int = Field(4, ge=0, description="retries of a transient failure (connection, timeout, 429, 5xx)")
    backoff_s: float = Field(1.0, ge=0.0, description="first retry's wait; doubles, with jitter, up to 30 s")
    extra_body: dict[str, Any] = Field(default_factory=dict, description="merged into every request body")


class PolicyReply(BaseModel):
    """One assistant message as the endpoint returned it."""

    model_config = ConfigDict(extra="forbid")

    content: str = ""
    tool_calls: list[dict[str, Any]] = Field(default_factory=list, description="OpenAI-style: "
                                             "{'id', 'type', 'function': {'name', 'arguments': JSON text}}")
    finish_reason: str | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0


class EndpointError(Exception):
    """A failure of the endpoint that retries did not cure; `kind` says what it means (module docstring)."""

    def __init__(self, kind: Literal["context_length", "unavailable", "auth", "bad_request"], message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message

    @property
    def fatal(self) -> bool:
        """True when no later request can succeed either (the run stops instead of losing every episode)."""
        return self.kind in ("auth", "bad_request")


def _api_key(env: str | None) -> str | None:
    if env is None:
        return None
    key = os.environ.get(env)
    if not key:
        raise EndpointError("auth", f"the API key variable ${env} is not set")
    return key


def _logprob_tokens(choice: dict[str, Any]) -> tuple[list[int] | None, list[float] | None]:
    ids = choice.get("token_ids")
    token_ids = [int(i) for i in ids] if isinstance(ids, list) and all(isinstance(i, int) for i in ids) else None
    content = (choice.get("logprobs") or {}).get("content") if isinstance(choice.get("logprobs"), dict) else None
    if not isinstance(content, list) or not content:
        return token_ids, None
    logprobs = [float(c.get("logprob", 0.0)) for c in content if isinstance(c, dict)]
    if token_ids is None:  # vLLM's return_tokens_as_token_ids: each token is "token_id:N"
        parsed = [_TOKEN_ID.match(str(c.get("token", ""))) for c in content if isinstance(c, dict)]
        if parsed and all(parsed):
            token_ids = [int(m.group(1)) for m in parsed]
    if token_ids is not None and len(token_ids) != len(logprobs):
        return token_ids, None  # different counts: the log-probs cannot be aligned, keep the ids
    return token_ids, logprobs


#: the name a tool call without a function name is sent under: no tool has it, so the env
#: rejects the call as the agent's `unknown_tool` error and the episode goes on (a malformed call,
#: as one whose arguments are not JSON)
UNNAMED_TOOL = "unnamed_tool_call"


def wire_tool_calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    """An assistant message's tool calls in OpenAI's wire form (arguments as JSON text): what
    `PolicyReply.tool_calls` holds. A call without a function name is kept under `UNNAMED_TOOL`."""
    calls = []
    for k, call in enumerate(message.get("tool_calls") or []):
        if not isinstance(call, dict):
            continue
        fn = call.get("function") if isinstance(call.get("function"), dict) else {}
        name = fn.get("name") if isinstance(fn.get("name"), str) and fn.get("name") else UNNAMED_TOOL
        args = fn.get("arguments")
        text = args if isinstance(args, str) else json.dumps(args if args is not None else {})
        calls.append({"id": str(call.get("id") or f"call_{k}"), "type": "function",
                      "function": {"name": name, "arguments": text}})
    return calls


class ChatEndpoint:
    """An async client of one OpenAI-compatible endpoint (one connection pool; close with `aclose`)."""

    def __init__(self, config: EndpointConfig, client: httpx.AsyncClient | None = None):
        self.config = config
        key = _api_key(config.api_key_env)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = client or httpx.AsyncClient(timeout=config.timeout_s, headers=headers, trust_env=False,
                                                   limits=httpx.Limits(max_connections=None))
        self.requests = 0
        self.retries = 0
        self.token_ids_field = config.logprobs  # send `return_token_ids` (dropped once the endpoint refuses it)

    async def aclose(self) -> None:
        await self._client.aclose()

    def body(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        """The request body of one turn."""
        c = self.config
        body: dict[str, Any] = {"model": c.model, "messages": messages, "max_tokens": c.max_tokens}
        if tools:
            body["tools"] = tools
        if c.temperature is not None:
            body["temperature"] = c.temperature
        if c.top_p is not None:
            body["top_p"] = c.top_p
        if c.logprobs:
            body["logprobs"] = True
            if self.token_ids_field:
                body["return_token_ids"] = True
        body.update(c.extra_body)
        return body

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> PolicyReply:
        """The policy's next assistant message for `messages` (OpenAI chat format) and `tools`."""
        body = self.body(messages, tools)
        url = self.config.base_url.rstrip("/") + "/chat/completions"
        delay = self.config.backoff_s
        for attempt in range(self.config.max_retries + 1):
            start = time.monotonic()
            self.requests += 1
            try:
                response = await self._client.post(url, json=body)
            except (httpx.TransportError, httpx.TimeoutException) as exc:
                why = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code == 200:
                    return self._reply(response, time.monotonic() - start)
                why = f"HTTP {response.status_code}: {response.text[:300]}"
                if (self.token_ids_field and response.status_code in (400, 422)
                        and "return_token_ids" in response.text):
                    self.token_ids_field = False  # not vLLM: ask again at once without it, and from now on
                    return await self.complete(messages, tools)
                if response.status_code in (401, 403):
                    raise EndpointError("auth", f"{url} refused the request ({why})")
                if response.status_code in (400, 413, 422) and _CONTEXT.search(response.text):
                    raise EndpointError("context_length", why)
                if response.status_code != 429 and response.status_code < 500:
                    raise EndpointError("bad_request", f"{url}: {why}")
            if attempt == self.config.max_retries:
                raise EndpointError("unavailable", f"{url}: {why} (after {attempt + 1} attempts)")
            self.retries += 1
            await asyncio.sleep(min(30.0, delay) * (0.5 + random.random()))
            delay *= 2
        raise AssertionError("unreachable")

    def _reply(self, response: httpx.Response, latency: float) -> PolicyReply:
        try:
            data = response.json()
            choice = data["choices"][0]
            message = choice["message"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise EndpointError("unavailable", f"an answer without choices[0].message: {exc!r}") from None
        usage = data.get("usage") or {}
        prompt, completion = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        token_ids, logprobs = _logprob_tokens(choice)
        cost = (prompt * self.config.price_in + completion * self.config.price_out) / 1e6
        return PolicyReply(content=str(message.get("content") or ""), tool_calls=wire_tool_calls(message),
                           finish_reason=choice.get("finish_reason"), token_ids=token_ids, logprobs=logprobs,
                           prompt_tokens=prompt, completion_tokens=completion, cost_usd=cost, latency_s=latency)


async def list_models(base_url: str, api_key_env: str | None = None, timeout_s: float = 30.0) -> list[str]:
    """The model ids an endpoint serves (GET {base_url}/models), to default `--model-name`."""
    key = _api_key(api_key_env)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx.AsyncClient(timeout=timeout_s, headers=headers, trust_env=False) as client:
        try:
            response = await client.get(base_url.rstrip("/") + "/models")
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # nothing listens there: say so, and the fix
            raise EndpointError("unavailable", f"no model endpoint answers at {base_url} ({type(exc).__name__}: {exc}): "
                                "start the model server, or give --model the URL it listens on "
                                "(http://HOST:PORT/v1) or a checkpoint directory") from None
        except httpx.HTTPError as exc:
            raise EndpointError("unavailable", f"{base_url}/models: {type(exc).__name__}: {exc}") from None
    if response.status_code in (401, 403):
        raise EndpointError("auth", f"{base_url}/models refused the request (HTTP {response.status_code})")
    if response.status_code != 200:
        raise EndpointError("bad_request", f"{base_url}/models: HTTP {response.status_code}: {response.text[:200]}")
    try:
        return [str(m["id"]) for m in response.json().get("data", [])]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise EndpointError("bad_request", f"{base_url}/models: not an OpenAI model list: {exc!r}") from None
