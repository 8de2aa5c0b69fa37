"""An evaluation's report: report.json (every number), report.md (for people), report.png (a plot)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from .agent import EpisodeResult
from .stats import task_pass_rates

__all__ = ["markdown", "plot", "write_report"]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _ci(row: dict[str, Any]) -> str:
    low, high = row["ci95"]
    return f"[{100 * low:.1f}, {100 * high:.1f}]"


def _num(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _rate_table(title: str, rows: dict[str, dict[str, Any]]) -> list[str]:
    lines = [f"### {title}", "", "| | tasks | episodes | resolved | rate | 95% CI | pass@1 | lost |",
             "|---|---:|---:|---:|---:|---|---:|---:|"]
    for name, row in rows.items():
        lines.append(f"| {name} | {row['tasks']} | {row['scored']} | {row['resolved']} | {_pct(row['resolved_rate'])} "
                     f"| {_ci(row)} | {_pct(row['pass@1'])} | {row['lost']} |")
    return lines + [""]


def markdown(config: Any, summary: dict[str, Any], results: list[EpisodeResult] | None = None) -> str:
    """The report for people: the headline, pass@k, breakdowns, each task (with ``results``), behaviour, cost."""
    o = summary["overall"]
    few = f" (only {o['tasks']} tasks: read the interval, not the point)" if o["tasks"] < 30 else ""
    lines = [f"# Evaluation: {config.model_name}", "",
             f"**Resolved {o['resolved']} / {o['scored']} episodes = {_pct(o['resolved_rate'])}**, 95% Wilson "
             f"interval {_ci(o)}{few}; {o['tasks']} tasks x {summary['samples_per_task']} samples; "
             f"{o['lost']} episodes lost to infrastructure (not scored), {summary['retried_episodes']} retried.", ""]
    if config.describe:
        lines += ["| setting | value |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in config.describe.items()]
        lim = config.limits
        lines += [f"| limits | {lim.max_turns} turns, {lim.max_episode_s:g} s, "
                  f"context {lim.max_context_tokens or 'the endpoint'}, tool output {lim.max_output_chars} chars |", ""]
    lines += ["| metric | value | tasks |", "|---|---:|---:|"]
    for name, row in summary["pass_at_k"].items():
        lines.append(f"| {name} | {_pct(row['value'])} | {row['tasks']} |")
    lines.append("")
    lines += _rate_table("By task source", summary["by_source"])
    lines += _rate_table("By repository", summary["by_repo"])
    if results:
        lines += _task_table(results)
    t, c, p, w = summary["turns"], summary["completion_tokens"], summary["prompt_tokens"], summary["episode_wall_s"]
    lines += ["### Episodes", "", "| | mean | median | p90 | max |", "|---|---:|---:|---:|---:|",
              f"| turns | {_num(t['mean'])} | {_num(t['median'])} | {_num(t['p90'], 0)} | {_num(t['max'], 0)} |",
              f"| completion tokens | {_num(c['mean'], 0)} | {_num(c['median'], 0)} | {_num(c['p90'], 0)} | "
              f"{_num(c['max'], 0)} |",
              f"| prompt tokens (sum over turns) | {_num(p['mean'], 0)} | {_num(p['median'], 0)} | {_num(p['p90'], 0)} "
              f"| {_num(p['max'], 0)} |",
              f"| wall seconds | {_num(w['mean'])} | {_num(w['median'])} | {_num(w['p90'])} | {_num(w['max'])} |", ""]
    ends = ", ".join(f"{k} {v}" for k, v in summary["end_reasons"].items()) or "-"
    errors = ", ".join(f"{k} {v}" for k, v in summary["error_kinds"].items()) or "none"
    lost = ", ".join(f"{k} {v}" for k, v in summary["lost_reasons"].items()) or "none"
    wall = summary["wall_s"]
    share = summary["policy_share"]
    lines += [f"- how episodes ended: {ends}", f"- failed tool calls by error_kind: {errors}",
              f"- reward_hacking (grading detected tampering, reward 0): {summary['reward_hacking']}; "
              f"suspicious (monitor flags, reward unchanged): {summary['suspicious']}"
              + (f" ({', '.join(f'{k} {v}' for k, v in summary['suspicious_reasons'].items())})"
                 if summary["suspicious_reasons"] else ""),
              _policy_line(summary),
              f"- lost episodes by cause: {lost}",
              _usage_line(summary),
              f"- graded diff unknown (scored, no patch kept): {summary['graded_diff_unknown']}",
              *_predictions_lines(summary.get("predictions")),
              f"- wall time {'-' if wall is None else f'{wall:.0f} s'}; time in episodes: model "
              f"{_pct(share)}, env {_pct(summary['env_share'])}", ""]
    return "\n".join(lines)


def _task_table(results: list[EpisodeResult]) -> list[str]:
    """One row per task: its source, its samples resolved of those scored, those lost, how its episodes
    ended, and its failed tool calls by error_kind (which tasks failed, and how, without results.jsonl)."""
    lines = ["### By task", "", "| task | source | resolved | lost | ended | failed tool calls |",
             "|---|---|---:|---:|---|---|"]
    rows = task_pass_rates(results)
    ends: dict[str, Counter] = {}
    errors: dict[str, Counter] = {}
    for r in results:
        if r.status != "lost" and r.end_reason:
            ends.setdefault(r.instance_id, Counter())[r.end_reason] += 1
        errors.setdefault(r.instance_id, Counter()).update(r.error_kinds)

    def counts(c: Counter | None) -> str:
        return ", ".join(f"{k} {v}" for k, v in c.most_common()) if c else "-"
    for iid, row in rows.items():
        lines.append(f"| {iid} | {row['source'] or '-'} | {row['c']}/{row['n']} | {row['lost']} | "
                     f"{counts(ends.get(iid))} | {counts(errors.get(iid))} |")
    return lines + [""]


def _policy_line(summary: dict[str, Any]) -> str:
    """What the trainer's default monitor policy would do with these episodes (the rates are the grader's)."""
    reasons = summary["policy_zeroed_reasons"]
    return (f"- under the trainer's default monitor policy (env.suspicion_policy): {summary['policy_zeroed']} resolved "
            f"episode(s) would score 0" + (f" ({', '.join(f'{k} {v}' for k, v in reasons.items())})" if reasons else "")
            + f", {summary['policy_masked']} would be masked; the resolved rate is the grader's")


def _usage_line(summary: dict[str, Any]) -> str:
    t, lost = summary["tokens"], summary["lost_attempts"]
    share = (f"{lost['attempts']} lost attempts (retried or lost episodes, never scored): "
             f"{lost['prompt_tokens']} prompt + {lost['completion_tokens']} completion tokens, ${lost['cost_usd']:.4f}")
    return (f"- tokens and cost of every attempt (scored, retried and lost): {t['prompt']} prompt, {t['completion']} "
            f"completion; cost ${summary['cost_usd']:.4f}; of which {share}")


def _predictions_lines(predictions: dict[str, Any] | None) -> list[str]:
    if not predictions or not predictions["tasks"]:
        return []
    lines = [f"- SWE-bench predictions: {predictions['written']} of {predictions['tasks']} tasks"]
    lines += [f"  - no prediction for {iid}: {why}" for iid, why in predictions["without"].items()]
    return lines


def plot(path: Path, summary: dict[str, Any]) -> bool:
    """report.png: resolved rate per task source with its interval, and pass@k; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    rows = {**summary["by_source"], "all": summary["overall"]}
    names = [n for n, r in rows.items() if r["resolved_rate"] is not None]
    rates = [100 * rows[n]["resolved_rate"] for n in names]
    # clamped at 0: a Wilson bound of 1.0 computed as 0.9999999999999999 must not stop the plot
    errs = [[max(0.0, r - 100 * rows[n]["ci95"][0]) for n, r in zip(names, rates)],
            [max(0.0, 100 * rows[n]["ci95"][1] - r) for n, r in zip(names, rates)]]
    left.bar(names, rates, yerr=errs, capsize=4, color=["#4c72b0"] * (len(names) - 1) + ["#dd8452"])
    left.set_ylim(0, 100)
    left.set_ylabel("resolved (%), 95% Wilson interval")
    left.set_title("resolved rate by task source")
    ks = [(int(k.split("@")[1]), v["value"]) for k, v in summary["pass_at_k"].items() if v["value"] is not None]
    if ks:
        right.plot([k for k, _ in ks], [100 * v for _, v in ks], marker="o")
        right.set_xscale("log", base=2)
        right.set_xticks([k for k, _ in ks], [str(k) for k, _ in ks])  # 1, 2, 4 (not 2^0, 2^1, 2^2)
        right.minorticks_off()
    right.set_ylim(0, 100)
    right.set_xlabel("k")
    right.set_ylabel("pass@k (%)")
    right.set_title(f"pass@k ({summary['samples_per_task']} samples per task)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def write_report(out: Path, config: Any, summary: dict[str, Any], results: list[EpisodeResult]) -> None:
    """report.json, report.md and (with matplotlib) report.png in `out`."""
    data = {"model_name": config.model_name, "describe": config.describe, "limits": config.limits.model_dump(),
            "env_urls_count": len(config.env_urls), "summary": summary, "tasks": task_pass_rates(results)}
    (out / "report.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    (out / "report.md").write_text(markdown(config, summary, results), encoding="utf-8")
    plot(out / "report.png", summary)
