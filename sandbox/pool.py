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
* **a claim never waits behind a refill** (a pool never makes a reset slower than a cold start):
  a claim that finds nothing warm starts cold at once, or takes a start of its key already
  running, whichever ends first (the other one is kept warm). Background starts yield to claims:
  they begin only when no cold claim is running and ``refill_delay_s`` after the last claim
  (the first commands of the episodes just claimed run first), at most ``refill_parallel`` at a
  time, and never hold anything a claim waits on;
* **the share follows demand**: a key used by claims is kept at the most claims it saw within
  ``BURST_WINDOW_S`` (a GRPO group's size: 8-16 at once; 1 for tasks reset in turn), at most
  ``per_key``; :meth:`WarmPool.typical_burst` says that size across keys, for priming the next
  task. A claim with ``refill=False`` does not refill its key (a server that primes the tasks
  ahead of its queue refills only those: a key claimed once per round of many tasks would be
  evicted before its next claim);
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
import os
import time
from collections import deque
from dataclasses import dataclass, field

from .base import Sandbox
from .models import SandboxConfig, WorkspaceSpec

_log = logging.getLogger(__name__)

DEFAULT_PER_KEY = 8  # per_key when not given: min(size, this)
DEFAULT_REFILL_DELAY_S = 0.25  # background starts wait this long after the last claim
MAX_REFILL_DEFER_S = 2.0  # ... but no longer than this while claims keep coming (else a busy pool never fills)
BURST_WINDOW_S = 2.0  # claims of one key this close together are one burst (a GRPO group)
DEFAULT_MAX_IDLE_S = 600.0  # an idle jail older than this is replaced
DEFAULT_CLOSE_GRACE_S = 10.0  # close() waits this long for starts in flight before cancelling them
RETRY_AFTER_FAILURE_S = 10.0  # a key's refills pause this long after a failed background start ...
MAX_RETRY_AFTER_FAILURE_S = 300.0  # ... doubling on each further failure, up to this
SWEEP_PERIOD_S = 30.0  # the janitor's period (at most; max_idle_s / 4 when shorter)

_COUNTERS = ("claims_warm", "claims_cold", "claims_raced", "start_failures", "evicted", "expired", "discarded_dead")


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
    kept_at: float = 0.0  # ... of the last prime or refilling claim (the janitor refills it for max_idle_s)
    retry_at: float = 0.0  # refills pause until then (after a failed background start)
    backoff: float = 0.0
    running: int = 0  # of ``starting``, those past the gate (an open_sandbox call under way)
    waiters: deque[asyncio.Future[Sandbox]] = field(default_factory=deque)  # cold claims that take a running start
    claims: deque[float] = field(default_factory=deque)  # monotonic times of its claims in the last burst window

    def burst(self, now: float) -> int:
        """Its claims within ``BURST_WINDOW_S`` up to ``now``."""
        while self.claims and now - self.claims[0] > BURST_WINDOW_S:
            self.claims.popleft()
        return len(self.claims)

    @property
    def label(self) -> str:  # for logs: never the environment (it may hold tokens)
        spec = self.spec
        where = f"{spec.image}:{spec.image_workdir}" if spec.image_resident else str(spec.repo_path)
        commit = f"@{spec.base_commit[:12]}" if spec.base_commit else ""
        return f"{self.config.backend_name}:{where}{commit} [{self.key[:8]}]"


class WarmPool:
    """Pre-started sandboxes, per (workspace, configuration) key.

    ``size``: at most this many jails idle or starting, over all keys (0: no pool, every open is
    cold). ``per_key``: the most one key keeps warm (default ``min(size, 8)``; what :meth:`prime`
    starts when given no ``n``); a key claimed in bursts is kept at its burst's size, up to this.
    ``max_idle_s``: an idle jail older than this is killed and replaced. ``refill_parallel``:
    background starts at once (default: a quarter of the CPUs, at least 1). ``refill_delay_s``:
    background starts wait this long after the last claim.
    """

    def __init__(self, size: int, per_key: int | None = None, *, max_idle_s: float = DEFAULT_MAX_IDLE_S,
                 close_grace_s: float = DEFAULT_CLOSE_GRACE_S, refill_parallel: int | None = None,
                 refill_delay_s: float = DEFAULT_REFILL_DELAY_S) -> None:
        if size < 0:
            raise ValueError(f"size must be >= 0, not {size}")
        if per_key is not None and per_key < 0:
            raise ValueError(f"per_key must be >= 0, not {per_key}")
        if not max_idle_s > 0:
            raise ValueError(f"max_idle_s must be > 0, not {max_idle_s}")
        if refill_parallel is not None and refill_parallel < 1:
            raise ValueError(f"refill_parallel must be >= 1, not {refill_parallel}")
        if refill_delay_s < 0:
            raise ValueError(f"refill_delay_s must be >= 0, not {refill_delay_s}")
        self.size = size
        self.per_key = min(size, DEFAULT_PER_KEY if per_key is None else per_key)
        self.max_idle_s = float(max_idle_s)
        self.close_grace_s = float(close_grace_s)
        self.refill_parallel = refill_parallel or max(1, (os.cpu_count() or 1) // 4)
        self.refill_delay_s = float(refill_delay_s)
        self._cold = 0  # cold claims running now: background starts wait for none
        self._last_claim = 0.0
        self._quiet: asyncio.Event | None = None  # set while no cold claim runs (made on the pool's loop)
        self._gate: asyncio.Semaphore | None = None  # refill_parallel background starts at a time
        self._typical = 0  # the largest burst of one key seen lately (typical_burst) ...
        self._typical_at = 0.0  # ... as of this claim
        self._keys: dict[str, _Key] = {}
        self._starts: set[asyncio.Task[None]] = set()
        self._disposals: set[asyncio.Task[None]] = set()
        self._counts = dict.fromkeys(_COUNTERS, 0)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._janitor: asyncio.Task[None] | None = None
        self._closed = False

    # -- the API ----------------------------------------------------------------------
    async def open(self, spec: WorkspaceSpec, config: SandboxConfig | None = None, *, refill: bool = True) -> Sandbox:
        """A session for ``spec``: a warm jail of its key if one is ready; else one started now, or a
        start of its key already running if that ends first (raising as :func:`sandbox.open_sandbox`
        does). With ``refill``, the key is then refilled in the background, behind the claims."""
        config = config or SandboxConfig()
        if self._closed or self.size == 0:
            self._counts["claims_cold"] += 1
            return await _open(spec, config)
        k = self._entry(spec, config, None)
        now = k.last_used
        self._last_claim = now
        k.claims.append(now)
        burst = k.burst(now)
        k.target = max(k.target, min(burst, self.per_key, self.size))
        self._typical = max(burst, self._typical if now - self._typical_at < 10 * BURST_WINDOW_S else 0)
        self._typical_at = now
        box = self._take(k)  # no await between looking and taking: never handed out twice
        if box is not None:
            self._counts["claims_warm"] += 1
            if refill:
                k.kept_at = now
                self._refill(k, evict=True)
            return box
        self._cold += 1
        self._quiet.clear()
        try:
            box = await self._cold_or_running(k, spec, config)
        finally:
            self._cold -= 1
            self._last_claim = time.monotonic()  # the delay counts from the hand-over: its first commands run first
            if not self._cold:
                self._quiet.set()
        if k.retry_at:  # the key starts again: its refills resume
            k.retry_at = k.backoff = 0.0
        if refill:
            k.kept_at = now
            self._refill(k, evict=True)
        return box

    async def _cold_or_running(self, k: _Key, spec: WorkspaceSpec, config: SandboxConfig) -> Sandbox:
        """A cold start, raced against the key's starts already running (whichever ends first serves the
        claim; a cold start that loses is kept warm)."""
        if not k.running:
            self._counts["claims_cold"] += 1
            return await _open(spec, config)
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Sandbox] = loop.create_future()
        k.waiters.append(waiter)
        cold = loop.create_task(_open(spec, config))
        try:
            await asyncio.wait({cold, waiter}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the claim gave up: what either start gives is kept warm
            self._drop_waiter(k, waiter)
            self._adopt(k, cold)
            raise
        if waiter.done():
            self._counts["claims_raced"] += 1
            self._adopt(k, cold)
            return waiter.result()
        self._drop_waiter(k, waiter)
        self._counts["claims_cold"] += 1
        return cold.result()

    def _drop_waiter(self, k: _Key, waiter: asyncio.Future[Sandbox]) -> None:
        """A claim no longer waits: a jail already handed to it goes back to the idle ones."""
        with contextlib.suppress(ValueError):
            k.waiters.remove(waiter)
        if waiter.done() and not waiter.cancelled():
            self._place(k, waiter.result())
        else:
            waiter.cancel()

    def _adopt(self, k: _Key, start: asyncio.Task[Sandbox]) -> None:
        """A cold start that lost its race: its jail joins the key's idle ones (counted as starting till then)."""
        k.starting += 1
        counted = [True]

        async def settle() -> None:
            try:
                box = await start
            except Exception as exc:  # noqa: BLE001 - it served no one: logged only
                _log.warning("warm pool: a cold start that lost its race failed for %s: %s", k.label, exc)
                return
            finally:
                self._uncount(k, counted)
            self._place(k, box)

        self._track(k, asyncio.get_running_loop().create_task(settle()), counted)

    def typical_burst(self) -> int:
        """The most claims one key got within ``BURST_WINDOW_S`` lately (within ten windows of the last
        claim), at least 1 and at most ``per_key``: how many to prime for the task that comes next."""
        if time.monotonic() - self._typical_at > 10 * BURST_WINDOW_S:
            self._typical = 0
        return max(1, min(self._typical, self.per_key))

    def prime(self, spec: WorkspaceSpec, config: SandboxConfig | None = None, n: int | None = None) -> int:
        """Keep ``n`` jails warm for this key from now on (default: its target so far, ``per_key`` for a
        new key; at most ``size``) and start what is missing in the background, evicting least
        recently used keys for room.
        Does not wait; returns how many starts it scheduled. Call it from the pool's event loop."""
        if self._closed or self.size == 0:
            return 0
        config = config or SandboxConfig()
        if n is None and pool_key(spec, config) not in self._keys:
            n = self.per_key  # a key met first here; a known key keeps its target
        k = self._entry(spec, config, n)
        k.kept_at = k.last_used
        return self._refill(k, evict=True)

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
            self._quiet, self._gate = asyncio.Event(), asyncio.Semaphore(self.refill_parallel)
            self._quiet.set()
        key = pool_key(spec, config)
        k = self._keys.get(key)
        if k is None:
            # copies: the key must start what it was made for, whatever the caller does to its models later
            # (target 0: a key first met by a claim is kept at its bursts' size, one primed at what prime says)
            k = self._keys[key] = _Key(key, spec.model_copy(deep=True), config.model_copy(deep=True), 0)
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
            self._track(k, asyncio.get_running_loop().create_task(self._start(k, counted)), counted)
        return n

    def _track(self, k: _Key, task: asyncio.Task[None], counted: list[bool]) -> None:
        """A start of ``k`` in flight: ``close()`` waits for it; it stops counting as starting when done."""
        k.tasks.add(task)
        self._starts.add(task)
        task.add_done_callback(k.tasks.discard)
        task.add_done_callback(self._starts.discard)
        task.add_done_callback(lambda _, k=k, counted=counted: self._uncount(k, counted))

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

    async def _turn(self) -> None:
        """Wait until a background start may begin: no cold claim running and ``refill_delay_s`` since the
        last claim (at most ``MAX_REFILL_DEFER_S`` of waiting for that), then a slot of the gate."""
        assert self._quiet is not None and self._gate is not None
        since = time.monotonic()
        while True:
            if time.monotonic() - since < MAX_REFILL_DEFER_S:
                await self._quiet.wait()
                left = self._last_claim + self.refill_delay_s - time.monotonic()
                if left > 0:
                    await asyncio.sleep(min(left, MAX_REFILL_DEFER_S))
                    continue
            await self._gate.acquire()  # (claims may have come while it waited here: looked at again)
            if time.monotonic() - since >= MAX_REFILL_DEFER_S or (
                    not self._cold and time.monotonic() >= self._last_claim + self.refill_delay_s):
                return
            self._gate.release()

    async def _start(self, k: _Key, counted: list[bool]) -> None:
        assert self._gate is not None
        await self._turn()
        k.running += 1
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
        finally:
            k.running -= 1
            self._gate.release()
        # (cancelled, by close(): open_sandbox left nothing behind; the done callback uncounts it)
        self._uncount(k, counted)  # in the same step as the placing below: never counted twice
        k.backoff = 0.0
        self._place(k, box)

    def _place(self, k: _Key, box: Sandbox) -> None:
        """A started jail: to a cold claim of its key waiting for it, else idle (killed if the pool closed)."""
        if self._closed or self._keys.get(k.key) is not k:
            self._dispose(box)  # a task of its own: close() awaits it, never cancels it half-way
            return
        while k.waiters:
            waiter = k.waiters.popleft()
            if not waiter.done():
                waiter.set_result(box)
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
            if now - k.kept_at <= self.max_idle_s:
                self._refill(k, evict=False)
            elif not k.idle and not k.starting:
                del self._keys[k.key]


__all__ = ["WarmPool", "pool_key"]
