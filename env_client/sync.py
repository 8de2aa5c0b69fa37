"""The blocking facade: a background event-loop thread owns a `ReplicaPool`; calls block on it.

    with EnvClient(["http://127.0.0.1:8000"]) as client:
        session = client.open(instance_id="demo__calc-1")
        obs = session.call_tool("bash", {"command": "ls"})
        final = session.call_tool("submit", {})
        print(final["reward"], session.state(t=1)["diff"])

Every session of one client shares the replicas' /mux sockets; any number of threads may
drive sessions at once (each session's own calls stay in order).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from pydantic import SecretStr

from .config import ClientConfig
from .pool import ReplicaPool
from .session import RemoteSession

__all__ = ["EnvClient", "SyncSession"]

T = TypeVar("T")


class EnvClient:
    """Sessions on env replicas from synchronous code (one loop thread, one /mux socket per replica)."""

    def __init__(self, urls: str | list[str] | tuple[str, ...], config: ClientConfig | None = None, *,
                 token: str | None = None, offset: int = 0):
        config = config or ClientConfig()
        if token is not None:
            config = config.model_copy(update={"token": SecretStr(token)})
        self.urls = (urls,) if isinstance(urls, str) else tuple(urls)
        self.config = config
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="env-client-loop", daemon=True)
        self._thread.start()
        self.pool = ReplicaPool(self.urls, config, offset=offset)

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

    def __init__(self, client: EnvClient, session: RemoteSession, observation: dict):
        self.client, self.remote, self.observation = client, session, observation

    @property
    def session_id(self) -> str:
        return self.remote.session_id

    @property
    def episode_id(self) -> str | None:
        return (self.observation.get("metadata") or {}).get("episode_id")

    def reset(self, **kwargs: Any) -> dict:
        self.observation = self.client.run(self.remote.reset(**kwargs))
        return self.observation

    def step(self, action: dict, timeout_s: float | None = None) -> dict:
        self.observation = self.client.run(self.remote.step(action, timeout_s))
        return self.observation

    def call_tool(self, tool_name: str, arguments: dict | None = None, timeout_s: float | None = None,
                  metadata: dict | None = None) -> dict:
        self.observation = self.client.run(self.remote.call_tool(tool_name, arguments or {}, timeout_s, metadata))
        return self.observation

    def state(self, t: int | None = None) -> dict:
        """`state()`: the episode's current state; `state(t)`: the state(t) record after t steps."""
        return self.client.run(self.remote.state(t))

    def close(self) -> None:
        self.client.run(self.client.pool.release(self.remote))

    def __enter__(self) -> "SyncSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
