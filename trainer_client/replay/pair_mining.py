"""Pair mining, the core of teacher replay: frozen states -> N teachers in parallel -> verdicts ->
normalized pairs, with a summary of what it cost.

`replay()` is one pass over a given set of states; `trainer-client replay` (cli.py) runs it on
exported traces, and the background loop of a training run (during_training.py) on the states of
the episodes the run just finished.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from trainer_client.pair_records import PairProvenance, PairRecord, ToolCall

from .agreement import AgreementRule, Verdict, decide
from .budget import Budget, estimate_prompt_tokens
from .canonical import CanonicalizerConfig
from .client import TeacherClient
from .config import TeachersFile
from .gating import GatingConfig, select
from .models import CallRecord, FrozenState, StepResult
from .normalize import NormalizeConfig, normalize_pairs
from .summary import ReplaySummary, summarize


class ReplayOptions(BaseModel):
    """Everything about a replay run except the teachers and the traces."""

    model_config = ConfigDict(extra="forbid")

    max_total_usd: float = Field(default=math.inf, ge=0)
    """Hard ceiling on teacher spend for the whole run."""
    gating: GatingConfig = Field(default_factory=GatingConfig)
    rule: AgreementRule = Field(default_factory=AgreementRule)
    canon: CanonicalizerConfig = Field(default_factory=CanonicalizerConfig)
    normalize: NormalizeConfig = Field(default_factory=NormalizeConfig)
    max_steps_in_flight: int = Field(default=64, ge=1)
    """States being replayed at once (each fans out to every teacher)."""


@dataclass
class ReplayResult:
    steps: list[StepResult]
    pairs_raw: list[PairRecord]
    pairs: list[PairRecord]
    summary: ReplaySummary

    @property
    def calls(self) -> list[CallRecord]:
        return [c for s in self.steps for c in s.calls]


#: decides a state from the teachers' answers instead of the agreement rule (fork verification: verify.py)
Verifier = Callable[[FrozenState, dict[str, ToolCall]], Awaitable[Verdict]]


def make_pair(step: StepResult, teacher_names: list[str]) -> PairRecord | None:
    v, s = step.verdict, step.state
    if v is None or v.chosen is None or s.next_action is None:
        return None
    costs: dict[str, float] = {}
    for c in step.calls:
        costs[c.teacher] = costs.get(c.teacher, 0.0) + c.cost_usd
    return PairRecord(
        state_id=s.state_id, messages=s.messages, tools=s.tools,
        chosen=v.chosen, rejected=s.next_action, n_teachers_agreeing=len(v.agreeing),
        provenance=PairProvenance(
            episode_id=s.episode_id, t=s.t, instance_id=s.instance_id,
            teachers=teacher_names, agreeing=list(v.agreeing), costs=costs,
            **({"verification": "fork", **v.evidence} if v.evidence is not None else {}),
        ),
    )


async def replay(
    states: Sequence[FrozenState],
    teachers: TeachersFile,
    options: ReplayOptions | None = None,
    *,
    on_step: Callable[[StepResult, Budget], None] | None = None,
    verify: Verifier | None = None,
) -> ReplayResult:
    """Replay `states` to every teacher and mine pairs; per-call failures are recorded, not raised.

    `verify` replaces the agreement rule: it gets each queried state and the teachers' answers and
    returns the verdict (ForkVerifier executes them in forks and grades them)."""
    opts = options or ReplayOptions()
    budget = Budget(max_total_usd=opts.max_total_usd)
    for t in teachers.teachers:  # fail fast on a missing key, before any client opens
        t.api_key()
    clients = [TeacherClient(t, teachers.retry, budget) for t in teachers.teachers]
    names = [t.name for t in teachers.teachers]
    gate = asyncio.Semaphore(opts.max_steps_in_flight)
    started = time.monotonic()

    async def run_step(state: FrozenState) -> StepResult:
        step = StepResult(state, queried=select(state, opts.gating))
        if step.queried:
            async with gate:
                step.calls = list(await asyncio.gather(*(c.ask(state) for c in clients)))
            answers = {c.teacher: c.action for c in step.calls if c.ok and c.action is not None}
            if verify is not None and answers and state.next_action is not None:
                step.verdict = await verify(state, answers)
            else:
                step.verdict = decide(state.next_action, answers, opts.rule, opts.canon)
        if on_step is not None:
            on_step(step, budget)
        return step

    try:
        steps = list(await asyncio.gather(*(run_step(s) for s in states)))
    finally:
        for c in clients:
            await c.aclose()
    raw = [p for p in (make_pair(s, names) for s in steps) if p is not None]
    kept, dropped = normalize_pairs(raw, opts.normalize, opts.canon)
    gated_out = [estimate_prompt_tokens(s.state.messages, s.state.tools) for s in steps
                 if not s.queried and s.state.next_action is not None]
    summary = summarize(steps, teachers, budget, raw, kept, dropped, gated_out, time.monotonic() - started)
    return ReplayResult(steps=steps, pairs_raw=raw, pairs=kept, summary=summary)
