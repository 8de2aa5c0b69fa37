"""Reading frozen traces: exported state(t) JSONL files, or the env server's episode endpoints.

The env server's `GET /episodes/{id}/trace` streams its compact episode log (a `reset`
record, then one `step` record per action); the state(t) records themselves come from
`GET /episodes/{id}/state/{t}`, so the server stays the one place that rebuilds what the
student saw. A trace body that already holds state(t) records is accepted as is.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Iterator
from pathlib import Path

import httpx

from env_client import EnvAuthError, auth_headers

from .models import StateRecord


class TraceError(ValueError):
    """A trace line or response is not a state(t) record."""


_RAW_HINT = ("a raw env-server episode log (kind=reset/step), not state(t) records: "
             "replay it from the server with --env-url URL --episode ID")


def parse_jsonl(text: str, source: str) -> Iterator[StateRecord]:
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{source}:{lineno}: not JSON: {exc}") from exc
        if isinstance(obj, dict) and obj.get("kind") in ("reset", "step") and "messages" not in obj:
            raise TraceError(f"{source}:{lineno}: {_RAW_HINT}")
        try:
            yield StateRecord.model_validate(obj)
        except Exception as exc:
            raise TraceError(f"{source}:{lineno}: not a state(t) record: {exc}") from exc


def read_trace_files(paths: Iterable[str | Path]) -> list[StateRecord]:
    """Every state(t) record of the given JSONL files (one or many episodes per file)."""
    states: list[StateRecord] = []
    for path in paths:
        states.extend(parse_jsonl(Path(path).read_text(encoding="utf-8"), str(path)))
    return states


def env_client(token: str | None = None, timeout: float = 60.0) -> httpx.AsyncClient:
    """An HTTP client for the env server, sending `Authorization: Bearer <token>` when given."""
    return httpx.AsyncClient(headers=auth_headers(token), timeout=timeout)


def _raise_for_status(resp: httpx.Response, base_url: str) -> None:
    """EnvAuthError for a refused token (401/403), httpx's error for any other failure."""
    if resp.status_code in (401, 403):
        raise EnvAuthError(base_url)
    resp.raise_for_status()


async def fetch_state(client: httpx.AsyncClient, base_url: str, episode_id: str, t: int) -> StateRecord:
    """`GET {base}/episodes/{episode_id}/state/{t}`: one record as JSON."""
    url = f"{base_url.rstrip('/')}/episodes/{episode_id}/state/{t}"
    resp = await client.get(url)
    _raise_for_status(resp, base_url)
    try:
        return StateRecord.model_validate(resp.json())
    except Exception as exc:
        raise TraceError(f"{url}: not a state(t) record: {exc}") from exc


async def fetch_trace(client: httpx.AsyncClient, base_url: str, episode_id: str,
                      max_parallel: int = 8) -> list[StateRecord]:
    """state(t) for every step of an episode that has a student action (t = 0 .. steps-1)."""
    url = f"{base_url.rstrip('/')}/episodes/{episode_id}/trace"
    resp = await client.get(url)
    _raise_for_status(resp, base_url)
    lines = []
    for line in resp.text.splitlines():
        if not line.strip():
            continue
        try:
            lines.append(json.loads(line))
        except json.JSONDecodeError:  # a torn last line of a live or crashed episode
            break
    if lines and "messages" in lines[0]:
        return list(parse_jsonl(resp.text, url))
    if not lines or lines[0].get("kind") != "reset":
        raise TraceError(f"{url}: trace does not start with a reset record")
    n_steps = sum(1 for rec in lines[1:] if rec.get("kind") == "step")
    sem = asyncio.Semaphore(max_parallel)

    async def one(t: int) -> StateRecord:
        async with sem:
            return await fetch_state(client, base_url, episode_id, t)

    return list(await asyncio.gather(*(one(t) for t in range(n_steps))))
