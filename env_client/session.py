"""One env session: reset, step, tools, state(t), close; policy turns and the episode recording.

`SessionBase` is what every session does whatever its transport; `RemoteSession` runs it over
a shared `/mux` connection (`MuxConnection`), `WsSession` (env_client/ws.py) over its own
OpenEnv `/ws` socket.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from typing import Any

from pydantic import BaseModel

from .config import ClientConfig
from .errors import EnvClientError, EnvGraderBusyError
from .export import EpisodeRecorder, PolicyTurn, RolloutRecord
from .mux import MuxConnection

__all__ = ["RemoteSession", "SessionBase", "observation_from_reply"]


def observation_from_reply(reply: dict) -> dict:
    """Flatten an `observation` reply: OpenEnv's envelope lifts reward/done out of the observation."""
    data = reply.get("data") or {}
    inner = data.get("observation")
    if isinstance(inner, dict):
        obs = dict(inner)
        if data.get("reward") is not None or "reward" not in obs:
            obs["reward"] = data.get("reward")
        obs["done"] = bool(data.get("done", obs.get("done", False)))
        top, own = data.get("metadata"), obs.get("metadata")
        if top and top is not own:  # the server repeats the same metadata at both levels
            obs["metadata"] = {**top, **own} if own and not top.keys() <= own.keys() else (own or top)
    else:
        obs = dict(data)
    obs.setdefault("metadata", {})
    return obs


class SessionBase:
    """Transport-independent session logic; subclasses implement `_request` and `close`.

    Policy turns: `begin_turn(...)` declares the assistant message the next tool calls come
    from (its text, tool calls, token ids, log-probs). Its first call carries the message in
    `metadata.assistant` (so the server's state(t) shows it), later calls `metadata.turn`, until
    the next `begin_turn`. Without `begin_turn` each call is its own assistant message. A call
    whose metadata already has `turn` or `origin` is the caller's own bookkeeping, sent as is.
    """

    #: where the session lives (a MuxConnection, a WsReplica): the pool counts sessions per connection
    connection: Any

    def __init__(self, config: ClientConfig, session_id: str | None = None):
        self.config = config
        self.session_id = session_id or uuid.uuid4().hex
        self.closed = False
        #: this episode's recording (None before reset, or with `record_episodes=False`)
        self.recording: EpisodeRecorder | None = None
        self._episode_id: str | None = None
        self._turn = 0
        self._pending: PolicyTurn | None = None

    async def _request(self, type_: str, data: dict | None, timeout_s: float | None = None) -> dict:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    @property
    def episode_id(self) -> str | None:
        """The current episode's id (from reset's observation)."""
        return self._episode_id

    async def reset(self, **kwargs: Any) -> dict:
        """Start an episode: `instance_id`, `index`, `seed`, `episode_id`, `context` (a dict or a
        ContextSpec); returns the first observation (`issue`, `tools`, `metadata`)."""
        params = {k: (v.model_dump(mode="json") if isinstance(v, BaseModel) else v) for k, v in kwargs.items()}
        obs = observation_from_reply(await self._request("reset", params, self.config.reset_timeout_s))
        self._turn, self._pending = 0, None
        self._episode_id = (obs.get("metadata") or {}).get("episode_id")
        self.recording = EpisodeRecorder(params, obs) if self.config.record_episodes else None
        return obs

    async def step(self, action: dict, timeout_s: float | None = None) -> dict:
        """Send one action (`{"type": "call_tool", ...}` or `{"type": "list_tools"}`); the observation."""
        logprobs = None
        if action.get("type") == "call_tool":
            action, logprobs = self._with_turn(action)
        obs = observation_from_reply(await self._step_when_graded(action, timeout_s))
        obs.pop("result", None)  # /ws's MCP view of the same step
        if self.recording is not None:
            self.recording.add_step(action, obs, logprobs)
        return obs

    async def _step_when_graded(self, action: dict, timeout_s: float | None) -> dict:
        """The step's reply; a GRADER_BUSY refusal (a full grading queue: nothing was done) is sent
        again after the server's retry_after_s, up to `grader_busy_wait_s`."""
        deadline = time.monotonic() + self.config.grader_busy_wait_s
        while True:
            try:
                return await self._request("step", action, timeout_s)
            except EnvGraderBusyError as exc:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                await asyncio.sleep(min(exc.retry_after_s, left))

    async def call_tool(self, tool_name: str, arguments: dict, timeout_s: float | None = None,
                        metadata: dict | None = None, *, turn: PolicyTurn | None = None) -> dict:
        """Call one tool; `turn` starts a new assistant turn first (as `begin_turn(turn)`)."""
        if turn is not None:
            self.begin_turn(turn)
        action: dict[str, Any] = {"type": "call_tool", "tool_name": tool_name, "arguments": arguments}
        if metadata:
            action["metadata"] = metadata
        return await self.step(action, timeout_s)

    def begin_turn(self, turn: PolicyTurn | None = None, **fields: Any) -> PolicyTurn:
        """Declare the assistant message the next tool calls come from: a PolicyTurn, or its
        fields (`content`, `tool_calls`, `token_ids`, `logprobs`)."""
        self._pending = turn if turn is not None else PolicyTurn(**fields)
        return self._pending

    def _with_turn(self, action: dict) -> tuple[dict, list[float] | None]:
        meta = action.get("metadata") or {}
        if "turn" in meta or "origin" in meta:
            return action, None
        if self._pending is not None:
            turn, self._pending = self._pending, None
            self._turn += 1
            assistant = turn.assistant(action.get("tool_name", ""), action.get("arguments") or {})
            return {**action, "metadata": {**meta, "turn": self._turn, "assistant": assistant}}, turn.logprobs
        if self._turn:
            return {**action, "metadata": {**meta, "turn": self._turn}}, None
        return action, None

    async def state(self, t: int | None = None) -> dict:
        """`state()`: `{episode_id, step_count, instance_id, done, reward}`; `state(t)`: the state(t)
        record after t steps (messages, tools, observation, diff, next_action, turn_token_ids)."""
        reply = await self._request("state", {} if t is None else {"t": t})
        return reply.get("data") or {}

    def export(self) -> RolloutRecord:
        """This episode as a training record, from the client's own recording (no server needed)."""
        if self.recording is None:
            raise EnvClientError("nothing recorded: reset first (and keep ClientConfig.record_episodes on)")
        return self.recording.record()


class RemoteSession(SessionBase):
    """One env session on one replica over its `/mux` connection (sticky: all requests go there)."""

    def __init__(self, connection: MuxConnection, session_id: str | None = None):
        super().__init__(connection.config, session_id)
        self.connection = connection
        self._ids = itertools.count()

    def _next_id(self) -> str:
        return f"{self.session_id}:{next(self._ids)}"

    async def _request(self, type_: str, data: dict | None, timeout_s: float | None = None) -> dict:
        return await self.connection.request(self.session_id, type_, data, request_id=self._next_id(),
                                             timeout_s=timeout_s)

    async def close(self) -> None:
        """Close on the server; best effort (a dead replica has nothing left to close)."""
        if self.closed:
            return
        self.closed = True
        try:
            await self._request("close", {}, timeout_s=30.0)
        except EnvClientError:
            pass
