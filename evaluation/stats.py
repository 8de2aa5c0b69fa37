"""The numbers of an evaluation: resolved rate with its interval, unbiased pass@k, breakdowns.

- resolved rate: resolved / scored episodes (lost ones are not scored), with a 95% Wilson
  score interval;
- pass@k (Chen et al. 2021): per task with n scored samples of which c resolved,
  1 - C(n-c, k) / C(n, k), averaged over the tasks that have n >= k; pass@1 is the mean of c/n;
- per task source and per repository (`tasksets.repo_of`: the task's `repo`, else its instance
  id's prefix), turns and tokens per episode, end reasons, error kinds, `reward_hacking` and
  `suspicious` counts, what the trainer's default monitor policy would do with them (resolved
  episodes it would score 0, episodes it would mask; the resolved rate stays the grader's), wall time;
- token and cost totals over every attempt (scored, retried and lost: a paid API bills them all),
  with the lost attempts' share.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from contract import DEFAULT_SUSPICION_POLICY, SuspicionPolicy, suspicion_decision

from .agent import EpisodeResult, Usage
from .tasksets import repo_of

__all__ = ["pass_at_k", "result_repo", "summarize", "task_pass_rates", "wilson_interval"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from n samples of which c passed (needs k <= n)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    # 1 - prod_{i=n-c+1}^{n} (1 - k/i): the numerically stable form of 1 - C(n-c, k) / C(n, k)
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The 95% Wilson score interval of a rate (0, 1 for n = 0)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, center - half), min(1.0, center + half)


def result_repo(r: EpisodeResult) -> str:
    """The repository an episode's task belongs to, by the rule `tasks split` uses (`repo_of`)."""
    return repo_of({"instance_id": r.instance_id, "repo": r.repo})


def task_pass_rates(results: Iterable[EpisodeResult]) -> dict[str, dict[str, Any]]:
    """Per instance: scored samples n, resolved c, rate c/n (None when every sample was lost), lost."""
    out: dict[str, dict[str, Any]] = {}
    for r in results:
        row = out.setdefault(r.instance_id, {"n": 0, "c": 0, "lost": 0, "source": r.task_source,
                                             "repo": result_repo(r)})
        if r.status == "lost":
            row["lost"] += 1
            continue
        row["n"] += 1
        row["c"] += r.status == "resolved"
    for row in out.values():
        row["rate"] = row["c"] / row["n"] if row["n"] else None
    return dict(sorted(out.items()))


def _rate(results: Sequence[EpisodeResult]) -> dict[str, Any]:
    scored = [r for r in results if r.status != "lost"]
    resolved = sum(r.status == "resolved" for r in scored)
    low, high = wilson_interval(resolved, len(scored))
    per_task = task_pass_rates(results)
    rates = [row["rate"] for row in per_task.values() if row["rate"] is not None]
    return {"tasks": len(per_task), "episodes": len(results), "scored": len(scored),
            "lost": len(results) - len(scored), "resolved": resolved,
            "resolved_rate": resolved / len(scored) if scored else None, "ci95": [low, high],
            "pass@1": statistics.fmean(rates) if rates else None}


def _dist(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "median": None, "p90": None, "max": None}
    ordered = sorted(values)
    return {"mean": statistics.fmean(ordered), "median": statistics.median(ordered),
            "p90": ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)], "max": ordered[-1]}


def _pass_at(per_task: dict[str, dict[str, Any]], ks: Sequence[int]) -> dict[str, dict[str, Any]]:
    out = {}
    for k in ks:
        values = [pass_at_k(row["n"], row["c"], k) for row in per_task.values() if row["n"] >= k]
        out[f"pass@{k}"] = {"value": statistics.fmean(values) if values else None, "tasks": len(values)}
    return out


def _ks(samples: int) -> list[int]:
    ks, k = [], 1
    while k < samples:
        ks.append(k)
        k *= 2
    return ks + [samples] if samples >= 1 else [1]


def summarize(results: Sequence[EpisodeResult], samples: int, wall_s: float | None = None) -> dict[str, Any]:
    """The report's numbers (report.json's `summary`): overall, pass@k, per source and repo, costs."""
    results = list(results)
    per_task = task_pass_rates(results)
    scored = [r for r in results if r.status != "lost"]
    by_source: dict[str, list[EpisodeResult]] = defaultdict(list)
    by_repo: dict[str, list[EpisodeResult]] = defaultdict(list)
    for r in results:
        by_source[r.task_source or "unknown"].append(r)
        by_repo[result_repo(r)].append(r)
    errors: Counter[str] = Counter()
    suspicious: Counter[str] = Counter()
    zeroed: Counter[str] = Counter()  # resolved episodes the default policy scores 0, by the keys that decided it
    masked = 0
    for r in scored:
        errors.update(r.error_kinds)
        suspicious.update(r.suspicious)
        decision = suspicion_decision(DEFAULT_SUSPICION_POLICY, r.reward_hacking, r.suspicious)
        if decision.action is SuspicionPolicy.zero and (r.reward or 0.0) > 0:
            zeroed.update(decision.keys)
            zeroed["(episodes)"] += 1
        masked += decision.action is SuspicionPolicy.mask
    episode_wall = sum(r.wall_s for r in results)
    lost = Usage()
    for r in results:
        lost = lost.plus(r.lost_usage)
    return {
        "overall": _rate(results),
        "samples_per_task": samples,
        "pass_at_k": _pass_at(per_task, _ks(samples)),
        "by_source": {k: _rate(v) for k, v in sorted(by_source.items())},
        "by_repo": {k: _rate(v) for k, v in sorted(by_repo.items())},
        "turns": _dist([r.turns for r in scored]),
        "steps": _dist([r.steps for r in scored]),
        "prompt_tokens": _dist([r.prompt_tokens for r in scored]),
        "completion_tokens": _dist([r.completion_tokens for r in scored]),
        "end_reasons": dict(Counter(r.end_reason for r in scored if r.end_reason).most_common()),
        "error_kinds": dict(errors.most_common()),
        "reward_hacking": sum(r.reward_hacking for r in scored),
        "suspicious": sum(bool(r.suspicious) for r in scored),
        "suspicious_reasons": dict(suspicious.most_common()),
        # the trainer's default env.suspicion_policy applied to these episodes (the rates above are the grader's)
        "policy_zeroed": zeroed.pop("(episodes)", 0),
        "policy_zeroed_reasons": dict(zeroed.most_common()),
        "policy_masked": masked,
        "lost_reasons": dict(Counter(r.lost_reasons[-1].split(":")[0] for r in results
                                     if r.status == "lost" and r.lost_reasons).most_common()),
        "retried_episodes": sum(r.attempts > 1 for r in results),
        # totals over every attempt (scored, retried, lost); `lost_attempts`: the lost ones' share
        "cost_usd": sum(r.cost_usd for r in results) + lost.cost_usd,
        "tokens": {"prompt": sum(r.prompt_tokens for r in results) + lost.prompt_tokens,
                   "completion": sum(r.completion_tokens for r in results) + lost.completion_tokens},
        "lost_attempts": lost.model_dump(),
        "graded_diff_unknown": sum(r.status != "lost" and r.model_patch is None for r in results),
        "wall_s": wall_s,
        "episode_wall_s": _dist([r.wall_s for r in scored]),
        "policy_share": (sum(r.policy_s for r in results) / episode_wall) if episode_wall else None,
        "env_share": (sum(r.env_s for r in results) / episode_wall) if episode_wall else None,
    }
