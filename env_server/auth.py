"""Optional bearer-token auth for HTTP routes and WebSocket handshakes."""

from __future__ import annotations

import hmac

from starlette.datastructures import Headers, QueryParams


def token_ok(expected: str | None, headers: Headers, query: QueryParams) -> bool:
    """True when no token is configured, or the request carries it (header, or ``?token=`` for WS)."""
    if not expected:
        return True
    auth = headers.get("authorization", "")
    given = auth[7:].strip() if auth.lower().startswith("bearer ") else query.get("token", "")
    return hmac.compare_digest(given.encode(), expected.encode())
