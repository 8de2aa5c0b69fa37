"""Bearer-token auth: who a request comes from, and what it may see.

Without tokens the server is open: every caller is the same anonymous operator (as before
tokens existed). With tokens each one names an :class:`Identity`: a client, who sees and drives
only the episodes and sessions it created, or an operator, who sees all of them. The legacy
single token (``--auth-token`` / ``ENV_SERVER_TOKEN``) is an operator named ``operator``.

Tokens are kept only as SHA-256 digests (compared with :func:`hmac.compare_digest`); a configured
value ``sha256:<64 hex>`` is already a digest, so a tokens file need not hold the secrets. HTTP
requests must send ``Authorization: Bearer <token>``; ``?token=`` is accepted only on WebSocket
upgrades (browsers cannot set headers there). :class:`RedactSecrets` keeps token values out of
the server's logs (uvicorn's access log prints the query string).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from pydantic import SecretStr
from starlette.datastructures import Headers, QueryParams

from contract import ErrorCode

from .errors import ProtocolError

__all__ = ["ANONYMOUS", "LEGACY_OPERATOR", "Authenticator", "Identity", "RedactSecrets", "check_identities",
           "load_tokens_file", "redact", "redact_server_logs"]

#: the name of the legacy single token's identity (an operator)
LEGACY_OPERATOR = "operator"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_DIGEST = re.compile(r"^sha256:([0-9a-fA-F]{64})$")
_TOKEN_CHARS = re.compile(r"^[\x21-\x7e]+$")  # printable ASCII, no spaces: it travels in a header
WRONG_TOKEN = "missing or wrong bearer token"
QUERY_TOKEN_REFUSED = ("?token= is accepted only on WebSocket upgrades (/ws, /mux): "
                       "send 'Authorization: Bearer <token>' on HTTP requests")


@dataclass(frozen=True)
class Identity:
    """Who a request comes from: ``name`` owns what it creates; an operator sees everything.

    ``name`` is None only on a server without tokens (episodes then record no owner)."""

    name: str | None
    operator: bool = False

    def can_see(self, owner: str | None) -> bool:
        """May this identity read, fork or drive what ``owner`` created (None: no recorded owner)?"""
        return self.operator or (owner is not None and owner == self.name)


#: every caller of a server without tokens
ANONYMOUS = Identity(None, operator=True)


def _secret(value: str | SecretStr) -> str:
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def _digest(configured: str, allow_digest: bool = True) -> bytes:
    """The SHA-256 of a configured token; ``sha256:<hex>`` is taken as the digest itself."""
    found = _DIGEST.match(configured) if allow_digest else None
    return bytes.fromhex(found.group(1)) if found else hashlib.sha256(configured.encode("utf-8")).digest()


def _entries(auth_token: str | SecretStr | None, client_tokens: Mapping[str, str | SecretStr],
             operator_tokens: Mapping[str, str | SecretStr]) -> list[tuple[bytes, Identity]]:
    """(digest, identity) per configured token; ValueError (naming no token) when the set is inconsistent."""
    entries: list[tuple[bytes, Identity]] = []
    if auth_token is not None and _secret(auth_token):
        entries.append((_digest(_secret(auth_token), allow_digest=False), Identity(LEGACY_OPERATOR, operator=True)))
    for kind, table, operator in (("client", client_tokens, False), ("operator", operator_tokens, True)):
        for name, value in table.items():
            token = _secret(value)
            if not _NAME.match(name):
                raise ValueError(f"{kind} name {name!r}: use 1-64 letters, digits, '.', '_' or '-' "
                                 "(starting with a letter or digit)")
            if not token or not _TOKEN_CHARS.match(token):
                raise ValueError(f"the token of {kind} {name!r} is empty or has spaces or non-ASCII characters")
            entries.append((_digest(token), Identity(name, operator=operator)))
    seen: dict[str, Identity] = {}
    by_digest: dict[bytes, Identity] = {}
    for digest, identity in entries:
        assert identity.name is not None
        if identity.name in seen:
            what = " (the name of --auth-token / ENV_SERVER_TOKEN)" if identity.name == LEGACY_OPERATOR else ""
            raise ValueError(f"the name {identity.name!r} is given twice{what}: each client and operator needs "
                             "its own name")
        if digest in by_digest:
            raise ValueError(f"{by_digest[digest].name!r} and {identity.name!r} have the same token: "
                             "each client and operator needs its own")
        seen[identity.name] = by_digest[digest] = identity
    return entries


def check_identities(auth_token: str | SecretStr | None, client_tokens: Mapping[str, str | SecretStr],
                     operator_tokens: Mapping[str, str | SecretStr]) -> None:
    """ValueError (naming no token) when names are malformed or repeated, or two identities share a token."""
    _entries(auth_token, client_tokens, operator_tokens)


def load_tokens_file(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(clients, operators) from a JSON or YAML file ``{"clients": {name: token}, "operators": {name: token}}``.

    ValueError (naming no token) when the file cannot be read or has another shape."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the tokens file {str(path)!r}: {type(exc).__name__}") from None
    except yaml.YAMLError:
        raise ValueError(f"the tokens file {str(path)!r} is not valid JSON or YAML") from None
    shape = 'expected {"clients": {name: token, ...}, "operators": {name: token, ...}}'
    if data is None:
        data = {}
    if not isinstance(data, dict) or set(data) - {"clients", "operators"}:
        raise ValueError(f"the tokens file {str(path)!r}: {shape}")
    out: list[dict[str, str]] = []
    for key in ("clients", "operators"):
        table = data.get(key) or {}
        if not isinstance(table, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in table.items()):
            raise ValueError(f"the tokens file {str(path)!r}: {key!r} must map names to token strings; {shape}")
        out.append(dict(table))
    return out[0], out[1]


class Authenticator:
    """The configured identities, by token digest (no token is kept in clear)."""

    def __init__(self, auth_token: str | SecretStr | None = None,
                 client_tokens: Mapping[str, str | SecretStr] | None = None,
                 operator_tokens: Mapping[str, str | SecretStr] | None = None) -> None:
        self._table = _entries(auth_token, client_tokens or {}, operator_tokens or {})

    @classmethod
    def from_config(cls, config: Any) -> "Authenticator":
        return cls(config.auth_token, config.client_tokens, config.operator_tokens)

    @property
    def enabled(self) -> bool:
        return bool(self._table)

    def identify(self, token: str) -> Identity | None:
        """The identity holding ``token`` (a presented token is always hashed: a digest is no token)."""
        given = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        found: Identity | None = None
        for digest, identity in self._table:  # every entry compared: the time does not say which matched
            if hmac.compare_digest(digest, given):
                found = identity
        return found

    @staticmethod
    def _bearer(headers: Headers) -> str | None:
        auth = headers.get("authorization", "")
        return auth[7:].strip() if auth.lower().startswith("bearer ") else None

    def http(self, headers: Headers, query: QueryParams) -> Identity:
        """The caller of an HTTP route, or ProtocolError(UNAUTHORIZED): the header only, never ``?token=``."""
        if not self.enabled:
            return ANONYMOUS
        if "token" in query:
            raise ProtocolError(ErrorCode.UNAUTHORIZED, QUERY_TOKEN_REFUSED)
        token = self._bearer(headers)
        identity = self.identify(token) if token else None
        if identity is None:
            raise ProtocolError(ErrorCode.UNAUTHORIZED, WRONG_TOKEN)
        return identity

    def websocket(self, headers: Headers, query: QueryParams) -> Identity | None:
        """The caller of a WebSocket upgrade (the header, else ``?token=``), or None."""
        if not self.enabled:
            return ANONYMOUS
        token = self._bearer(headers) or query.get("token")
        return self.identify(token) if token else None


# ---------------------------------------------------------------- logs

# A token in a query string (its key possibly percent-encoded, as the query parser decodes it),
# an Authorization header's value (header logs, ASGI scope dumps at --log-level trace), a Bearer value.
_KEY = "".join(f"(?:{c}|%{ord(c):02x})" for c in "token")
_SECRETS = re.compile(
    rf"(?i)({_KEY}=)[^&\s'\"]+"
    r"|(authorization['\"]?\s*[:,=]\s*(?:b?['\"])?)[^'\"\r\n]+"
    r"|(bearer\s+)(?!token\b)[^\s'\",)]+")


def redact(text: str) -> str:
    """``text`` with token values replaced by ``<redacted>``."""
    return _SECRETS.sub(lambda m: next(g for g in m.groups() if g is not None) + "<redacted>", text)


class RedactSecrets(logging.Filter):
    """Rewrites a log record so that no token value reaches any handler.

    A record is formatted once and redacted whole (a header logged as ``"%s: %s"`` is only
    recognisable whole); uvicorn's access records keep their five arguments (its formatter reads
    them), each redacted: a query string is always within one of them."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "uvicorn.access" and isinstance(record.args, tuple):
            record.msg = redact(str(record.msg))
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        else:
            try:
                text = record.getMessage()
            except Exception:  # noqa: BLE001 - a malformed record: keep what can be shown
                text = f"{record.msg} {record.args!r}"
            record.msg, record.args = redact(text), ()
        if record.exc_info and not record.exc_text:  # a traceback's text could quote a URL
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


_REDACT = RedactSecrets()
#: uvicorn's loggers (its websockets protocol logs the request line to uvicorn.error at debug)
SERVER_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")


def redact_server_logs() -> None:
    """Put :class:`RedactSecrets` on the server's loggers and their handlers (idempotent): call
    after uvicorn configured logging (``uvicorn.Config`` does on creation)."""
    for name in SERVER_LOGGERS:
        logger = logging.getLogger(name)
        for target in (logger, *logger.handlers):
            if not any(isinstance(f, RedactSecrets) for f in target.filters):
                target.addFilter(_REDACT)
