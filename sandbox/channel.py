"""Host side of the runtime protocol: JSON lines over a pair of byte streams.

Backend-neutral: bwrap hands it a subprocess's pipes, docker an attached exec
socket. One request is in flight at a time (the runtime is single-threaded);
every reply is treated as untrusted input.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
from typing import Any, Awaitable, Callable

from .models import CommandResult, CommandStatus, PathError, SandboxDied, SandboxError

MAX_LINE = 64 * 1024 * 1024


class RuntimeChannel:
    """Sends requests to the in-sandbox runtime and parses its replies."""

    def __init__(self, reader: asyncio.StreamReader, write: Callable[[bytes], Awaitable[None]]) -> None:
        self._reader = reader
        self._write = write
        self._lock = asyncio.Lock()
        self._ids = itertools.count(1)
        self.dead: str | None = None

    async def handshake(self, init: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send the init message; return the runtime's info or raise."""
        await self._write(json.dumps(init).encode() + b"\n")
        reply = await asyncio.wait_for(self._read_reply(), timeout_s)
        if not reply.get("ok"):
            err = reply.get("error") or {}
            raise SandboxError(f"{err.get('kind', 'setup_failed')}: {err.get('message', reply)}")
        return reply.get("info") or {}

    async def request(self, op: str, wait_s: float, **fields: Any) -> dict[str, Any]:
        """Send one request and wait for its reply; SandboxDied on EOF, garbage or timeout."""
        async with self._lock:
            if self.dead:
                raise SandboxDied(self.dead)
            req_id = next(self._ids)
            try:
                await self._write(json.dumps({"id": req_id, "op": op, **fields}).encode() + b"\n")
                async with asyncio.timeout(wait_s):  # no extra task per request, unlike wait_for
                    reply = await self._read_reply()
            except (asyncio.TimeoutError, OSError, ConnectionError, SandboxDied) as e:
                self.dead = f"runtime did not answer {op!r}: {type(e).__name__}: {e}"
                raise SandboxDied(self.dead) from None
            if reply.get("id") != req_id:
                self.dead = f"runtime answered out of order (sent {req_id}, got {reply.get('id')!r})"
                raise SandboxDied(self.dead)
            if reply.get("ok"):
                result = reply.get("result")
                return result if isinstance(result, dict) else {}
            err = reply.get("error") or {}
            kind, message = str(err.get("kind", "runtime_error")), str(err.get("message", ""))
            if kind == "bad_path":
                raise PathError(message, reason=str(err.get("reason", "bad_path")))
            if kind == "invalid_arguments":
                raise ValueError(message)
            raise SandboxError(f"{kind}: {message}")

    async def _read_reply(self) -> dict[str, Any]:
        try:
            line = await self._reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as e:
            raise SandboxDied(f"runtime exited (EOF after {len(e.partial)} bytes)") from None
        except asyncio.LimitOverrunError:
            raise SandboxDied("runtime sent an oversized line") from None
        try:
            reply = json.loads(line)
        except ValueError:
            raise SandboxDied("runtime sent malformed JSON") from None
        if not isinstance(reply, dict):
            raise SandboxDied("runtime sent a non-object reply")
        return reply

    # -- typed operations shared by the backends ----------------------------------
    async def run(self, command: str, timeout_s: float) -> CommandResult:
        try:
            r = await self.request("run", timeout_s + 15.0, command=command, timeout_s=timeout_s)
        except SandboxDied:
            return CommandResult(output="", status=CommandStatus.sandbox_died)
        try:
            return CommandResult(
                output=str(r.get("output", "")), exit_code=r.get("exit_code"),
                status=CommandStatus(r.get("status")), truncated=bool(r.get("truncated")),
                output_bytes=int(r.get("output_bytes", 0)), duration_s=float(r.get("duration_s", 0.0)),
                files_changed=r.get("files_changed") if isinstance(r.get("files_changed"), bool) else None)
        except (ValueError, TypeError) as e:
            self.dead = f"runtime sent a malformed result: {e}"
            return CommandResult(output="", status=CommandStatus.sandbox_died)

    async def read_file(self, path: str) -> bytes:
        r = await self.request("read", 60.0, path=path)
        return base64.b64decode(r.get("data", ""))

    async def write_file(self, path: str, data: bytes) -> None:
        await self.request("write", 60.0, path=path, data=base64.b64encode(data).decode("ascii"))

    async def diff(self, fresh: bool = False) -> str:
        r = await self.request("diff", 120.0, fresh=fresh)
        return str(r.get("diff", ""))
