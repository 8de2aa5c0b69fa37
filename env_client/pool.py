"""Sessions spread over env replicas: least-loaded placement, failover, capacity waits.

When every live replica answers CAPACITY_REACHED, `ReplicaPool.open_session` waits (retrying
with backoff, at most `capacity_wait_s`) instead of failing; one log line when the pool starts
waiting and one when the wait is over; `capacity_waits` / `capacity_wait_s` count the waiting
opens and their seconds. `ReplicaPool.capacity()` reads each replica's advertised
`max_sessions` (GET /metadata).

Transports: `"mux"` (default) shares one `/mux` socket per replica among its sessions;
`"ws"` gives each session its own OpenEnv `/ws` socket. Placement, failover and capacity
waits are the same. `http(replica)` is a replica's HTTP API; `locate(episode_id)` finds the
replica that holds an episode's trace.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import OrderedDict
from typing import Any, Literal

from .config import ClientConfig
from .errors import (EnvAuthError, EnvCapacityError, EnvClientError, EnvConnectionError, EnvNotFoundError,
                     NoLiveReplicaError)
from .http import AsyncHttpClient
from .mux import MuxConnection
from .session import RemoteSession, SessionBase
from .urls import http_base
from .ws import WsReplica, WsSession

Transport = Literal["mux", "ws"]
Replica = MuxConnection | WsReplica

__all__ = ["ReplicaPool"]

log = logging.getLogger(__name__)

_REMEMBERED = 100_000  # episode -> replica entries kept for `locate` (older ones are probed again)


class ReplicaPool:
    """Sessions spread over env replicas; a dead replica is taken out of rotation."""

    def __init__(self, urls: list[str] | tuple[str, ...], config: ClientConfig = ClientConfig(), offset: int = 0,
                 transport: Transport = "mux"):
        """`offset` starts the round robin at that replica: the trainer passes its process index,
        so the ranks of a multi-process run place their sessions on different replicas first."""
        if not urls:
            raise ValueError("ReplicaPool needs at least one env URL")
        if transport not in ("mux", "ws"):
            raise ValueError(f"transport must be 'mux' or 'ws', not {transport!r}")
        self.config = config
        self.transport = transport
        self.urls = tuple(urls)
        self.connections: list[Replica] = [MuxConnection(u, config) if transport == "mux" else WsReplica(u, config)
                                           for u in urls]
        self._sessions: dict[Replica, int] = {c: 0 for c in self.connections}
        self._http: dict[int, AsyncHttpClient] = {}
        self._episodes: OrderedDict[str, int] = OrderedDict()  # episode id -> replica index (the latest ones)
        self._rr = itertools.count(offset)
        self.opened: dict[str, int] = {c.url: 0 for c in self.connections}  # sessions opened per replica (cumulative)
        self.capacity_waits = 0  # opens that had to wait for a free slot (cumulative)
        self.capacity_wait_s = 0.0  # seconds they waited (cumulative)
        self._waiting = 0
        self._episode: tuple[float, int] | None = None  # (start, opens that waited in this episode)

    @property
    def live(self) -> list[Replica]:
        return [c for c in self.connections if not c.dead]

    def _candidates(self) -> list[Replica]:
        live = self.live
        if not live:
            raise NoLiveReplicaError("no live env replica: " + ", ".join(c.url for c in self.connections))
        start = next(self._rr)
        rotated = live[start % len(live):] + live[: start % len(live)]
        return sorted(rotated, key=lambda c: self._sessions[c])  # stable: least-loaded, then round robin

    async def open_session(self, **reset_kwargs: Any) -> tuple[SessionBase, dict]:
        """Create a session (reset) on the least-loaded live replica, falling over to the next
        one on a connection failure or a full replica. When every live replica is full, wait
        for a free slot (up to `capacity_wait_s`, then EnvCapacityError). Returns (session,
        first observation)."""
        start = time.monotonic()
        delay = self.config.capacity_poll_s
        waited = False
        try:
            while True:
                try:
                    return await self._open_once(reset_kwargs)
                except EnvCapacityError as exc:
                    elapsed = time.monotonic() - start
                    if elapsed + delay > self.config.capacity_wait_s:
                        if waited:
                            raise EnvCapacityError(exc.code, f"{exc.message} (every replica still full after "
                                                   f"waiting {elapsed:.0f} s; capacity_wait_s="
                                                   f"{self.config.capacity_wait_s:g})", exc.data) from exc
                        raise
                    if not waited:
                        waited = True
                        self._start_waiting()
                    await asyncio.sleep(delay)
                    delay = min(delay * 1.5, 5.0)
        finally:
            if waited:
                self._stop_waiting(time.monotonic() - start)

    async def _open_once(self, reset_kwargs: dict) -> tuple[SessionBase, dict]:
        last: EnvClientError | None = None
        for connection in self._candidates():
            session = RemoteSession(connection) if isinstance(connection, MuxConnection) else WsSession(connection)
            try:
                obs = await session.reset(**reset_kwargs)
            except (EnvConnectionError, EnvCapacityError) as exc:
                if isinstance(session, WsSession):
                    await session.close()
                last = exc
                continue
            except BaseException:
                if isinstance(session, WsSession):
                    await session.close()
                raise
            self._sessions[connection] += 1
            self.opened[connection.url] += 1
            episode_id = (obs.get("metadata") or {}).get("episode_id")
            if episode_id:
                self._remember(episode_id, self.connections.index(connection))
            return session, obs
        if isinstance(last, EnvCapacityError):
            raise last
        raise NoLiveReplicaError(f"no replica could open a session: {last!r}") from last

    def _start_waiting(self) -> None:
        self._waiting += 1
        if self._episode is None:
            self._episode = (time.monotonic(), 0)
            log.warning("every env replica is at its session limit: new rollouts wait for a free slot "
                        "(up to %g s each; %d replica(s): %s)", self.config.capacity_wait_s, len(self.live),
                        ", ".join(c.url for c in self.live))
        self._episode = (self._episode[0], self._episode[1] + 1)

    def _stop_waiting(self, seconds: float) -> None:
        self._waiting -= 1
        self.capacity_waits += 1
        self.capacity_wait_s += seconds
        if self._waiting == 0 and self._episode is not None:
            begun, n = self._episode
            self._episode = None
            log.warning("env capacity wait over after %.1f s (%d rollout(s) waited)", time.monotonic() - begun, n)

    async def capacity(self, timeout_s: float = 10.0) -> dict[str, int | None]:
        """Each live replica's advertised session limit (`max_sessions` of GET /metadata); None
        where a replica does not say (an older server, or the request failed)."""

        async def one(connection: Replica) -> int | None:
            try:
                async with AsyncHttpClient(connection.url, config=self.config, timeout_s=timeout_s,
                                           token=_token_of(connection)) as http:
                    value = (await http.metadata()).get("max_sessions")
                return int(value) if value is not None else None
            except (EnvClientError, ValueError, TypeError, AttributeError):
                return None

        live = self.live
        values = await asyncio.gather(*(one(c) for c in live))
        return {c.url: v for c, v in zip(live, values)}

    def http(self, replica: int | str = 0) -> AsyncHttpClient:
        """Replica `replica`'s HTTP API (an index into `urls`, or one of them); kept until `close`."""
        index = replica if isinstance(replica, int) else self._index(replica)
        if index not in self._http:
            connection = self.connections[index]
            self._http[index] = AsyncHttpClient(connection.url, config=self.config, token=_token_of(connection))
        return self._http[index]

    def _index(self, url: str) -> int:
        base = http_base(url.split("?", 1)[0])
        for i, connection in enumerate(self.connections):
            if http_base(connection.url) == base:
                return i
        raise ValueError(f"{url!r} is not a replica of this pool")

    def _remember(self, episode_id: str, index: int) -> None:
        self._episodes[episode_id] = index
        if len(self._episodes) > _REMEMBERED:
            self._episodes.popitem(last=False)

    async def locate(self, episode_id: str) -> AsyncHttpClient:
        """The HTTP API of the replica holding `episode_id`'s trace: where this pool opened it,
        else the first replica that knows it (EnvNotFoundError when none does)."""
        if episode_id in self._episodes:
            return self.http(self._episodes[episode_id])
        missing: EnvNotFoundError | None = None
        for i in range(len(self.connections)):
            try:
                await self.http(i).state(episode_id, 0)
            except EnvNotFoundError as exc:
                missing = exc
                continue
            except EnvConnectionError:
                continue
            self._remember(episode_id, i)
            return self.http(i)
        raise missing or EnvNotFoundError("EPISODE_NOT_FOUND", f"no replica has episode {episode_id!r}")

    async def connect(self) -> None:
        """Open every replica's socket now (fail fast before a run): EnvAuthError when a replica
        refuses the token; unreachable replicas are marked dead, NoLiveReplicaError when none is left."""
        results = await asyncio.gather(*(c.connect() for c in self.connections), return_exceptions=True)
        for result in results:
            if isinstance(result, EnvAuthError):
                raise result
        if not self.live:
            raise NoLiveReplicaError("no live env replica: " + ", ".join(c.url for c in self.connections))

    async def release(self, session: SessionBase) -> None:
        """Close a session and free its slot in the placement count."""
        if session.connection in self._sessions and not session.closed:
            self._sessions[session.connection] = max(0, self._sessions[session.connection] - 1)
        await session.close()

    async def close(self) -> None:
        """Close every replica's socket and HTTP client."""
        http, self._http = list(self._http.values()), {}
        await asyncio.gather(*(c.close() for c in self.connections), *(h.aclose() for h in http),
                             return_exceptions=True)


def _token_of(connection: Replica) -> Any:
    """The token a replica's sockets use (its URL's, else the config's), for its HTTP client."""
    value = connection._headers.get("Authorization", "")
    return value[len("Bearer "):] or None
