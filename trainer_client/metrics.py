"""Per-step metrics: a TrainerCallback writing each log record to stdout and JSONL, and a
PNG plot of the curves at the end (TRL's `report_to` integrations get the same records)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

__all__ = ["MetricsCallback", "plot_metrics", "quiet_progress"]

#: what the stdout line shows first (when present), then loss channels and error kinds
HEADLINE = ("eval/resolved_rate", "reward", "reward_std", "env/pass_rate", "env/reward_hacking", "env/suspicious_submissions", "loss",
            "tools/call_frequency", "tools/failure_frequency", "env/error_sites_per_rollout", "env/infra_failures")


def _g(record: dict[str, Any], key: str) -> str:
    return f"{record[key]:.4g}" if key in record else "-"


def channel_lines(record: dict[str, Any]) -> list[str]:
    """Each loss channel with its inputs, one line (and the replay loop's state, when it runs)."""
    if "channels/total" not in record:
        return []
    lines = [f"  channels: grpo={_g(record, 'channels/grpo')}"
             f" | hints (alpha={_g(record, 'channels/alpha')}): loss={_g(record, 'channels/sdpo')}"
             f" error_sites={_g(record, 'channels/error_sites')} hint_tokens={_g(record, 'channels/sdpo_tokens')}"
             f" | replay (beta={_g(record, 'channels/beta')}): loss={_g(record, 'channels/replay')}"
             f" pairs={_g(record, 'channels/pairs')}"
             + (f" buffer={_g(record, 'channels/pair_buffer')}" if "channels/pair_buffer" in record else "")
             + f" | total={_g(record, 'channels/total')}"]
    if "replay/spent_usd" in record:
        lines.append(f"  replay loop: episodes={_g(record, 'replay/episodes_replayed')}"
                     f" states={_g(record, 'replay/states_queried')} teacher_calls={_g(record, 'replay/teacher_calls')}"
                     f" pairs_mined={_g(record, 'replay/pairs_mined')} pending={_g(record, 'replay/pending_episodes')}"
                     f" spent=${record['replay/spent_usd']:.4f}")
    return lines


class MetricsCallback(TrainerCallback):
    """Append every `on_log` record (with the step) to a JSONL file and print a short line."""

    def __init__(self, path: str | Path, echo: bool = True):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.echo = echo

    def on_log(self, args, state, control, logs: dict[str, Any] | None = None, **kwargs):
        if not logs or not state.is_world_process_zero:
            return
        record = {"step": state.global_step, **{k: v for k, v in logs.items() if _is_number(v)}}
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        if self.echo:
            keys = [k for k in HEADLINE if k in record]
            keys += sorted(k for k in record if k.startswith("env/errors/"))
            lines = channel_lines(record)
            if not keys and not lines:  # e.g. the end-of-training summary: nothing a step line shows
                return
            head = f"[step {state.global_step}] " + " ".join(f"{k}={record[k]:.4g}" for k in keys)
            print("\n".join([head, *lines]), flush=True)


def quiet_progress(trainer: Any) -> None:
    """Keep the progress bar but drop its dump of every log dict (MetricsCallback prints the step line)."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    class _QuietProgress(ProgressCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            return None

    for cls in (ProgressCallback, PrinterCallback):
        if any(isinstance(cb, cls) for cb in trainer.callback_handler.callbacks):
            trainer.remove_callback(cls)
    if not trainer.args.disable_tqdm:
        trainer.add_callback(_QuietProgress)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def plot_metrics(jsonl: str | Path, png: str | Path, keys: tuple[str, ...] | None = None) -> Path | None:
    """Plot reward, loss, tool and channel curves from a metrics JSONL; None if nothing to plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(l) for l in Path(jsonl).read_text().splitlines() if l.strip()] if Path(jsonl).exists() else []
    rows = [r for r in rows if "reward" in r or "loss" in r or "eval/resolved_rate" in r]
    if not rows:
        return None
    available = sorted({k for r in rows for k in r if k != "step"})
    wanted = keys or (tuple(k for k in HEADLINE if k in available)  # the headline first, in its order
                      + tuple(k for k in available if k.startswith(("channels/", "env/errors/"))))
    wanted = [k for k in wanted if k in available]
    if not wanted:
        return None
    ncols = min(3, len(wanted))
    nrows = math.ceil(len(wanted) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 2.6 * nrows), squeeze=False, sharex=True)
    flat = list(axes.flat)
    for ax, key in zip(flat, wanted):
        pts = [(r["step"], r[key]) for r in rows if key in r]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3)
        ax.set_title(key, fontsize=9)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in flat[len(wanted):]:
        ax.set_visible(False)
    for ax in flat[len(wanted) - ncols:len(wanted)]:  # the lowest plot of each column
        ax.set_xlabel("step", fontsize=8)
        ax.xaxis.set_tick_params(labelbottom=True)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return Path(png)
