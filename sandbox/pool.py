"""A warm pool of pre-started sandboxes: opening a session claims a jail that is already up.

Starting a jail costs a launch and the runtime's handshake (bwrap ~80-100 ms, a docker
container ~0.5 s). :class:`WarmPool` starts them ahead of time, in background tasks, so that
:meth:`WarmPool.open` takes one that is ready; a caller that knows what comes next (a server's
queue of tasks) primes those keys with :meth:`WarmPool.prime`. It is an optional layer above
:func:`sandbox.open_sandbox`, which it calls for every start, cold or warm.

Keys: a jail depends on its task (the workspace, the image, the environment) and on the
sandbox configuration, so pooled jails are kept per (``WorkspaceSpec``, ``SandboxConfig``),
keyed on their JSON dumps; a jail is only ever handed to a claim of exactly its key.

Guarantees:

* a claimed jail is exactly what ``open_sandbox`` returns (same class; ``close()`` kills it) and
  as fresh: nothing ran in it but the runtime's start. Jails are never recycled: closing a
  claimed sandbox kills it, the pool starts a new one, so nothing of one episode can reach
  another by construction;
* no jail is handed out twice: a claim pops it under the event loop, with no ``await`` between
  looking and taking;
* a jail that died while idle (``alive`` is false) is discarded, never handed out; one idle for
  longer than ``max_idle_s`` is killed and replaced (while its key is in use);
* bounded: at most ``size`` jails are idle or starting, over all keys; a key that needs room
  evicts the idle jails of the least recently used other keys;
* a background start that fails is counted (``start_failures``) and logged, never raised into a
  claim: the claim then starts cold, and a cold start that fails raises as ``open_sandbox`` does.
  The key's refills then pause (10 s, doubling up to 5 min) so a broken task does not start
  jails in a loop;
* :meth:`WarmPool.close` kills every idle jail and waits for the starts in flight (those still
  running after ``close_grace_s`` are cancelled, which kills what they started): nothing is left.

A pool serves one event loop (its jails' pipes belong to it); create it anywhere, use it from
that loop only. Costs and figures: docs/sandbox.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections import deque
from dataclasses import dataclass, field

from .base import Sandbox
from .models import SandboxConfig, WorkspaceSpec

_log = logging.getLogger(__name__)

DEFAULT_PER_KEY = 8  # per_key when not given: min(size, this)
DEFAULT_MAX_IDLE_S = 600.0  # an idle jail older than this is replaced
DEFAULT_CLOSE_GRACE_S = 10.0  # close() waits this long for starts in flight before cancelling them
RETRY_AFTER_FAILURE_S = 10.0  # a key's refills pause this long after a failed background start ...
MAX_RETRY_AFTER_FAILURE_S = 300.0  # ... doubling on each further failure, up to this
SWEEP_PERIOD_S = 30.0  # the janitor's period (at most; max_idle_s / 4 when shorter)

_COUNTERS = ("claims_warm", "claims_cold", "start_failures", "evicted", "expired", "discarded_dead")


def pool_key(spec: WorkspaceSpec, config: SandboxConfig) -> str:
    """The pool key of a (workspace, configuration) pair: a digest of their JSON dumps."""
    material = json.dumps([config.model_dump(mode="json"), spec.model_dump(mode="json")], sort_keys=True)
    return hashlib.sha256(material.encode()).hexdigest()[:32]


async def _open(spec: WorkspaceSpec, config: SandboxConfig) -> Sandbox:
    from . import open_sandbox  # the package's own entry point (imported late: it imports this module)

    return await open_sandbox(spec, config)


@dataclass(eq=False)
class _Key:
    key: str
    spec: WorkspaceSpec
    config: SandboxConfig
    target: int  # jails to keep warm
    idle: deque[tuple[Sandbox, float]] = field(default_factory=deque)  # (jail, ready at), oldest first
    starting: int = 0
    tasks: set[asyncio.Task[None]] = field(default_factory=set)  # its starts in flight
    last_used: float = 0.0  # monotonic time of the last open or prime
    retry_at: float = 0.0  # refills pause until then (after a failed background start)
    backoff: float = 0.0

    @property
    def label(self) -> str:  # for logs: never the environment (it may hold tokens)
        spec = self.spec
        where = f"{spec.image}:{spec.image_workdir}" if spec.image_resident else str(spec.repo_path)
        commit = f"@{spec.base_commit[:12]}" if spec.base_commit else ""
        return f"{self.config.backend}:{where}{commit} [{self.key[:8]}]"


class WarmPool:
    """Pre-started sandboxes, per (workspace, configuration) key.

    ``size``: at most this many jails idle or starting, over all keys (0: no pool, every open is
    cold). ``per_key``: how many to keep warm for one key (default ``min(size, 8)``; :meth:`prime`
    sets it per key). ``max_idle_s``: an idle jail older than this is killed and replaced.
    """

    def __init__(self, size: int, per_key: int | None = None, *, max_idle_s: float = DEFAULT_MAX_IDLE_S,
                 close_grace_s: float = DEFAULT_CLOSE_GRACE_S) -> None:
        if size < 0:
            raise ValueError(f"size must be >= 0, not {size}")
        if per_key is not None and per_key < 0:
            raise ValueError(f"per_key must be >= 0, not {per_key}")
        if not max_idle_s > 0:
            raise ValueError(f"max_idle_s must be > 0, not {max_idle_s}")
        self.size = size
        self.per_key = min(size, DEFAULT_PER_KEY if per_key is None else per_key)
        self.max_idle_s = float(max_idle_s)
        self.close_grace_s = float(close_grace_s)
        self._keys: dict[str, _Key] = {}
        self._starts: set[asyncio.Task[None]] = set()
        self._disposals: set[asyncio.Task[None]] = set()
        self._counts = dict.fromkeys(_COUNTERS, 0)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._janitor: asyncio.Task[None] | None = None
        self._closed = False

    # -- the API ----------------------------------------------------------------------
    async def open(self, spec: WorkspaceSpec, config: SandboxConfig | None = None) -> Sandbox:
        """A session for ``spec``: a warm jail of its key if one is ready, else one started now (raising
        as :func:`sandbox.open_sandbox` does). Either way the key is refilled in the background."""
        config = config or SandboxConfig()
        if self._closed or self.size == 0:
            self._counts["claims_cold"] += 1
            return await _open(spec, config)
        k = self._entry(spec, config, None)
        box = self._take(k)  # no await between looking and taking: never handed out twice
        self._refill(k, evict=True)
        if box is not None:
            self._counts["claims_warm"] += 1
            return box
        self._counts["claims_cold"] += 1
        box = await _open(spec, config)
        if k.retry_at:  # the key starts again: its refills resume
            k.retry_at = k.backoff = 0.0
            self._refill(k, evict=True)
        return box

    def prime(self, spec: WorkspaceSpec, config: SandboxConfig | None = None, n: int | None = None) -> int:
        """Keep ``n`` jails warm for this key from now on (default ``per_key``, at most ``size``) and
        start what is missing in the background, evicting least recently used keys for room.
        Does not wait; returns how many starts it scheduled. Call it from the pool's event loop."""
        if self._closed or self.size == 0:
            return 0
        return self._refill(self._entry(spec, config or SandboxConfig(), n), evict=True)

    async def warm(self, spec: WorkspaceSpec, config: SandboxConfig | None = None, n: int | None = None) -> int:
        """:meth:`prime`, then wait for this key's starts in flight; returns how many of its jails are idle
        (fewer than ``n`` where starts failed: counted in ``start_failures``, never raised)."""
        config = config or SandboxConfig()
        self.prime(spec, config, n)
        k = self._keys.get(pool_key(spec, config))
        if k is None:
            return 0
        while k.tasks:
            await asyncio.gather(*list(k.tasks), return_exceptions=True)
        return len(k.idle)

    def stats(self) -> dict[str, int]:
        """Jails ``idle`` and ``starting`` now, ``keys`` holding any, and counters since creation:
        ``claims_warm``, ``claims_cold``, ``start_failures`` (background starts), ``evicted`` (for
        another key's room), ``expired`` (idle past ``max_idle_s``), ``discarded_dead`` (died idle)."""
        idle = sum(len(k.idle) for k in self._keys.values())
        starting = sum(k.starting for k in self._keys.values())
        held = sum(1 for k in self._keys.values() if k.idle or k.starting)
        return {"size": self.size, "per_key": self.per_key, "idle": idle, "starting": starting, "keys": held,
                **self._counts}

    async def close(self) -> None:
        """Kill every idle jail, stop refilling, and wait for the starts in flight (cancelled past
        ``close_grace_s``) and their jails' ends: nothing is left behind. Idempotent; an ``open``
        afterwards starts cold."""
        self._closed = True
        if self._janitor is not None:
            self._janitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._janitor
            self._janitor = None
        for k in self._keys.values():
            while k.idle:
                self._dispose(k.idle.popleft()[0])
        if self._starts:  # each kills the jail it gets, the pool being closed
            _, late = await asyncio.wait(set(self._starts), timeout=self.close_grace_s)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        while self._disposals:
            await asyncio.gather(*list(self._disposals), return_exceptions=True)
        self._keys.clear()

    async def __aenter__(self) -> "WarmPool":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- keys -------------------------------------------------------------------------
    def _entry(self, spec: WorkspaceSpec, config: SandboxConfig, n: int | None) -> _Key:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise RuntimeError("a WarmPool serves the one event loop it was first used on")
        if self._janitor is None:
            self._janitor = loop.create_task(self._sweeper(), name="warm-pool-janitor")
        key = pool_key(spec, config)
        k = self._keys.get(key)
        if k is None:
            # copies: the key must start what it was made for, whatever the caller does to its models later
            k = self._keys[key] = _Key(key, spec.model_copy(deep=True), config.model_copy(deep=True), self.per_key)
        if n is not None:
            k.target = max(0, min(n, self.size))
        k.last_used = time.monotonic()
        return k

    def _take(self, k: _Key) -> Sandbox | None:
        now = time.monotonic()
        while k.idle:
            box, ready_at = k.idle.popleft()
            if self._usable(box, ready_at, now):
                return box
        return None

    def _usable(self, box: Sandbox, ready_at: float, now: float) -> bool:
        """Whether an idle jail may still be handed out; one that may not is killed and counted."""
        if not box.alive:
            self._counts["discarded_dead"] += 1
        elif now - ready_at > self.max_idle_s:
            self._counts["expired"] += 1
        else:
            return True
        self._dispose(box)
        return False

    def _held(self) -> int:
        return sum(len(k.idle) + k.starting for k in self._keys.values())

    # -- refills ----------------------------------------------------------------------
    def _refill(self, k: _Key, evict: bool) -> int:
        """Schedule starts so that ``k`` reaches its target, within ``size``; returns how many."""
        if self._closed or self._keys.get(k.key) is not k or time.monotonic() < k.retry_at:
            return 0
        want = k.target - len(k.idle) - k.starting
        if want <= 0:
            return 0
        room = self.size - self._held()
        if room < want and evict:
            room += self._evict(want - room, keep=k)
        n = max(0, min(want, room))
        for _ in range(n):
            k.starting += 1
            counted = [True]  # whether k.starting still counts this start
            task = asyncio.get_running_loop().create_task(self._start(k, counted))
            k.tasks.add(task)
            self._starts.add(task)
            task.add_done_callback(k.tasks.discard)
            task.add_done_callback(self._starts.discard)
            task.add_done_callback(lambda _, k=k, counted=counted: self._uncount(k, counted))
        return n

    @staticmethod
    def _uncount(k: _Key, counted: list[bool]) -> None:
        """A start's end: it no longer counts as starting (one cancelled before it ran included)."""
        if counted[0]:
            counted[0] = False
            k.starting -= 1

    def _evict(self, need: int, keep: _Key) -> int:
        """Kill up to ``need`` idle jails of the least recently used keys but ``keep``; returns how many."""
        freed = 0
        for k in sorted((k for k in self._keys.values() if k is not keep and k.idle), key=lambda k: k.last_used):
            while k.idle and freed < need:
                self._dispose(k.idle.popleft()[0])
                self._counts["evicted"] += 1
                freed += 1
            if freed >= need:
                break
        return freed

    async def _start(self, k: _Key, counted: list[bool]) -> None:
        try:
            box = await _open(k.spec, k.config)
        except Exception as exc:  # noqa: BLE001 - counted and logged, never raised into a claim
            self._uncount(k, counted)
            self._counts["start_failures"] += 1
            k.backoff = min(max(2 * k.backoff, RETRY_AFTER_FAILURE_S), MAX_RETRY_AFTER_FAILURE_S)
            k.retry_at = time.monotonic() + k.backoff
            _log.warning("warm pool: a background start for %s failed (refills pause %.0f s): %s",
                         k.label, k.backoff, exc)
            return
        # (cancelled, by close(): open_sandbox left nothing behind; the done callback uncounts it)
        self._uncount(k, counted)  # in the same step as the append below: never counted twice
        k.backoff = 0.0
        if self._closed or self._keys.get(k.key) is not k:
            self._dispose(box)  # a task of its own: close() awaits it, never cancels it half-way
            return
        k.idle.append((box, time.monotonic()))

    def _dispose(self, box: Sandbox) -> None:
        task = asyncio.get_running_loop().create_task(self._kill(box))
        self._disposals.add(task)
        task.add_done_callback(self._disposals.discard)

    @staticmethod
    async def _kill(box: Sandbox) -> None:
        try:
            await box.close()
        except Exception as exc:  # noqa: BLE001 - one jail's close must not stop the others'
            _log.warning("warm pool: closing sandbox %s failed: %s", getattr(box, "id", "?"), exc)

    # -- the janitor ------------------------------------------------------------------
    async def _sweeper(self) -> None:
        period = min(SWEEP_PERIOD_S, self.max_idle_s / 4)
        while not self._closed:
            await asyncio.sleep(period)
            try:
                self._sweep()
            except Exception:  # noqa: BLE001 - the janitor must outlive a bad sweep
                _log.exception("warm pool: sweep failed")

    def _sweep(self) -> None:
        """Discard dead and expired idle jails; refill keys in use; forget keys long unused."""
        now = time.monotonic()
        for k in list(self._keys.values()):
            kept = [(box, ready_at) for box, ready_at in k.idle if self._usable(box, ready_at, now)]
            k.idle.clear()
            k.idle.extend(kept)
            if now - k.last_used <= self.max_idle_s:
                self._refill(k, evict=False)
            elif not k.idle and not k.starting:
                del self._keys[k.key]


__all__ = ["WarmPool", "pool_key"]
