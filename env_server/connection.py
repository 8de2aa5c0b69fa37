"""A WebSocket read loop that notices a disconnect even while a request runs.

Frames go to a queue; ``closed`` is set when the peer goes away, so a handler
can race a slow step against the disconnect and free the sandbox at once.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from contract import ErrorCode, MuxReply, WsReply, compact_json

from .errors import ProtocolError

_CLOSED = object()


class FrameReader:
    def __init__(self, ws: WebSocket, max_frame_bytes: int) -> None:
        self.ws = ws
        self.max_frame_bytes = max_frame_bytes
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.closed = asyncio.Event()
        self._task = asyncio.create_task(self._pump())
        self._send_lock = asyncio.Lock()

    async def _pump(self) -> None:
        try:
            while True:
                msg = await self.ws.receive()
                if msg["type"] == "websocket.disconnect":
                    break
                self.queue.put_nowait(msg.get("text") if msg.get("text") is not None else msg.get("bytes"))
        except (WebSocketDisconnect, RuntimeError, OSError):
            pass
        finally:
            self.closed.set()
            self.queue.put_nowait(_CLOSED)

    async def next(self) -> str | bytes | None:
        """The next raw frame, or None once the peer has gone."""
        item = await self.queue.get()
        return None if item is _CLOSED else item

    def decode(self, raw: str | bytes) -> dict[str, Any]:
        """Parse one frame into a JSON object, or raise ProtocolError."""
        if len(raw) > self.max_frame_bytes:
            raise ProtocolError(ErrorCode.FRAME_TOO_LARGE,
                                f"frame of {len(raw)} bytes exceeds the limit of {self.max_frame_bytes}")
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ProtocolError(ErrorCode.INVALID_JSON, f"Invalid JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise ProtocolError(ErrorCode.INVALID_JSON, "a frame must be a JSON object")
        return obj

    async def run_or_disconnect(self, coro: Any) -> tuple[bool, Any]:
        """Await ``coro`` unless the peer disconnects first (then cancel it): (finished, result)."""
        task = asyncio.ensure_future(coro)
        closed = asyncio.ensure_future(self.closed.wait())
        try:
            await asyncio.wait({task, closed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
        if task.done():
            return True, task.result()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return False, None

    async def send(self, reply: WsReply | MuxReply) -> bool:
        """Send one reply frame; False when the peer is gone."""
        if self.closed.is_set():
            return False
        frame = reply.model_dump()
        try:
            async with self._send_lock:
                try:
                    await self.ws.send_text(compact_json(frame))
                except UnicodeEncodeError:  # a lone surrogate (refused before sending): \u-escape it
                    await self.ws.send_text(json.dumps(frame, separators=(",", ":")))
            return True
        except (WebSocketDisconnect, RuntimeError, OSError):
            return False

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
