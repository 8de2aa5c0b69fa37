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
import json.scanner
import time
import weakref
from typing import Any, Awaitable, Callable

from .models import (ArgumentError, CommandResult, CommandStatus, DiffTooLarge, DiffUnreadable, ExactDiff, PathError,
                     SandboxDied, SandboxError)

MAX_LINE = 64 * 1024 * 1024
_scan = json.scanner.make_scanner(json.JSONDecoder())  # one JSON value, no Python layers around it
WATCHDOG_PERIOD_S = 0.5
RUN_GRACE_S = 15.0  # a `run` reply may come this long after its command's own timeout before the runtime is dead


class _Watchdog:
    """Fails the replies of channels past their deadline, on one timer per event loop.

    A request's deadline is a backstop (the runtime enforces the command's own timeout),
    so half a second of slack costs nothing, while a timer per request (``asyncio.timeout``)
    costs a heap entry and a cancellation on every step.
    """

    _by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Watchdog] = weakref.WeakKeyDictionary()

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.waiting: weakref.WeakSet[RuntimeChannel] = weakref.WeakSet()
        self.armed = False

    @classmethod
    def watch(cls, channel: RuntimeChannel) -> None:
        loop = asyncio.get_running_loop()
        dog = cls._by_loop.get(loop)
        if dog is None:
            dog = cls._by_loop[loop] = cls(loop)
        dog.waiting.add(channel)
        if not dog.armed:
            dog.armed = True
            loop.call_later(WATCHDOG_PERIOD_S, dog.tick)

    def tick(self) -> None:
        now = time.monotonic()
        for channel in list(self.waiting):
            if channel._deadline is None:
                self.waiting.discard(channel)
            elif now >= channel._deadline:
                self.waiting.discard(channel)
                channel._expire()
        self.armed = bool(self.waiting) and not self.loop.is_closed()
        if self.armed:
            self.loop.call_later(WATCHDOG_PERIOD_S, self.tick)


class RuntimeChannel:
    """Sends requests to the in-sandbox runtime and parses its replies."""

    def __init__(self, reader: asyncio.StreamReader, write: Callable[[bytes], Awaitable[None]]) -> None:
        self._reader = reader
        self._write = write
        self._lock = asyncio.Lock()
        self._ids = itertools.count(1)
        self._deadline: float | None = None  # while a reply is awaited
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
            self._deadline = time.monotonic() + wait_s
            _Watchdog.watch(self)
            try:
                await self._write(json.dumps({"id": req_id, "op": op, **fields}).encode() + b"\n")
                reply = await self._read_reply()
            except (asyncio.TimeoutError, OSError, ConnectionError, SandboxDied) as e:
                self.dead = f"runtime did not answer {op!r}: {type(e).__name__}: {e}"
                raise SandboxDied(self.dead) from None
            finally:
                self._deadline = None
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
                raise ArgumentError(message)
            if kind == "diff_too_large":
                raise DiffTooLarge(message)
            if kind == "diff_failed":
                raise DiffUnreadable(" ".join(message.split())[:500] or "git failed")
            raise SandboxError(f"{kind}: {message}")

    def _expire(self) -> None:
        """The deadline passed: the pending read fails (the channel is then dead)."""
        self._reader.set_exception(asyncio.TimeoutError("no reply before the deadline"))

    async def _read_reply(self) -> dict[str, Any]:
        try:
            line = await self._reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as e:
            raise SandboxDied(f"runtime exited (EOF after {len(e.partial)} bytes)") from None
        except asyncio.LimitOverrunError:
            raise SandboxDied("runtime sent an oversized line") from None
        try:
            reply, _ = _scan(line.decode("utf-8"), 0)
        except (StopIteration, ValueError, RecursionError):
            raise SandboxDied(f"runtime sent malformed JSON: {line[:200]!r}") from None
        if not isinstance(reply, dict):
            raise SandboxDied("runtime sent a non-object reply")
        return reply

    # -- typed operations shared by the backends ----------------------------------
    async def run(self, command: str, timeout_s: float, output_limit: int | None = None) -> CommandResult:
        extra = {"output_limit": output_limit} if output_limit is not None else {}
        try:
            r = await self.request("run", timeout_s + RUN_GRACE_S, command=command, timeout_s=timeout_s, **extra)
        except SandboxDied:
            return CommandResult(output="", status=CommandStatus.sandbox_died)
        return self._command_result(r)

    async def run_isolated(self, command: str, timeout_s: float, output_limit: int) -> CommandResult:
        try:
            r = await self.request("isolated", timeout_s + 30.0, command=command, timeout_s=timeout_s,
                                   output_limit=output_limit)
        except SandboxDied:
            return CommandResult(output="", status=CommandStatus.sandbox_died)
        return self._command_result(r)

    def _command_result(self, r: dict[str, Any]) -> CommandResult:
        try:  # every field is coerced to its type here, so no second validation
            code = r.get("exit_code")
            if code is not None and type(code) is not int:
                raise TypeError(f"exit_code {code!r} is not an integer")
            changed = r.get("files_changed")
            return CommandResult.model_construct(
                output=str(r.get("output", "")), exit_code=code,
                status=CommandStatus(r.get("status")), truncated=bool(r.get("truncated")),
                output_bytes=int(r.get("output_bytes", 0)), duration_s=float(r.get("duration_s", 0.0)),
                files_changed=changed if isinstance(changed, bool) else None)
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

    async def diff_exact(self, patch_limit: int) -> ExactDiff:
        r = await self.request("diff", 120.0, exact=True, patch_limit=patch_limit)
        if "lossy" not in r:
            raise SandboxError("the runtime cannot tell whether its diff is exact")
        patch = r.get("patch")
        skipped = r.get("skipped")
        return ExactDiff(text=str(r.get("diff", "")), lossy=bool(r.get("lossy")),
                         patch=base64.b64decode(patch) if isinstance(patch, str) else None,
                         patch_error=str(r["patch_error"]) if r.get("patch_error") is not None else None,
                         skipped=[str(s)[:1000] for s in skipped[:200]] if isinstance(skipped, list) else [])

    async def apply_patch(self, patch: bytes) -> None:
        await self.request("apply", 120.0, patch=base64.b64encode(patch).decode("ascii"))
