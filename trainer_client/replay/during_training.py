"""Teacher replay during a training run (`replay.enabled`): finished episodes -> state(t) ->
teachers -> pairs, in the background, feeding channel 3 while the run trains.

    loop = LiveReplay(teachers, ReplayOptions(...), states_per_episode=4)
    loop.start()
    loop.submit([FinishedEpisode(episode_id, replica_url, train_step)])   # after each generation batch
    pairs = loop.drain()                                                  # before each loss: never waits
    loop.close()

One daemon thread runs an asyncio loop. Episodes wait in a bounded queue (the oldest are dropped
past `max_pending`, and counted). Each round takes every queued episode, reads its state(t) records
from the replica that ran it, keeps up to `states_per_episode` of them (error sites first, then the
earliest; the gating config decides which are eligible at all), sends them to every teacher at once
and hands the normalized pairs to `drain()`, each with its provenance (episode, t, teachers,
verification, `source: live`, the training step). The USD ceiling `max_total_usd` holds across the
whole run: each round may spend only what earlier rounds left. Teacher calls never block a training
step: `submit` and `drain` only take a lock.

`state_dict()` / `load_state_dict()` carry the spend, the counters, the queue and undelivered pairs
across a checkpoint, so a resumed run neither forgets its budget nor loses pairs in transit.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from env_client import ClientConfig
from env_client.urls import http_base
from trainer_client.pair_records import PairRecord

from .agreement import AgreementRule
from .config import ReplayConfigError, TeachersFile, load_teachers
from .gating import is_error_site, select
from .models import FrozenState
from .pair_mining import ReplayOptions, Verifier, replay
from .traces import env_client, fetch_trace
from .verify import ForkVerifier

__all__ = ["FinishedEpisode", "LiveReplay", "open_live_replay", "pick_states"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FinishedEpisode:
    """A rollout whose episode has ended on the env server."""

    episode_id: str
    replica_url: str
    """The replica that ran it (its trace lives there): any URL form of that replica."""
    train_step: int


def pick_states(states: list[FrozenState], k: int, options: ReplayOptions) -> list[FrozenState]:
    """Up to `k` eligible states of one episode: error sites first, then by step."""
    eligible = [s for s in states if select(s, options.gating)]
    eligible.sort(key=lambda s: (not is_error_site(s), s.t))
    return eligible[:k]


class LiveReplay:
    """Background teacher replay during training (see the module docstring)."""

    def __init__(self, teachers: TeachersFile, options: ReplayOptions | None = None, *,
                 token: str | None = None, states_per_episode: int = 4, max_pending: int = 64,
                 max_total_usd: float = math.inf, verifier: Verifier | None = None):
        self.teachers = teachers
        self.options = options or ReplayOptions()
        self.token = token
        self.states_per_episode = states_per_episode
        self.max_total_usd = max_total_usd
        self.verifier = verifier
        self.spent_usd = 0.0
        self.thread_cpu_s = 0.0  # CPU seconds of the loop's thread (it competes with training for the cores)
        self.counts: Counter = Counter()
        self._pending: deque[FinishedEpisode] = deque(maxlen=max_pending)
        self._replica: dict[str, str] = {}
        self._ready: list[PairRecord] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    # ------------------------------------------------------------ training-thread side
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="live-replay", daemon=True)
            self._thread.start()

    def submit(self, episodes: Iterable[FinishedEpisode]) -> None:
        """Queue finished episodes (non-blocking); past `max_pending` the oldest are dropped."""
        with self._lock:
            for episode in episodes:
                if len(self._pending) == self._pending.maxlen:
                    self.counts["episodes_dropped"] += 1
                self._pending.append(episode)
                self._replica[episode.episode_id] = episode.replica_url
                self.counts["episodes_queued"] += 1
                self._idle.clear()
        self._wake.set()

    def drain(self) -> list[PairRecord]:
        """The pairs mined since the last call (non-blocking)."""
        with self._lock:
            ready, self._ready = self._ready, []
            self.counts["pairs_delivered"] += len(ready)
        return ready

    def replica_url(self, episode_id: str) -> str:
        """The replica that ran a queued episode (ForkVerifier forks it there)."""
        with self._lock:
            return self._replica[episode_id]

    def wait_idle(self, timeout_s: float | None = None) -> bool:
        """Block until the queue is empty and no round is running (tests, the end of a run)."""
        return self._idle.wait(timeout_s)

    def _count(self, **counts: int) -> None:
        with self._lock:
            self.counts.update(counts)

    def metrics(self) -> dict[str, float]:
        """`replay/*` counters for the trainer's per-step log."""
        with self._lock:
            pending, counts = len(self._pending), dict(self.counts)
        out = {f"replay/{k}": float(v) for k, v in sorted(counts.items()) if "/" not in k}
        out["replay/pending_episodes"] = float(pending)
        out["replay/spent_usd"] = self.spent_usd
        out["replay/thread_cpu_s"] = self.thread_cpu_s
        return out

    def state_dict(self) -> dict[str, Any]:
        with self._lock:
            return {"spent_usd": self.spent_usd, "counts": dict(self.counts),
                    "pending": [asdict(e) for e in self._pending],
                    "ready": [p.model_dump(mode="json") for p in self._ready]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with self._lock:
            self.spent_usd = float(state.get("spent_usd", 0.0))
            self.counts = Counter(state.get("counts") or {})
            self._pending.clear()
            self._pending.extend(FinishedEpisode(**e) for e in state.get("pending") or [])
            self._replica.update({e.episode_id: e.replica_url for e in self._pending})
            self._ready = [PairRecord.model_validate(p) for p in state.get("ready") or []]
            if self._pending:
                self._idle.clear()
        self._wake.set()

    def close(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    # ------------------------------------------------------------ the loop thread
    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # noqa: BLE001 - logged; training goes on without channel 3 input
            self._error = exc
            log.exception("the live replay loop stopped")
        finally:
            self._idle.set()

    async def _main(self) -> None:
        async with env_client(self.token) as http:
            try:
                while not self._stop.is_set():
                    await asyncio.to_thread(self._wake.wait, 1.0)
                    self._wake.clear()
                    with self._lock:
                        batch = list(self._pending)
                        self._pending.clear()
                    if batch:
                        try:
                            await self._round(http, batch)
                        except Exception as exc:  # noqa: BLE001 - one bad round loses its episodes only
                            self._count(round_errors=1, episodes_lost=len(batch))
                            log.warning("replay round of %d episode(s) failed: %r", len(batch), exc)
                    with self._lock:
                        if not self._pending:
                            self._idle.set()
            finally:
                close = getattr(self.verifier, "aclose", None)
                if close is not None:
                    await close()

    async def _round(self, http: Any, batch: list[FinishedEpisode]) -> None:
        cpu = time.thread_time()
        try:
            await self._replay_batch(http, batch)
        finally:
            with self._lock:
                self.thread_cpu_s += time.thread_time() - cpu

    async def _replay_batch(self, http: Any, batch: list[FinishedEpisode]) -> None:
        states: list[FrozenState] = []
        step_of: dict[str, int] = {}
        for episode in batch:
            try:
                records = await fetch_trace(http, http_base(episode.replica_url), episode.episode_id)
            except Exception as exc:  # noqa: BLE001 - one unreadable trace loses that episode only
                self._count(trace_errors=1)
                log.warning("replay: cannot read episode %s: %s", episode.episode_id, exc)
                continue
            picked = pick_states(records, self.states_per_episode, self.options)
            states += picked
            step_of[episode.episode_id] = episode.train_step
            self._count(episodes_replayed=1)
        if not states:
            return
        remaining = self.max_total_usd - self.spent_usd
        if remaining <= 0:
            self._count(states_over_budget=len(states))
            return
        options = self.options.model_copy(update={"max_total_usd": remaining})
        result = await replay(states, self.teachers, options, verify=self.verifier)
        self.spent_usd += result.summary.cost_usd
        summary = result.summary
        self._count(states_queried=summary.steps_queried, teacher_calls=summary.calls,
                    teacher_calls_failed=summary.calls - summary.calls_ok)
        self._count(**{f"verdicts/{reason}": n for reason, n in summary.verdicts.items()})
        pairs = [p.model_copy(update={"provenance": p.provenance.model_copy(update={
            "source": "live", "train_step": step_of.get(p.provenance.episode_id)})}) for p in result.pairs]
        with self._lock:
            self.counts["pairs_mined"] += len(pairs)
            self._ready.extend(pairs)
            for episode in batch:
                self._replica.pop(episode.episode_id, None)


@contextmanager
def open_live_replay(cfg: Any, output_dir: Path) -> Iterator[LiveReplay]:
    """The run's loop from its config (`replay` section): its teachers (a teachers file, or local
    checkpoints served for the run and stopped after it), its verification, started and closed."""
    section = cfg.replay
    token = cfg.env.client.token.get_secret_value() if cfg.env.client.token else None
    with ExitStack() as stack:
        if section.teachers:
            teachers = load_teachers(section.teachers)
        elif section.local_models:
            from .local import local_teachers, parse_local_teacher

            models = [parse_local_teacher(m) for m in section.local_models]
            teachers = stack.enter_context(local_teachers(models, threads=1, log_dir=output_dir / "teachers"))
        else:
            raise ReplayConfigError("replay.enabled needs replay.teachers (a teachers file) or replay.local_models")
        options = ReplayOptions(rule=AgreementRule(min_agree=section.min_agreeing))
        loop = LiveReplay(teachers, options, token=token, states_per_episode=section.states_per_episode,
                          max_pending=section.max_pending_episodes, max_total_usd=section.max_total_usd)
        if section.verify == "fork":
            client = ClientConfig(token=cfg.env.client.token, request_timeout_s=300, reset_timeout_s=300,
                                  capacity_wait_s=0)
            loop.verifier = ForkVerifier(loop.replica_url, client, options.canon)
        loop.start()
        stack.callback(loop.close)
        yield loop
