"""One teacher endpoint: async chat-completions calls with retries, backoff and budget checks."""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import random
import time
from dataclasses import dataclass
from typing import Any

import httpx

from trainer_client.pair_records import ToolCall

from .budget import Budget, actual_cost, estimate_prompt_tokens, worst_case_cost
from .config import RetryConfig, TeacherConfig
from .models import CallRecord, FrozenState

log = logging.getLogger(__name__)


def build_request(cfg: TeacherConfig, state: FrozenState) -> dict[str, Any]:
    """The chat-completions body: state(t)'s messages and tools exactly as the student saw them."""
    body: dict[str, Any] = {"model": cfg.model, "messages": state.messages, "max_tokens": cfg.max_tokens}
    if state.tools:
        body["tools"] = state.tools
        if cfg.tool_choice is not None:
            body["tool_choice"] = cfg.tool_choice
    if cfg.temperature is not None:
        body["temperature"] = cfg.temperature
    body.update(cfg.extra_body)
    return body


def tool_names(tools: list[dict[str, Any]]) -> set[str]:
    names = set()
    for tool in tools:
        fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        if isinstance(fn.get("name"), str):
            names.add(fn["name"])
    return names


class _Malformed(Exception):
    def __init__(self, kind: str, detail: str):
        super().__init__(detail)
        self.kind, self.detail = kind, detail


def parse_tool_call(data: Any, allowed: set[str]) -> ToolCall:
    """The first tool call of an OpenAI-style response, or _Malformed saying why not."""
    try:
        message = data["choices"][0]["message"]
    except (KeyError, IndexError, TypeError) as exc:
        raise _Malformed("malformed_json", f"no choices[0].message: {exc!r}") from None
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    if not calls:
        content = message.get("content") if isinstance(message, dict) else None
        raise _Malformed("no_tool_call", f"answer without a tool call: {str(content)[:120]!r}")
    try:
        fn = calls[0]["function"]
        name, raw = fn["name"], fn.get("arguments") or "{}"
    except (KeyError, IndexError, TypeError) as exc:
        raise _Malformed("malformed_json", f"bad tool_calls entry: {exc!r}") from None
    if not isinstance(name, str) or (allowed and name not in allowed):
        raise _Malformed("unknown_tool", f"tool {name!r} is not in the state's tool list")
    try:
        args = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as exc:
        raise _Malformed("bad_arguments", f"arguments are not JSON: {exc}") from None
    if not isinstance(args, dict):
        raise _Malformed("bad_arguments", f"arguments are not an object: {type(args).__name__}")
    return ToolCall(tool_name=name, arguments=args)


def retry_after_seconds(value: str | None) -> float | None:
    """Retry-After as seconds (delta-seconds or an HTTP date), None when absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


@dataclass
class _Attempt:
    """The result of one HTTP attempt."""

    cost: float
    retryable: bool
    error: str | None = None
    detail: str | None = None
    action: ToolCall | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated: bool = False
    retry_after: float | None = None


class TeacherClient:
    """Calls one teacher; at most `max_concurrency` requests in flight; never raises per call."""

    def __init__(self, cfg: TeacherConfig, retry: RetryConfig, budget: Budget, *, sleep=asyncio.sleep):
        self.cfg, self.retry, self.budget, self._sleep = cfg, retry, budget, sleep
        self._key = cfg.api_key()
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        self._http = httpx.AsyncClient(
            base_url=cfg.base_url,
            headers=headers,
            timeout=httpx.Timeout(cfg.timeout),
            limits=httpx.Limits(max_connections=cfg.max_concurrency),
        )
        self._sem = asyncio.Semaphore(cfg.max_concurrency)

    async def aclose(self) -> None:
        await self._http.aclose()

    def _redact(self, text: str) -> str:
        return text.replace(self._key, "***") if self._key else text

    async def ask(self, state: FrozenState) -> CallRecord:
        """Query the teacher for state(t)'s next action; failures come back as data."""
        start = time.monotonic()
        body = json.dumps(build_request(self.cfg, state), ensure_ascii=False).encode("utf-8")
        worst = worst_case_cost(self.cfg, estimate_prompt_tokens(state.messages, state.tools))
        allowed = tool_names(state.tools)
        rec = CallRecord(teacher=self.cfg.name, model=self.cfg.model, state_id=state.state_id, ok=False)
        while True:
            async with self._sem:
                rid = await self.budget.reserve(worst)
                if rid is None:
                    last = f" (last error: {rec.error})" if rec.error else ""
                    rec.error, rec.error_detail = "budget_exhausted", f"needs ${worst:.6f}{last}"
                    break
                rec.attempts += 1
                charge = worst  # if the attempt is cancelled midway, assume it was billed
                t0 = time.monotonic()
                try:
                    att = await self._attempt(body, worst, allowed)
                    charge = att.cost
                finally:
                    rec.latency_s += time.monotonic() - t0
                    await self.budget.settle(rid, charge)
            rec.cost_usd += att.cost
            rec.cost_estimated |= att.estimated
            rec.prompt_tokens += att.prompt_tokens
            rec.completion_tokens += att.completion_tokens
            rec.error, rec.error_detail = att.error, att.detail and self._redact(att.detail)
            if att.error:
                rec.attempt_errors.append(att.error)
            if att.action is not None:
                rec.ok, rec.action = True, att.action
                break
            if not att.retryable or rec.attempts > self.retry.max_retries:
                break
            delay = self._backoff(rec.attempts, att.retry_after)
            log.info("teacher %s: %s on %s, retry %d in %.2fs", self.cfg.name, att.error,
                     state.state_id, rec.attempts, delay)
            await self._sleep(delay)
        rec.wall_s = time.monotonic() - start
        return rec

    def _backoff(self, attempts: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.retry.max_retry_after_s)
        delay = min(self.retry.backoff_max_s, self.retry.backoff_base_s * 2 ** (attempts - 1))
        return delay * random.uniform(0.5, 1.0)

    async def _attempt(self, body: bytes, worst: float, allowed: set[str]) -> _Attempt:
        try:
            resp = await self._http.post(
                "/chat/completions", content=body, headers={"Content-Type": "application/json"}
            )
        except (httpx.ConnectTimeout, httpx.PoolTimeout, httpx.ConnectError) as exc:
            # Nothing reached the server: nothing to pay.
            return _Attempt(0.0, True, "transport", type(exc).__name__)
        except httpx.TimeoutException as exc:
            # The server may have run (and billed) the request: charge the worst case.
            return _Attempt(worst, True, "timeout", type(exc).__name__, estimated=True)
        except httpx.TransportError as exc:
            return _Attempt(worst, True, "transport", f"{type(exc).__name__}: {exc}", estimated=True)
        code = resp.status_code
        if code == 429 or code >= 500:
            kind = "http_429" if code == 429 else "http_5xx"
            return _Attempt(0.0, True, kind, f"{code}: {resp.text[:200]}",
                            retry_after=retry_after_seconds(resp.headers.get("retry-after")))
        if code >= 400:
            return _Attempt(0.0, False, "http_4xx", f"{code}: {resp.text[:200]}")
        try:
            data = resp.json()
        except ValueError:
            return _Attempt(worst, False, "malformed_json", f"body is not JSON: {resp.text[:120]!r}",
                            estimated=True)
        att = self._priced(data, worst)
        try:
            att.action = parse_tool_call(data, allowed)
        except _Malformed as exc:
            att.error, att.detail = exc.kind, exc.detail
        return att

    def _priced(self, data: Any, worst: float) -> _Attempt:
        usage = data.get("usage") if isinstance(data, dict) else None
        pt = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        ct = usage.get("completion_tokens") if isinstance(usage, dict) else None
        if isinstance(pt, int) and isinstance(ct, int):
            return _Attempt(actual_cost(self.cfg, pt, ct), False, prompt_tokens=pt, completion_tokens=ct)
        return _Attempt(worst, False, estimated=True)
