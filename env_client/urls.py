"""Replica addresses: one base URL per replica; its /mux, /ws and HTTP addresses follow from it.

Any of `http://h:p[/base]`, `https://...`, `ws://...`, `wss://...`, `h:p`, with or without a
trailing `/mux` or `/ws`, names the same replica. Queries (a `?token=` included) are dropped:
`config.split_token` moves a token out of the URL first, so it never ends up in an address.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

__all__ = ["http_base", "mux_url", "ws_url"]

_TO_WS = {"http": "ws", "https": "wss"}
_TO_HTTP = {"ws": "http", "wss": "https"}


def _split(url: str) -> tuple[str, str, str]:
    """(scheme as given, netloc, path without a trailing slash or /mux or /ws)."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    path = parts.path.rstrip("/")
    for suffix in ("/mux", "/ws"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
            break
    return parts.scheme, parts.netloc, path


def http_base(url: str) -> str:
    """`ws://h:p/base/mux` -> `http://h:p/base`: the replica's HTTP root."""
    scheme, netloc, path = _split(url)
    return urlunsplit((_TO_HTTP.get(scheme, scheme), netloc, path, "", ""))


def mux_url(url: str) -> str:
    """`http://h:p[/base]` or `ws://h:p[/base]` -> `ws://h:p[/base]/mux` (the query is dropped)."""
    scheme, netloc, path = _split(url)
    return urlunsplit((_TO_WS.get(scheme, scheme), netloc, path + "/mux", "", ""))


def ws_url(url: str) -> str:
    """`http://h:p[/base]` -> `ws://h:p[/base]/ws`: OpenEnv's one-session-per-socket endpoint."""
    scheme, netloc, path = _split(url)
    return urlunsplit((_TO_WS.get(scheme, scheme), netloc, path + "/ws", "", ""))
