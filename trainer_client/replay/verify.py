"""Fork verification: a teacher's action becomes `chosen` only when it was executed and graded better.

For a state(t) and the teachers' proposed actions, the env server forks the recorded episode at
step t once per distinct action (the student's own included: `reset` with `fork_of`, `t`;
docs/rfcs/009-episode-fork.md), runs that action in the fork, submits, and reads the hidden
tests' reward. The best-scoring teacher action is chosen when it scored strictly higher than the
student's; otherwise no pair (`not_better`). Forks run on the replica that holds the episode, as
sandboxes like any other (limits, isolation, traces); a fork that cannot be opened or graded gives
no pair (`fork_failed`), never a guessed one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from env_client import ClientConfig, EnvClientError, MuxConnection, RemoteSession
from env_client.urls import http_base
from trainer_client.pair_records import ToolCall

from .agreement import Verdict
from .canonical import CanonicalizerConfig, canonical_key
from .models import FrozenState

__all__ = ["ForkVerifier"]

log = logging.getLogger(__name__)

STUDENT = "student"


class ForkVerifier:
    """`await verifier(state, answers)` -> Verdict; one /mux connection per replica, opened lazily.

    `replica_of(episode_id)` names the replica (any URL form) that holds an episode's trace.
    """

    def __init__(self, replica_of: Callable[[str], str], config: ClientConfig | None = None,
                 canon: CanonicalizerConfig | None = None, max_parallel_forks: int = 4):
        self.replica_of = replica_of
        self.config = config or ClientConfig(request_timeout_s=300, reset_timeout_s=300)
        self.canon = canon
        self._connections: dict[str, MuxConnection] = {}
        self._gate: asyncio.Semaphore | None = None
        self._max_parallel = max_parallel_forks
        self.forks_opened = 0
        self.fork_failures = 0

    def _connection(self, episode_id: str) -> MuxConnection:
        base = http_base(self.replica_of(episode_id))
        if base not in self._connections:
            self._connections[base] = MuxConnection(base, self.config)
        return self._connections[base]

    async def run_in_fork(self, state: FrozenState, action: ToolCall) -> tuple[float, str]:
        """(hidden-test reward, fork episode id) after `action` in a fork of state's episode at t."""
        if self._gate is None:
            self._gate = asyncio.Semaphore(self._max_parallel)
        async with self._gate:
            session = RemoteSession(self._connection(state.episode_id))
            try:
                obs = await session.reset(fork_of=state.episode_id, t=state.t)
                self.forks_opened += 1
                fork_id = str((obs.get("metadata") or {}).get("episode_id", ""))
                obs = await session.call_tool(action.tool_name, dict(action.arguments))
                if not obs.get("done"):
                    obs = await session.call_tool("submit", {})
                reward = obs.get("reward")
                if reward is None:
                    raise EnvClientError(f"fork {fork_id} ended without a reward "
                                         f"({(obs.get('metadata') or {}).get('error_kind')})")
                return float(reward), fork_id
            finally:
                await session.close()

    async def __call__(self, state: FrozenState, answers: dict[str, ToolCall]) -> Verdict:
        if state.next_action is None:
            return Verdict(None, (), "no_student_action")
        # one fork per distinct action (teachers that agree share it; the student's too)
        actors: dict[str, list[str]] = {}
        actions: dict[str, ToolCall] = {}
        for name, action in [(STUDENT, state.next_action), *answers.items()]:
            key = canonical_key(action, self.canon)
            actors.setdefault(key, []).append(name)
            actions.setdefault(key, action)
        outcomes = await asyncio.gather(*(self.run_in_fork(state, a) for a in actions.values()),
                                        return_exceptions=True)
        rewards: dict[str, float] = {}
        forks: dict[str, str] = {}
        scored: dict[str, float] = {}
        for key, outcome in zip(actions, outcomes):
            if isinstance(outcome, BaseException):
                self.fork_failures += 1
                log.warning("fork of %s at t=%d failed: %s", state.episode_id, state.t, outcome)
                continue
            scored[key] = outcome[0]
            for name in actors[key]:
                rewards[name], forks[name] = outcome
        evidence = {"rewards": rewards, "forks": forks}
        student_key = canonical_key(state.next_action, self.canon)
        if student_key not in scored:
            return Verdict(None, (), "fork_failed", evidence)
        teacher_keys = [k for k in scored if k != student_key]
        if not teacher_keys:
            return Verdict(None, tuple(actors[student_key][1:]), "agrees_with_student", evidence)
        best = max(teacher_keys, key=lambda k: (scored[k], len(actors[k])))  # ties: the most teachers
        if scored[best] <= scored[student_key]:
            return Verdict(None, (), "not_better", evidence)
        return Verdict(actions[best], tuple(actors[best]), "pair", evidence)

    async def aclose(self) -> None:
        await asyncio.gather(*(c.close() for c in self._connections.values()), return_exceptions=True)
        self._connections.clear()
