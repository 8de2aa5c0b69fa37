"""The run summary: cost, latency, errors, gating savings and pair yield."""

from __future__ import annotations

import statistics
from collections import Counter

from pydantic import BaseModel, ConfigDict

from trainer_client.pair_records import PairRecord

from .budget import Budget, estimate_prompt_tokens
from .config import TeacherConfig, TeachersFile
from .models import CallRecord, StepResult


class TeacherStats(BaseModel):
    model_config = ConfigDict(extra="forbid")

    calls: int = 0
    ok: int = 0
    attempts: int = 0
    cost_usd: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_p50_s: float | None = None
    latency_p95_s: float | None = None
    latency_max_s: float | None = None
    errors: dict[str, int] = {}
    attempt_errors: dict[str, int] = {}


class ReplaySummary(BaseModel):
    """What `trainer-client replay` prints and writes with `--summary-out`."""

    model_config = ConfigDict(extra="forbid")

    states: int
    steps_with_action: int
    steps_queried: int
    steps_gated_out: int
    calls: int
    calls_ok: int
    retries: int
    errors: dict[str, int]
    """Final outcome of failed calls, by kind."""
    attempt_errors: dict[str, int]
    """Every failed attempt, retried ones included (429s, 5xx, timeouts ...)."""
    cost_usd: float
    budget_usd: float | None
    budget_refusals: int
    budget_peak_committed_usd: float
    budget_overruns: int
    est_cost_saved_by_gating_usd: float
    est_cost_saved_method: str
    """`observed`: scaled from this run's own calls; `worst_case`: from the reservation bound."""
    verdicts: dict[str, int]
    pairs_raw: int
    pairs_kept: int
    pairs_dropped: dict[str, int]
    pair_yield: float | None
    """Kept pairs per queried step."""
    cost_per_pair_usd: float | None
    wall_s: float
    teachers: dict[str, TeacherStats]

    def render(self) -> str:
        lines = [
            f"steps: {self.states} states, {self.steps_with_action} with a student action, "
            f"{self.steps_queried} queried, {self.steps_gated_out} gated out",
            f"calls: {self.calls} ({self.calls_ok} ok, {self.retries} retries); failed: {self.errors or 'none'};"
            f" failed attempts: {self.attempt_errors or 'none'}",
            f"cost: ${self.cost_usd:.4f}" + (f" of ${self.budget_usd:.4f} budget" if self.budget_usd is not None else "")
            + f" (refused {self.budget_refusals}, peak committed ${self.budget_peak_committed_usd:.4f});"
            f" gating saved ~${self.est_cost_saved_by_gating_usd:.4f} ({self.est_cost_saved_method})",
            f"pairs: {self.pairs_raw} mined, {self.pairs_kept} kept, dropped {self.pairs_dropped or 'none'};"
            f" yield {_fmt(self.pair_yield)} pairs/step, ${_fmt(self.cost_per_pair_usd)}/pair; verdicts {self.verdicts}",
        ]
        for name, t in self.teachers.items():
            lines.append(
                f"  {name}: {t.ok}/{t.calls} ok, ${t.cost_usd:.4f}, tokens in/out {t.prompt_tokens}/{t.completion_tokens},"
                f" request latency p50 {_fmt(t.latency_p50_s)}s p95 {_fmt(t.latency_p95_s)}s"
                f" max {_fmt(t.latency_max_s)}s, failed {t.errors or 'none'}"
            )
        lines.append(f"wall: {self.wall_s:.2f}s")
        return "\n".join(lines)


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def _quantile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    if len(xs) == 1:
        return xs[0]
    return statistics.quantiles(xs, n=100, method="inclusive")[round(q * 100) - 1]


def _teacher_stats(calls: list[CallRecord]) -> TeacherStats:
    lat = sorted(c.latency_s for c in calls if c.attempts)
    return TeacherStats(
        calls=len(calls), ok=sum(c.ok for c in calls), attempts=sum(c.attempts for c in calls),
        cost_usd=sum(c.cost_usd for c in calls), prompt_tokens=sum(c.prompt_tokens for c in calls),
        completion_tokens=sum(c.completion_tokens for c in calls),
        latency_p50_s=_quantile(lat, 0.5), latency_p95_s=_quantile(lat, 0.95),
        latency_max_s=lat[-1] if lat else None,
        errors=dict(Counter(c.error for c in calls if c.error)),
        attempt_errors=dict(Counter(e for c in calls for e in c.attempt_errors)),
    )


def _gating_savings(cfg: TeacherConfig, calls: list[CallRecord], skipped: list[int],
                    bound: dict[str, int]) -> tuple[float, bool]:
    """Estimated cost of asking `cfg` about the skipped steps; True when scaled from observations."""
    priced = [c for c in calls if c.ok and not c.cost_estimated and c.prompt_tokens]
    if not priced:
        return sum(n * cfg.price_in + cfg.max_tokens * cfg.price_out for n in skipped), False
    ratio = sum(c.prompt_tokens for c in priced) / sum(bound[c.state_id] for c in priced)
    mean_out = sum(c.completion_tokens for c in priced) / len(priced)
    return sum(ratio * n * cfg.price_in + mean_out * cfg.price_out for n in skipped), True


def summarize(steps: list[StepResult], teachers: TeachersFile, budget: Budget,
              raw: list[PairRecord], kept: list[PairRecord], dropped: Counter[str],
              gated_out_prompt_bounds: list[int], wall_s: float) -> ReplaySummary:
    calls = [c for s in steps for c in s.calls]
    bound = {s.state.state_id: estimate_prompt_tokens(s.state.messages, s.state.tools) for s in steps if s.queried}
    saved, observed = 0.0, True
    for cfg in teachers.teachers:
        mine = [c for c in calls if c.teacher == cfg.name]
        amount, obs = _gating_savings(cfg, mine, gated_out_prompt_bounds, bound)
        saved += amount
        observed &= obs or not gated_out_prompt_bounds
    queried = sum(s.queried for s in steps)
    cost = budget.spent
    return ReplaySummary(
        states=len(steps),
        steps_with_action=sum(s.state.next_action is not None for s in steps),
        steps_queried=queried,
        steps_gated_out=len(gated_out_prompt_bounds),
        calls=len(calls), calls_ok=sum(c.ok for c in calls),
        retries=sum(max(0, c.attempts - 1) for c in calls),
        errors=dict(Counter(c.error for c in calls if c.error)),
        attempt_errors=dict(Counter(e for c in calls for e in c.attempt_errors)),
        cost_usd=cost,
        budget_usd=None if budget.max_total_usd == float("inf") else budget.max_total_usd,
        budget_refusals=budget.refused,
        budget_peak_committed_usd=budget.peak_committed,
        budget_overruns=budget.overruns,
        est_cost_saved_by_gating_usd=saved,
        est_cost_saved_method="observed" if observed else "worst_case",
        verdicts=dict(Counter(s.verdict.reason for s in steps if s.verdict is not None)),
        pairs_raw=len(raw), pairs_kept=len(kept), pairs_dropped=dict(dropped),
        pair_yield=len(kept) / queried if queried else None,
        cost_per_pair_usd=cost / len(kept) if kept else None,
        wall_s=wall_s,
        teachers={cfg.name: _teacher_stats([c for c in calls if c.teacher == cfg.name])
                  for cfg in teachers.teachers},
    )
