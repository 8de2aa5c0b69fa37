"""The blocking facade: a background event-loop thread owns a `ReplicaPool`; calls block on it.

    with EnvClient(["http://127.0.0.1:8000"]) as client:
        session = client.open(instance_id="six__demo-1")
        obs = session.call_tool("bash", {"command": "ls"})
        final = session.call_tool("submit", {})
        print(final["reward"], session.state(t=1)["diff"])

Every session of one client shares the replicas' /mux sockets (`transport="ws"`: one OpenEnv
/ws socket per session); any number of threads may drive sessions at once (each session's own
calls stay in order). The HTTP side (health, metadata, episodes, state(t), traces, export) has
blocking variants here too; episode calls go to the replica that holds the episode.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from pydantic import SecretStr

from contract import StateRecord  # public wire types only

from .config import ClientConfig
from .export import PolicyTurn, RolloutRecord
from .pool import ReplicaPool, Transport
from .session import SessionBase

__all__ = ["EnvClient", "SyncSession"]

T = TypeVar("T")


class EnvClient:
    """Sessions on env replicas from synchronous code: one loop thread; one /mux socket per replica
    (`transport="ws"`: one /ws socket per session); `token` overrides `config.token`."""

    def __init__(self, urls: str | list[str] | tuple[str, ...], config: ClientConfig | None = None, *,
                 token: str | None = None, offset: int = 0, transport: Transport = "mux"):
        config = config or ClientConfig()
        if token is not None:
            config = config.model_copy(update={"token": SecretStr(token)})
        self.urls = (urls,) if isinstance(urls, str) else tuple(urls)
        self.config = config
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="env-client-loop", daemon=True)
        self._thread.start()
        self.pool = ReplicaPool(self.urls, config, offset=offset, transport=transport)

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run a coroutine on the client's loop and block the calling thread for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Schedule a coroutine without waiting (a concurrent.futures.Future)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def connect(self) -> None:
        """Open every replica's socket now (fail fast: EnvAuthError, NoLiveReplicaError)."""
        self.run(self.pool.connect())

    def open(self, **reset_kwargs: Any) -> "SyncSession":
        """A new session (reset) on the least-loaded live replica; `reset_kwargs` are reset's data
        (instance_id, index, seed, episode_id, context, ...)."""
        session, obs = self.run(self.pool.open_session(**reset_kwargs))
        return SyncSession(self, session, obs)

    def capacity(self) -> dict[str, int | None]:
        """Each live replica's advertised `max_sessions`."""
        return self.run(self.pool.capacity())

    # ------------------------------------------------------------ HTTP
    def health(self, replica: int | str = 0) -> dict[str, Any]:
        """`GET /health` of one replica (an index into `urls`, or one of them)."""
        return self.run(self.pool.http(replica).health())

    def metadata(self, replica: int | str = 0) -> dict[str, Any]:
        """`GET /metadata` of one replica."""
        return self.run(self.pool.http(replica).metadata())

    def episodes(self, replica: int | str = 0, limit: int = 1000) -> list[str]:
        """Episode ids with a trace on one replica, most recent first."""
        return self.run(self.pool.http(replica).episodes(limit))

    def episode_state(self, episode_id: str, t: int) -> StateRecord:
        """state(t) of any episode, live or finished, from the replica that holds it."""
        async def go() -> StateRecord:
            return await (await self.pool.locate(episode_id)).state(episode_id, t)
        return self.run(go())

    def trace(self, episode_id: str) -> list[dict[str, Any]]:
        """An episode's raw trace: its reset record, then one record per step."""
        async def go() -> list[dict[str, Any]]:
            return await (await self.pool.locate(episode_id)).trace_records(episode_id)
        return self.run(go())

    def export_episode(self, episode_id: str) -> RolloutRecord:
        """A training record of any episode, rebuilt from the server's records (log-probs null)."""
        async def go() -> RolloutRecord:
            return await (await self.pool.locate(episode_id)).export(episode_id)
        return self.run(go())

    def close(self) -> None:
        """Close every socket and stop the loop thread (idempotent)."""
        if self.loop.is_closed():
            return
        try:
            self.run(self.pool.close(), timeout_s=10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(5)
            self.loop.close()

    def __enter__(self) -> "EnvClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SyncSession:
    """One session, blocking; `observation` is the latest observation (reset's first)."""

    def __init__(self, client: EnvClient, session: SessionBase, observation: dict):
        self.client, self.remote, self.observation = client, session, observation

    @property
    def session_id(self) -> str:
        return self.remote.session_id

    @property
    def episode_id(self) -> str | None:
        return self.remote.episode_id

    def reset(self, **kwargs: Any) -> dict:
        self.observation = self.client.run(self.remote.reset(**kwargs))
        return self.observation

    def step(self, action: dict, timeout_s: float | None = None) -> dict:
        self.observation = self.client.run(self.remote.step(action, timeout_s))
        return self.observation

    def call_tool(self, tool_name: str, arguments: dict | None = None, timeout_s: float | None = None,
                  metadata: dict | None = None, *, turn: PolicyTurn | None = None) -> dict:
        self.observation = self.client.run(self.remote.call_tool(tool_name, arguments or {}, timeout_s, metadata,
                                                                 turn=turn))
        return self.observation

    def begin_turn(self, turn: PolicyTurn | None = None, **fields: Any) -> PolicyTurn:
        """Declare the assistant message the next tool calls come from (see SessionBase.begin_turn)."""
        return self.remote.begin_turn(turn, **fields)

    def export(self) -> RolloutRecord:
        """This episode as a training record, from the client's own recording."""
        return self.remote.export()

    def state(self, t: int | None = None) -> dict:
        """`state()`: the episode's current state; `state(t)`: the state(t) record after t steps."""
        return self.client.run(self.remote.state(t))

    def close(self) -> None:
        self.client.run(self.client.pool.release(self.remote))

    def __enter__(self) -> "SyncSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
