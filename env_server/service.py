"""Sessions and the operations every transport shares (reset, step, state, close).

Transports (``/ws``, ``/mux``, ``/mcp``) parse frames and format replies; the
rules live here: capacity, task choice, one request at a time per session,
idle reaping of detached sessions, and error codes as :class:`ProtocolError`.

Ownership: every session and episode records the :class:`Identity` name that created it; a
client (not an operator) gets a session, an episode's state, trace or fork it does not own
answered exactly as if it did not exist (``SESSION_NOT_FOUND``, ``EPISODE_NOT_FOUND``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
import uuid
from typing import Any, Iterator

from pydantic import TypeAdapter, ValidationError

from contract import (
    Action,
    ContextSpec,
    EpisodeState,
    ErrorCode,
    PROFILES,
    ResetParams,
    StateParams,
    SuspicionReason,
    SWEObservation,
    ToolProfile,
    UnknownProfile,
    get_profile,
)
from sandbox import WarmPool
from sandbox.models import ImageUnavailable, SandboxError, WorkspaceError
from verifier import GradeCache
from verifier.task import TaskInstance

from .auth import Identity
from .config import ServerConfig
from .episode import Episode
from .errors import ProtocolError
from .gradings import GradingQueue
from .metrics import Metrics
from .traces import ForkPoint, TraceError, TraceStore, fork_point, not_found, state_at

log = logging.getLogger(__name__)
CLOSE_BEHIND_WAIT_S = 5.0  # a replaced episode's jail waits at most this long for its successor's first step
_METRIC_TOOLS = frozenset({name for p in PROFILES.values() for name in p.names} | {"list_tools"})
_SUSPICION_REASONS = frozenset(r.value for r in SuspicionReason)
_ACTION = TypeAdapter(Action)


def _errors(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'data'}: {e['msg']}" for e in exc.errors())


class Session:
    """One client session: at most one live episode, one request at a time.

    ``attached`` sessions belong to a live connection and are never reaped;
    detached ones (HTTP MCP) are closed after the idle timeout. ``owner``: the
    identity name that created it (None on a server without tokens).
    """

    def __init__(self, session_id: str, attached: bool, owner: str | None = None) -> None:
        self.id = session_id
        self.attached = attached
        self.owner = owner
        self.episode: Episode | None = None
        self.lock = asyncio.Lock()
        self.last_active = time.monotonic()
        self.closed = False

    def touch(self) -> None:
        self.last_active = time.monotonic()


class EnvService:
    def __init__(self, config: ServerConfig, tasks: list[TaskInstance], metrics: Metrics | None = None) -> None:
        self.config = config
        self.tasks = tasks
        self.by_id = {t.instance_id: t for t in tasks}
        self.metrics = metrics or Metrics()
        self.store = TraceStore(config.data_dir, fsync=config.episode.trace_fsync)
        self.cache = GradeCache()
        self.sessions: dict[str, Session] = {}
        self._round_robin = itertools.count()
        self.pool = WarmPool(config.warm_pool, per_key=config.warm_per_task) if config.warm_pool else None
        self.gradings = GradingQueue(config.max_gradings, config.max_waiting_gradings)
        self.metrics.watch_gradings(self.gradings)
        if self.pool is not None:
            self.metrics.watch_pool(self.pool)
        self._ahead: dict[str, asyncio.Task] = {}  # instance id -> its preparation (prefetch_ahead)
        self._closing: set[asyncio.Task] = set()  # episodes a reset replaced, their sandboxes being closed
        self._behind: set[asyncio.Event] = set()  # ... after these (their replacements' first steps)

    # ---------------------------------------------------------------- sessions
    def open_session(self, session_id: str | None = None, attached: bool = True,
                     owner: str | None = None) -> Session:
        if len(self.sessions) >= self.config.max_sessions:
            raise ProtocolError(ErrorCode.CAPACITY_REACHED, "server is at capacity",
                                active_sessions=len(self.sessions), max_sessions=self.config.max_sessions)
        sid = session_id or uuid.uuid4().hex
        if sid in self.sessions:
            raise ProtocolError(ErrorCode.SESSION_ERROR, f"session {sid!r} already exists")
        session = self.sessions[sid] = Session(sid, attached, owner)
        self.metrics.sessions.set(len(self.sessions))
        return session

    async def close_session(self, session: Session) -> None:
        """Free the session's sandbox; its trace stays on disk. Idempotent."""
        session.closed = True
        if self.sessions.get(session.id) is session:
            del self.sessions[session.id]
        self.metrics.sessions.set(len(self.sessions))
        if session.episode is not None:
            ep, session.episode = session.episode, None
            try:
                await asyncio.shield(ep.close())
            except Exception:  # noqa: BLE001 - closing must not fail the caller
                log.exception("closing episode %s failed", ep.episode_id)

    def attach(self, session_id: str, identity: Identity) -> Session:
        """Give a detached (HTTP MCP) session to a connection: OpenEnv's ``/ws?session_id=``.

        Not reaped while attached; :meth:`detach` hands it back to the idle timeout.
        """
        session = self.get(session_id, identity)
        if session.attached:
            raise ProtocolError(ErrorCode.SESSION_ERROR,
                                f"session {session_id!r} already belongs to a connection")
        session.attached = True
        session.touch()
        return session

    def detach(self, session: Session) -> None:
        session.attached = False
        session.touch()

    def get(self, session_id: str, identity: Identity) -> Session:
        """The session ``session_id`` if ``identity`` may drive it; else as if there were none."""
        session = self.sessions.get(session_id)
        if session is None or not identity.can_see(session.owner):
            raise ProtocolError(ErrorCode.SESSION_NOT_FOUND, f"no session {session_id!r}")
        return session

    # ---------------------------------------------------------------- operations
    def pick_task(self, params: ResetParams) -> TaskInstance:
        if params.instance_id is not None:
            if params.instance_id not in self.by_id:
                raise ProtocolError(ErrorCode.TASK_NOT_FOUND, f"no task {params.instance_id!r}")
            return self.by_id[params.instance_id]
        if params.index is not None:
            if params.index >= len(self.tasks):
                raise ProtocolError(ErrorCode.TASK_NOT_FOUND,
                                    f"task index {params.index} out of range 0..{len(self.tasks) - 1}")
            return self.tasks[params.index]
        if params.seed is not None:
            return self.tasks[random.Random(params.seed).randrange(len(self.tasks))]
        position = next(self._round_robin) // self.config.group_size
        self.look_ahead(position + 1)
        return self.tasks[position % len(self.tasks)]

    def look_ahead(self, position: int) -> None:
        """Prepare the ``prefetch_ahead`` tasks of the round-robin queue from ``position`` on, in the
        background: a docker task's image pulled and derived and its template made, and with a warm
        pool, jails started for it. A failure here is only logged: the reset that needs the task meets
        it again and reports it."""
        ahead = self.config.prefetch_ahead
        if not ahead or not self.tasks:
            return
        for i in range(position, position + min(ahead, len(self.tasks))):
            task = self.tasks[i % len(self.tasks)]
            if task.instance_id not in self._ahead:
                self._ahead[task.instance_id] = asyncio.create_task(self._prepare(task))

    async def _prepare(self, task: TaskInstance) -> None:
        spec, config = task.workspace_spec(), self.config.sandbox
        try:
            await config.backend.prepare_ahead(spec, config)
            if self.pool is not None:  # as many as a group asks at once (the bursts seen, or group_size)
                self.pool.prime(spec, config, min(self.pool.per_key, max(self.config.group_size,
                                                                         self.pool.typical_burst())))
        except Exception as exc:  # noqa: BLE001 - reported by the reset that needs it
            log.warning("preparing task %s ahead of its reset failed: %s", task.instance_id, exc)
        finally:
            self._ahead.pop(task.instance_id, None)

    async def reset(self, session: Session, data: dict[str, Any] | None, identity: Identity) -> SWEObservation:
        """A new episode in ``session``, owned by ``identity`` (who sent the reset; a fork's original
        must be one it may see)."""
        try:
            params = ResetParams.model_validate(data or {})
        except ValidationError as exc:
            raise ProtocolError(ErrorCode.VALIDATION_ERROR, f"invalid reset: {_errors(exc)}") from None
        fork: ForkPoint | None = None
        profile = self.profile_of(params)
        if params.fork_of is not None:
            fork, task = await self.fork_point(params, identity)
            if params.profile is not None and params.profile != fork.head.get("profile", "default"):
                raise ProtocolError(ErrorCode.VALIDATION_ERROR, f"profile {params.profile!r} is not episode "
                                    f"{fork.episode_id!r}'s: a fork keeps the original's tools (leave profile out)")
        else:
            task = self.pick_task(params)
        # a task from the round robin is primed ahead by look_ahead: its claim does not refill it
        rotating = fork is None and params.instance_id is None and params.index is None and params.seed is None
        ahead = bool(self.config.prefetch_ahead)
        async with session.lock:
            self._check_open(session)
            stepped = asyncio.Event()  # set after the new episode's first step (or once it will have none)
            if session.episode is not None:
                old, session.episode = session.episode, None
                self._close_behind(old, stepped)  # the new episode's start does not wait for the old jail's end
            try:
                episode, obs = await self._start_episode(stepped, params.episode_id or uuid.uuid4().hex, task,
                                                         self.store, self.config.sandbox, self.config.episode,
                                                         self.cache, context=params.context, fork=fork,
                                                         owner=identity.name, pool=self.pool,
                                                         refill_pool=not (rotating and ahead), profile=profile)
            except ImageUnavailable as exc:
                raise ProtocolError(ErrorCode.IMAGE_UNAVAILABLE, f"could not start the sandbox: {exc}",
                                    error_source="env", image=exc.image, reason=exc.reason) from None
            except SandboxError as exc:
                source = "env" if isinstance(exc, WorkspaceError) else "infra"
                raise ProtocolError(ErrorCode.SANDBOX_ERROR, f"could not start the sandbox: {exc}",
                                    error_source=source) from None
            episode.stepped, episode.gradings = stepped, self.gradings
            if session.closed:  # the connection went away while the sandbox started
                await episode.close()
                raise ProtocolError(ErrorCode.SESSION_CLOSED, "session closed during reset")
            session.episode = episode
            session.touch()
        self.metrics.resets.inc()
        return obs

    @staticmethod
    def profile_of(params: ResetParams) -> ToolProfile:
        """The tool profile a reset asks for; UNKNOWN_PROFILE (naming the served ones) for another name."""
        try:
            return get_profile(params.profile)
        except UnknownProfile as exc:
            raise ProtocolError(ErrorCode.UNKNOWN_PROFILE, str(exc), profiles=list(PROFILES)) from None

    @staticmethod
    async def _start_episode(stepped: asyncio.Event, *args: Any, **kwargs: Any) -> tuple[Episode, SWEObservation]:
        """``Episode.start``; where it fails, ``stepped`` is set (no first step will come)."""
        try:
            return await Episode.start(*args, **kwargs)
        except BaseException:
            stepped.set()
            raise

    def _close_behind(self, episode: Episode, after: asyncio.Event) -> None:
        """Close a replaced episode: its trace at once (readable whole from now on), its sandbox in
        the background (killing a jail takes longer than starting a warm one), once the episode that
        replaced it has taken its first step (``after``; at most ``CLOSE_BEHIND_WAIT_S`` later). A jail's
        teardown beside the first command of a warm-claimed jail made that command cost 4x a later
        one in a GRPO burst (bench/bench_training_resets.py); an agent's first action comes after its
        first generation, long enough for the old jail to go."""
        episode.trace.close()
        self._behind.add(after)

        async def close() -> None:
            try:
                try:
                    await asyncio.wait_for(after.wait(), CLOSE_BEHIND_WAIT_S)
                except asyncio.TimeoutError:
                    pass
                finally:
                    self._behind.discard(after)
                await episode.close_sandbox()
            except Exception:  # noqa: BLE001 - closing must not fail anyone
                log.exception("closing episode %s failed", episode.episode_id)

        job = asyncio.create_task(close())
        self._closing.add(job)
        job.add_done_callback(self._closing.discard)

    async def fork_point(self, params: ResetParams, identity: Identity) -> tuple[ForkPoint, TaskInstance]:
        """Where a fork (``fork_of`` + ``t``) starts, and its task: the recorded episode's.

        ``instance_id`` and ``context`` may be sent along (a client that always sends them) but must
        then be the original's: a fork continues the original's task and context. ``index`` and
        ``seed`` are ignored. An original ``identity`` may not see is answered as a missing one.
        """
        assert params.fork_of is not None and params.t is not None
        fork_of, t = params.fork_of, params.t

        def read() -> ForkPoint:
            records = self._visible_records(fork_of, identity)
            return fork_point(records, t)
        try:  # off the event loop: a long episode's trace is megabytes of JSON
            fork = await asyncio.to_thread(read)
        except TraceError as exc:
            raise ProtocolError(ErrorCode(exc.code), str(exc), fork_of=params.fork_of, t=params.t) from None
        if params.instance_id is not None and params.instance_id != fork.instance_id:
            raise ProtocolError(ErrorCode.VALIDATION_ERROR, f"instance_id {params.instance_id!r} is not the task of "
                                f"episode {fork.episode_id!r} ({fork.instance_id!r}): a fork keeps its task")
        if params.context is not None:
            original = fork.head.get("context")
            if original is None or ContextSpec.model_validate(original) != params.context:
                raise ProtocolError(ErrorCode.VALIDATION_ERROR, f"context differs from episode {fork.episode_id!r}'s: "
                                    "a fork keeps the original's context (leave context out)")
        task = self.by_id.get(fork.instance_id)
        if task is None:
            raise ProtocolError(ErrorCode.TASK_NOT_FOUND, f"episode {fork.episode_id!r} ran task "
                                f"{fork.instance_id!r}, which this server does not serve")
        return fork, task

    async def step(self, session: Session, data: dict[str, Any] | None) -> SWEObservation:
        try:
            action = _ACTION.validate_python(data)
        except ValidationError as exc:
            raise ProtocolError(ErrorCode.INVALID_ACTION,
                                f"invalid action: {_errors(exc)}; expected "
                                '{"type": "call_tool", "tool_name": ..., "arguments": {...}} '
                                'or {"type": "list_tools"}') from None
        async with session.lock:
            self._check_open(session)
            episode = self._episode(session)
            started = time.perf_counter()
            obs = await episode.step(action)
            session.touch()
        self._observe(action, obs, time.perf_counter() - started)
        return obs

    async def state(self, session: Session, data: dict[str, Any] | None) -> dict[str, Any]:
        """OpenEnv state (no ``t``), or the state(t) record (with ``t``)."""
        try:
            params = StateParams.model_validate(data or {})
        except ValidationError as exc:
            raise ProtocolError(ErrorCode.VALIDATION_ERROR, f"invalid state request: {_errors(exc)}") from None
        async with session.lock:
            self._check_open(session)
            session.touch()
            if params.t is None:
                return (session.episode.state if session.episode else EpisodeState()).model_dump()
            return self.state_at(self._episode(session).trace.records, params.t)

    async def close(self, session: Session) -> None:
        """Close after the session's pending requests (the orderly ``close`` request)."""
        async with session.lock:
            pass
        await self.close_session(session)

    def state_at(self, records: list[dict[str, Any]], t: int) -> dict[str, Any]:
        try:
            return state_at(records, t).model_dump()
        except TraceError as exc:
            raise ProtocolError(ErrorCode(exc.code), str(exc)) from None

    def episode_state(self, episode_id: str, t: int, identity: Identity) -> dict[str, Any]:
        """state(t) of an episode ``identity`` may see, live or finished, from its trace on disk."""
        try:
            records = self._visible_records(episode_id, identity)
        except TraceError as exc:
            raise ProtocolError(ErrorCode(exc.code), str(exc)) from None
        return self.state_at(records, t)

    async def episode_ids(self, limit: int, identity: Identity) -> list[str]:
        """Ids of the episodes ``identity`` may see, most recent first (an operator: all)."""
        if identity.operator:
            return self.store.list(limit)
        return await asyncio.to_thread(self.store.list, limit, identity.can_see)

    def trace_lines(self, episode_id: str, identity: Identity) -> Iterator[bytes]:
        """The raw trace of an episode ``identity`` may see (ProtocolError as for a missing one)."""
        try:
            if not identity.operator and not identity.can_see(self.store.owner(episode_id)):
                raise not_found(episode_id)
            return self.store.iter_lines(episode_id)
        except TraceError as exc:
            raise ProtocolError(ErrorCode(exc.code), str(exc)) from None

    def _visible_records(self, episode_id: str, identity: Identity) -> list[dict[str, Any]]:
        """The trace of an episode ``identity`` may see; TraceError, as for a missing one, otherwise."""
        records = self.store.load(episode_id)
        head = records[0] if records else {}
        owner = head.get("owner") if head.get("kind") == "reset" else None
        if not identity.can_see(owner if isinstance(owner, str) else None):
            raise not_found(episode_id)
        return records

    # ---------------------------------------------------------------- helpers
    @staticmethod
    def _check_open(session: Session) -> None:
        if session.closed:
            raise ProtocolError(ErrorCode.SESSION_CLOSED, f"session {session.id!r} is closed")

    @staticmethod
    def _episode(session: Session) -> Episode:
        if session.episode is None:
            raise ProtocolError(ErrorCode.NO_EPISODE, "no episode: send reset first")
        return session.episode

    def _observe(self, action: Any, obs: SWEObservation, latency: float) -> None:
        m = self.metrics
        tool = getattr(action, "tool_name", "list_tools")
        m.step_counter(tool if tool in _METRIC_TOOLS else "unknown").inc()  # agent-chosen: keep labels bounded
        m.step_latency.observe(latency)
        if "error_kind" in obs.metadata:
            m.tool_errors.labels(obs.metadata["error_kind"], obs.metadata["error_source"]).inc()
        if obs.done and obs.reward is not None:
            m.rewards.labels(str(bool(obs.metadata.get("resolved")))).inc()
            if obs.metadata.get("reward_hacking") is True:
                m.reward_hacking.inc()
            checked = obs.metadata.get("script_check")
            if isinstance(checked, dict):
                m.script_checks.labels("none" if not checked.get("ran") else "held" if checked.get("holds")
                                       else "failed").inc()
            flags = obs.metadata.get("suspicious")
            if isinstance(flags, list):  # only the closed SuspicionReason set: label cardinality stays bounded
                for reason in _SUSPICION_REASONS.intersection(f for f in flags if isinstance(f, str)):
                    m.suspicious.labels(reason).inc()

    async def reap_idle(self, interval_s: float = 5.0) -> None:
        """Forever: close detached sessions idle past the timeout (never attached ones)."""
        while True:
            await asyncio.sleep(interval_s)
            cutoff = time.monotonic() - self.config.idle_timeout_s
            for session in list(self.sessions.values()):
                if not session.attached and session.last_active < cutoff and not session.lock.locked():
                    await self.close_session(session)

    async def shutdown(self) -> None:
        for job in list(self._ahead.values()):
            job.cancel()
        for event in list(self._behind):  # replaced episodes close now, not after a first step
            event.set()
        await asyncio.gather(*(self.close_session(s) for s in list(self.sessions.values())),
                             *self._ahead.values(), *self._closing, return_exceptions=True)
        if self.pool is not None:
            await self.pool.close()
