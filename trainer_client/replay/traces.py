"""Reading frozen traces: exported state(t) JSONL files, or the env server's episode endpoints.

The env server's `GET /episodes/{id}/trace` streams its compact episode log (a `reset`
record, then one `step` record per action); the state(t) records themselves come from
`GET /episodes/{id}/state/{t}`, so the server stays the one place that rebuilds what the
student saw. A trace body that already holds state(t) records is accepted as is.

The HTTP work is the client library's (`env_client.AsyncHttpClient`: the token in the header
only, typed errors); an unknown episode or step is a `TraceReadError` here, a refused token
`EnvAuthError`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from env_client import AsyncHttpClient, EnvAuthError, EnvServerError

from .models import FrozenState


class TraceReadError(ValueError):
    """A trace could not be read as state(t) records: a file line or a server response that is not
    one, or an error answer of the server (an unknown episode or step: its error code is in the
    message). A refused token is `EnvAuthError` instead."""


_RAW_HINT = ("a raw env-server episode log (kind=reset/step), not state(t) records: "
             "replay it from the server with --env-url URL --episode ID")


def parse_jsonl(text: str, source: str) -> Iterator[FrozenState]:
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceReadError(f"{source}:{lineno}: not JSON: {exc}") from exc
        if isinstance(obj, dict) and obj.get("kind") in ("reset", "step") and "messages" not in obj:
            raise TraceReadError(f"{source}:{lineno}: {_RAW_HINT}")
        try:
            yield FrozenState.model_validate(obj)
        except Exception as exc:
            raise TraceReadError(f"{source}:{lineno}: not a state(t) record: {exc}") from exc


def read_trace_files(paths: Iterable[str | Path]) -> list[FrozenState]:
    """Every state(t) record of the given JSONL files (one or many episodes per file)."""
    states: list[FrozenState] = []
    for path in paths:
        states.extend(parse_jsonl(Path(path).read_text(encoding="utf-8"), str(path)))
    return states


class EnvHttp:
    """The env servers' HTTP APIs under one token: one `AsyncHttpClient` per base URL (`async with`
    closes them)."""

    def __init__(self, token: str | None = None, timeout: float = 60.0):
        self._token = token
        self._timeout = timeout
        self._clients: dict[str, AsyncHttpClient] = {}

    def at(self, base_url: str) -> AsyncHttpClient:
        if base_url not in self._clients:
            self._clients[base_url] = AsyncHttpClient(base_url, token=self._token, timeout_s=self._timeout)
        return self._clients[base_url]

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        await asyncio.gather(*(c.aclose() for c in clients))

    async def __aenter__(self) -> "EnvHttp":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def env_client(token: str | None = None, timeout: float = 60.0) -> EnvHttp:
    """HTTP access to env servers, sending `Authorization: Bearer <token>` when given."""
    return EnvHttp(token, timeout)


def _http(client: EnvHttp | AsyncHttpClient, base_url: str) -> AsyncHttpClient:
    return client if isinstance(client, AsyncHttpClient) else client.at(base_url)


async def fetch_state(client: EnvHttp | AsyncHttpClient, base_url: str, episode_id: str, t: int) -> FrozenState:
    """`GET {base}/episodes/{episode_id}/state/{t}`: one record as JSON."""
    http = _http(client, base_url)
    url = f"{http.url}/episodes/{episode_id}/state/{t}"
    try:
        record = await http.state_json(episode_id, t)
    except EnvAuthError:
        raise
    except EnvServerError as exc:
        raise TraceReadError(f"{url}: {exc}") from exc
    try:
        return FrozenState.model_validate(record)
    except Exception as exc:
        raise TraceReadError(f"{url}: not a state(t) record: {exc}") from exc


async def fetch_trace(client: EnvHttp | AsyncHttpClient, base_url: str, episode_id: str,
                      max_parallel: int = 8) -> list[FrozenState]:
    """state(t) for every step of an episode that has a student action (t = 0 .. steps-1)."""
    http = _http(client, base_url)
    url = f"{http.url}/episodes/{episode_id}/trace"
    try:
        lines = await http.trace_records(episode_id)
    except EnvAuthError:
        raise
    except EnvServerError as exc:
        raise TraceReadError(f"{url}: {exc}") from exc
    if lines and "messages" in lines[0]:
        return list(parse_jsonl("\n".join(json.dumps(line) for line in lines), url))
    if not lines or lines[0].get("kind") != "reset":
        raise TraceReadError(f"{url}: trace does not start with a reset record")
    n_steps = sum(1 for rec in lines[1:] if rec.get("kind") == "step")
    sem = asyncio.Semaphore(max_parallel)

    async def one(t: int) -> FrozenState:
        async with sem:
            return await fetch_state(http, base_url, episode_id, t)

    return list(await asyncio.gather(*(one(t) for t in range(n_steps))))
