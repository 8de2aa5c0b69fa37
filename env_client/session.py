"""One env session on one replica: reset, step, tools, state(t), close."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

from .errors import EnvClientError
from .mux import MuxConnection

__all__ = ["RemoteSession", "observation_from_reply"]


def observation_from_reply(reply: dict) -> dict:
    """Flatten an `observation` reply: OpenEnv's envelope lifts reward/done out of the observation."""
    data = reply.get("data") or {}
    if "observation" in data and isinstance(data["observation"], dict):
        obs = dict(data["observation"])
        if data.get("reward") is not None or "reward" not in obs:
            obs["reward"] = data.get("reward")
        obs["done"] = bool(data.get("done", obs.get("done", False)))
        if data.get("metadata"):
            obs["metadata"] = {**data["metadata"], **(obs.get("metadata") or {})}
    else:
        obs = dict(data)
    obs.setdefault("metadata", {})
    return obs


class RemoteSession:
    """One env session on one replica (sticky: all its requests go to that replica)."""

    def __init__(self, connection: MuxConnection, session_id: str | None = None):
        self.connection = connection
        self.session_id = session_id or uuid.uuid4().hex
        self._ids = itertools.count()
        self.closed = False

    def _next_id(self) -> str:
        return f"{self.session_id}:{next(self._ids)}"

    async def _call(self, type_: str, data: dict | None, timeout_s: float | None = None) -> dict:
        return await self.connection.request(
            self.session_id, type_, data, request_id=self._next_id(), timeout_s=timeout_s
        )

    async def reset(self, **kwargs: Any) -> dict:
        reply = await self._call("reset", kwargs, self.connection.config.reset_timeout_s)
        return observation_from_reply(reply)

    async def step(self, action: dict, timeout_s: float | None = None) -> dict:
        return observation_from_reply(await self._call("step", action, timeout_s))

    async def call_tool(self, tool_name: str, arguments: dict, timeout_s: float | None = None,
                        metadata: dict | None = None) -> dict:
        action = {"type": "call_tool", "tool_name": tool_name, "arguments": arguments}
        if metadata:
            action["metadata"] = metadata
        return await self.step(action, timeout_s)

    async def state(self, t: int | None = None) -> dict:
        reply = await self._call("state", {} if t is None else {"t": t})
        return reply.get("data") or {}

    async def close(self) -> None:
        """Close on the server; best effort (a dead replica has nothing left to close)."""
        if self.closed:
            return
        self.closed = True
        try:
            await self._call("close", {}, timeout_s=30.0)
        except EnvClientError:
            pass
