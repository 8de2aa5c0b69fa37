"""The numbers of a report: unbiased pass@k against its closed form, the Wilson interval against
known values and its defining equation, and `summarize` on constructed episode results."""

from __future__ import annotations

import math

import pytest

from evaluation import EpisodeResult, Usage, pass_at_k, summarize, task_pass_rates, wilson_interval


def closed_form(n: int, c: int, k: int) -> float:
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 10, 16, 25])
def test_pass_at_k_is_the_closed_form(n: int):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(closed_form(n, c, k), abs=1e-12), (n, c, k)


def test_pass_at_k_edges():
    assert pass_at_k(10, 0, 1) == 0.0 and pass_at_k(10, 0, 10) == 0.0  # c = 0: never
    assert pass_at_k(10, 10, 1) == 1.0 and pass_at_k(10, 10, 10) == 1.0  # c = n: always
    assert pass_at_k(5, 3, 3) == 1.0 == closed_form(5, 3, 3)  # n - c < k: every k-subset holds a pass
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)  # pass@1 is c / n
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(200, 7, 100) == pytest.approx(closed_form(200, 7, 100), abs=1e-12)  # large n: stable
    for n, c, k in [(3, 1, 4), (1, 0, 2), (4, 2, 0), (4, 5, 1), (4, -1, 1)]:
        with pytest.raises(ValueError):
            pass_at_k(n, c, k)


def test_wilson_interval_known_values():
    # 5/10 and 0/10 at 95% (Wilson 1927; statsmodels proportion_confint(method="wilson") gives the same)
    assert wilson_interval(5, 10) == pytest.approx((0.2365931, 0.7634069), abs=1e-6)
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775328), abs=1e-6)
    assert wilson_interval(10, 10) == pytest.approx((0.7224672, 1.0), abs=1e-6)
    assert wilson_interval(0, 0) == (0.0, 1.0)


@pytest.mark.parametrize("s,n", [(1, 3), (7, 20), (33, 50), (499, 1000)])
def test_wilson_interval_bounds_solve_its_equation(s: int, n: int):
    """The bounds are the roots p of (p_hat - p)^2 = z^2 p (1 - p) / n."""
    z, p_hat = 1.959964, s / n
    a, b, c = 1 + z * z / n, -(2 * p_hat + z * z / n), p_hat * p_hat
    root = math.sqrt(b * b - 4 * a * c)
    assert wilson_interval(s, n) == pytest.approx(((-b - root) / (2 * a), (-b + root) / (2 * a)), abs=1e-12)


def _r(iid: str, sample: int, status: str, source: str, repo: str, **kw) -> EpisodeResult:
    scored = status != "lost"
    base = dict(instance_id=iid, sample=sample, status=status, task_source=source, repo=repo,
                reward=(1.0 if status == "resolved" else 0.0) if scored else None,
                end_reason="submitted" if scored else None, turns=3 if scored else 0,
                prompt_tokens=100, completion_tokens=10, wall_s=2.0)
    base.update(kw)
    return EpisodeResult(**base)


def constructed() -> list[EpisodeResult]:
    """A (swe-bench, r1): resolved, unresolved, resolved, lost (3 attempts billed 400 + 40 tokens);
    B (synthetic, r2): 4 unresolved; C (synthetic, r2): 4 resolved, one of them after a lost
    attempt (billed 30 + 3 tokens)."""
    return [
        _r("A", 0, "resolved", "swe-bench", "r1"), _r("A", 1, "unresolved", "swe-bench", "r1", end_reason="turn_limit"),
        _r("A", 2, "resolved", "swe-bench", "r1"),
        _r("A", 3, "lost", "swe-bench", "r1", attempts=3, prompt_tokens=0, completion_tokens=0,
           lost_reasons=["env: EnvConnectionError: gone", "env: EnvConnectionError: gone",
                         "env reset: EnvTimeoutError"],
           lost_usage=Usage(attempts=3, turns=4, prompt_tokens=400, completion_tokens=40, cost_usd=0.004)),
        *[_r("B", s, "unresolved", "synthetic-mutation", "r2", end_reason="no_tool_call", turns=1) for s in range(4)],
        *[_r("C", s, "resolved", "synthetic-mutation", "r2") for s in range(3)],
        _r("C", 3, "resolved", "synthetic-mutation", "r2", attempts=2, lost_reasons=["policy endpoint: HTTP 503"],
           cost_usd=0.01, lost_usage=Usage(attempts=1, turns=1, prompt_tokens=30, completion_tokens=3, cost_usd=0.002)),
    ]


def test_summarize_constructed_results():
    s = summarize(constructed(), samples=4, wall_s=60.0)
    o = s["overall"]
    assert (o["tasks"], o["episodes"], o["scored"], o["lost"], o["resolved"]) == (3, 12, 11, 1, 6)
    assert o["resolved_rate"] == pytest.approx(6 / 11), "the lost episode is in no rate"
    assert o["ci95"] == pytest.approx(list(wilson_interval(6, 11)))
    assert o["pass@1"] == pytest.approx((2 / 3 + 0 + 1) / 3), "the mean over tasks of c / n (n: scored samples)"

    assert list(s["pass_at_k"]) == ["pass@1", "pass@2", "pass@4"]
    assert s["pass_at_k"]["pass@1"] == {"value": pytest.approx((2 / 3 + 0 + 1) / 3), "tasks": 3}
    assert s["pass_at_k"]["pass@2"] == {"value": pytest.approx((closed_form(3, 2, 2) + 0 + 1) / 3), "tasks": 3}
    # A has only 3 scored samples: pass@4 is over B and C
    assert s["pass_at_k"]["pass@4"] == {"value": pytest.approx(0.5), "tasks": 2}

    swe, syn = s["by_source"]["swe-bench"], s["by_source"]["synthetic-mutation"]
    assert (swe["tasks"], swe["scored"], swe["lost"], swe["resolved"]) == (1, 3, 1, 2)
    assert swe["resolved_rate"] == pytest.approx(2 / 3)
    assert (syn["tasks"], syn["scored"], syn["lost"], syn["resolved"], syn["resolved_rate"]) == (2, 8, 0, 4, 0.5)
    assert set(s["by_repo"]) == {"r1", "r2"} and s["by_repo"]["r2"]["resolved_rate"] == 0.5

    assert s["end_reasons"] == {"submitted": 6, "no_tool_call": 4, "turn_limit": 1}
    assert s["lost_reasons"] == {"env reset": 1}, "a lost episode is counted by its last attempt's cause"
    assert s["retried_episodes"] == 2
    assert s["turns"]["max"] == 3 and s["turns"]["mean"] == pytest.approx((7 * 3 + 4 * 1) / 11), "lost: no turns"
    # every attempt: 11 scored episodes (100 + 10 each), the lost episode's 3 attempts, C's lost attempt
    assert s["tokens"] == {"prompt": 1100 + 400 + 30, "completion": 110 + 40 + 3}
    assert s["cost_usd"] == pytest.approx(0.01 + 0.004 + 0.002)
    assert s["lost_attempts"] == {"attempts": 4, "turns": 5, "prompt_tokens": 430, "completion_tokens": 43,
                                  "cost_usd": pytest.approx(0.006)}
    assert s["samples_per_task"] == 4 and s["wall_s"] == 60.0

    rates = task_pass_rates(constructed())
    assert rates["A"] == {"n": 3, "c": 2, "lost": 1, "source": "swe-bench", "repo": "r1", "rate": pytest.approx(2 / 3)}
    assert rates["B"]["rate"] == 0.0 and rates["C"]["rate"] == 1.0


def test_summarize_every_sample_lost_and_ks():
    lost = [_r("X", s, "lost", "swe-bench", "r", lost_reasons=["env: down"]) for s in range(2)]
    s = summarize(lost, samples=2)
    assert s["overall"]["resolved_rate"] is None and s["overall"]["lost"] == 2 and s["overall"]["scored"] == 0
    assert s["overall"]["ci95"] == [0.0, 1.0] and s["overall"]["pass@1"] is None
    assert s["pass_at_k"] == {"pass@1": {"value": None, "tasks": 0}, "pass@2": {"value": None, "tasks": 0}}
    assert task_pass_rates(lost)["X"]["rate"] is None
    assert list(summarize(constructed(), samples=3)["pass_at_k"]) == ["pass@1", "pass@2", "pass@3"]
    assert list(summarize(constructed(), samples=1)["pass_at_k"]) == ["pass@1"]


def test_the_report_says_what_the_trainers_default_monitor_policy_would_do():
    """Flags leave the resolved rate alone (the grader's); the report counts the resolved episodes the
    trainer's default policy would score 0 (a zero reason), and the ones it would mask (none by default)."""
    from types import SimpleNamespace

    from contract import DEFAULT_SUSPICION_POLICY, SuspicionPolicy
    from evaluation.report import markdown

    zero = [r for r, p in DEFAULT_SUSPICION_POLICY.items() if p is SuspicionPolicy.zero and r != "reward_hacking"][0]
    keep = [r for r, p in DEFAULT_SUSPICION_POLICY.items() if p is SuspicionPolicy.keep][0]
    results = [_r("A", 0, "resolved", "swe-bench", "r1", suspicious=[zero]),
               _r("A", 1, "resolved", "swe-bench", "r1", suspicious=[keep]),
               _r("A", 2, "unresolved", "swe-bench", "r1", suspicious=[zero]),  # scored 0 already
               _r("B", 0, "unresolved", "swe-bench", "r1", reward_hacking=True),
               _r("B", 1, "resolved", "swe-bench", "r1")]
    s = summarize(results, samples=3)
    assert s["overall"]["resolved"] == 3 and s["overall"]["resolved_rate"] == pytest.approx(3 / 5)
    assert (s["suspicious"], s["reward_hacking"]) == (3, 1)
    assert (s["policy_zeroed"], s["policy_zeroed_reasons"], s["policy_masked"]) == (1, {zero: 1}, 0)
    report = markdown(SimpleNamespace(model_name="m", describe={}), s)
    assert (f"- under the trainer's default monitor policy (env.suspicion_policy): 1 resolved episode(s) would score 0 "
            f"({zero} 1), 0 would be masked; the resolved rate is the grader's\n") in report
    assert "**Resolved 3 / 5 episodes = 60.0%**" in report


def test_the_pass_at_k_plot_labels_k_in_plain_numbers(tmp_path, monkeypatch):
    """report.png's pass@k axis reads 1, 2, 4 (a log-2 axis labelled 2^0, 2^1, 2^2 read as exponents)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from evaluation.report import plot

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)  # keep the figure to read its axes
    summary = {"by_source": {"a": {"resolved_rate": 0.5, "ci95": [0.2, 0.8]}},
               "overall": {"resolved_rate": 0.5, "ci95": [0.2, 0.8]}, "samples_per_task": 4,
               "pass_at_k": {"pass@1": {"value": 0.5}, "pass@2": {"value": 0.6}, "pass@4": {"value": 0.7}}}
    assert plot(tmp_path / "report.png", summary) and (tmp_path / "report.png").stat().st_size > 0
    right = figures[0].axes[1]
    assert [t.get_text() for t in right.get_xticklabels()] == ["1", "2", "4"]
    assert not right.get_xticklabels(minor=True) or all(not t.get_text() for t in right.get_xticklabels(minor=True))
