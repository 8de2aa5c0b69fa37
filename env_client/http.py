"""The env server's HTTP routes: health, metadata, schema, episodes, state(t), traces, export.

`AsyncHttpClient(url)` talks to one replica (`EnvClient` has blocking variants that find an
episode's replica). The bearer token goes in the `Authorization` header only: a `?token=` on
the URL is moved there, and URLs, logs and exception texts never show it. Error bodies
(`{"error": {"code", "message"}}`) become the same typed errors as on the sockets
(`EnvAuthError`, `EnvNotFoundError`, ...); transport failures are `EnvConnectionError` /
`EnvTimeoutError`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import SecretStr

from contract import StateRecord  # public wire types only

from .config import ClientConfig, auth_headers, split_token
from .errors import EnvConnectionError, EnvTimeoutError, http_error
from .export import RolloutRecord, rollout_from_trace
from .urls import http_base

__all__ = ["AsyncHttpClient"]


class AsyncHttpClient:
    """One replica's HTTP API (httpx underneath; `async with` closes it)."""

    def __init__(self, url: str, *, token: str | SecretStr | None = None, config: ClientConfig | None = None,
                 timeout_s: float | None = None, http: Any = None):
        """`url`: the replica (`http://h:p`, or its ws:// / mux address); `token` (else the URL's
        `?token=`, else `config.token`); `http`: an `httpx.AsyncClient` to share (not closed here)."""
        import httpx

        config = config or ClientConfig()
        base, url_token = split_token(url)
        self.url = http_base(base)
        self._headers = auth_headers(url_token or token or config.token)
        timeout = httpx.Timeout(timeout_s or config.request_timeout_s, connect=config.connect_timeout_s)
        self._own = http is None
        self._http = http if http is not None else httpx.AsyncClient(timeout=timeout)

    async def __aenter__(self) -> "AsyncHttpClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._own:
            await self._http.aclose()

    @contextmanager
    def _transport(self, what: str) -> Iterator[None]:
        import httpx

        try:
            yield
        except httpx.TimeoutException as exc:
            raise EnvTimeoutError(f"{what} on {self.url} timed out") from exc
        except httpx.TransportError as exc:
            raise EnvConnectionError(f"cannot reach {self.url} ({what}): {type(exc).__name__}") from exc

    def _raise_for(self, resp: Any) -> None:
        if resp.status_code < 400:
            return
        try:
            body = resp.json()
        except ValueError:
            body = resp.text
        raise http_error(resp.status_code, body, self.url)

    async def _get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        with self._transport(f"GET {path}"):
            resp = await self._http.get(self.url + path, params=params, headers=self._headers)
        self._raise_for(resp)
        return resp.json()

    async def health(self) -> dict[str, Any]:
        """`GET /health`: `{"status": "healthy"}` (needs no token)."""
        return await self._get("/health")

    async def metadata(self) -> dict[str, Any]:
        """`GET /metadata`: name, version, task count, tools, extensions, `max_sessions`."""
        return await self._get("/metadata")

    async def schema(self) -> dict[str, Any]:
        """`GET /schema`: JSON schemas of `action`, `observation`, `state`, `state_record`."""
        return await self._get("/schema")

    async def episodes(self, limit: int = 1000) -> list[str]:
        """`GET /episodes`: ids of the replica's episodes with a trace, most recent first."""
        return list((await self._get("/episodes", {"limit": limit}))["episodes"])

    async def state(self, episode_id: str, t: int) -> StateRecord:
        """`GET /episodes/{id}/state/{t}`: what the agent had seen after t steps, live or finished."""
        return StateRecord.model_validate(await self.state_json(episode_id, t))

    async def state_json(self, episode_id: str, t: int) -> dict[str, Any]:
        """The same record as the server sent it (plain JSON, unvalidated, nothing added or dropped)."""
        return await self._get(f"/episodes/{episode_id}/state/{t}")

    async def trace(self, episode_id: str) -> AsyncIterator[dict[str, Any]]:
        """`GET /episodes/{id}/trace`, streamed: the reset record, then one record per step (a torn
        last line of a live or crashed episode ends the stream quietly)."""
        path = f"/episodes/{episode_id}/trace"
        with self._transport(f"GET {path}"):
            async with self._http.stream("GET", self.url + path, headers=self._headers) as resp:
                if resp.status_code >= 400:
                    await resp.aread()
                    self._raise_for(resp)
                async for line in resp.aiter_lines():
                    if not line.strip():
                        continue
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError:
                        return
                    yield record

    async def trace_records(self, episode_id: str) -> list[dict[str, Any]]:
        """The whole trace as a list (see `trace`)."""
        return [record async for record in self.trace(episode_id)]

    async def export(self, episode_id: str) -> RolloutRecord:
        """An episode this client did not record, as a training record: the trace (steps, markers)
        plus the server's state(t) for its last step (messages, tools, `turn_token_ids`)."""
        records = await self.trace_records(episode_id)
        n = sum(1 for r in records[1:] if r.get("kind") == "step")
        return rollout_from_trace(records, state=await self.state(episode_id, n))
