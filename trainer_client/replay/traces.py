"""Reading frozen traces: exported JSONL files, or the env server's trace endpoints."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

import httpx

from .models import StateRecord


class TraceError(ValueError):
    """A trace line or response is not a state(t) record."""


def parse_jsonl(text: str, source: str) -> Iterator[StateRecord]:
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield StateRecord.model_validate(json.loads(line))
        except Exception as exc:
            raise TraceError(f"{source}:{lineno}: not a state(t) record: {exc}") from exc


def read_trace_files(paths: Iterable[str | Path]) -> list[StateRecord]:
    """Every state(t) record of the given JSONL files (one or many episodes per file)."""
    states: list[StateRecord] = []
    for path in paths:
        states.extend(parse_jsonl(Path(path).read_text(encoding="utf-8"), str(path)))
    return states


async def fetch_trace(client: httpx.AsyncClient, base_url: str, episode_id: str) -> list[StateRecord]:
    """`GET {base}/episodes/{episode_id}/trace`: the episode's records as JSONL."""
    url = f"{base_url.rstrip('/')}/episodes/{episode_id}/trace"
    resp = await client.get(url)
    resp.raise_for_status()
    return list(parse_jsonl(resp.text, url))


async def fetch_state(client: httpx.AsyncClient, base_url: str, episode_id: str, t: int) -> StateRecord:
    """`GET {base}/episodes/{episode_id}/state/{t}`: one record as JSON."""
    url = f"{base_url.rstrip('/')}/episodes/{episode_id}/state/{t}"
    resp = await client.get(url)
    resp.raise_for_status()
    try:
        return StateRecord.model_validate(resp.json())
    except Exception as exc:
        raise TraceError(f"{url}: not a state(t) record: {exc}") from exc
