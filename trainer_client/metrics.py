"""Per-step metrics: a TrainerCallback writing each log record to JSONL and a compact table row to
the console, and a PNG plot of the curves at the end (TRL's `report_to` integrations get the same
records).

metrics.jsonl holds one record per log event, every numeric metric of it:
- step records: `{"step": N, "reward": ..., "channels/grpo": ..., ...}` (also the held-out
  evaluation's `eval/*` records, at the step they evaluate);
- the run summary TRL logs once at the end (train_runtime, train_loss, ...):
  `{"kind": "summary", "global_step": N, ...}`, with no `step`, so a reader keyed on `step` sees
  each step once. `step_records` reads the step records of a file.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

__all__ = ["MetricsCallback", "channel_curves", "columns", "is_summary", "legend", "plot_metrics", "quiet_progress",
           "step_records", "table_header", "table_row"]

#: what the plot shows first (when present), in this order, then error kinds
HEADLINE = ("eval/resolved_rate", "reward", "reward_std", "env/pass_rate", "env/reward_hacking", "env/suspicious_submissions", "loss",
            "tools/call_frequency", "tools/failure_frequency", "env/error_sites_per_rollout", "env/infra_failures")

#: keys of TRL's end-of-training record: a record with one of them is the run summary
SUMMARY_KEYS = ("train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss", "total_flos")

#: the console table: (header, metrics key, width, format); a column shows when the first step record
#: has its key ("sec": wall seconds since the previous step record, measured here). The loss channels'
#: columns (each one's loss and its input count) come from the registry: `columns()`.
HEAD_COLUMNS: tuple[tuple[str, str, int, str], ...] = (
    ("reward", "reward", 7, ".3f"),
    ("pass", "env/pass_rate", 5, ".2f"),
    ("hacked", "env/reward_hacking", 6, "g"),
    ("lost", "env/infra_failures", 4, "g"),
    ("grpo", "channels/grpo", 8, ".4f"),
)
TAIL_COLUMNS: tuple[tuple[str, str, int, str], ...] = (
    ("mined", "replay/pairs_mined", 5, "g"),
    ("usd", "replay/spent_usd", 7, ".4f"),
    ("total", "channels/total", 8, ".4f"),
    ("loss", "loss", 8, ".4f"),
    ("sec", "sec", 6, ".1f"),
)
#: what each column means, printed once under the header (the channels' lines: `legend()`)
LEGEND = {
    "pass": "pass: share resolved",
    "hacked": "hacked: rollouts flagged as reward hacking",
    "lost": "lost: rollouts lost to env failures (masked out)",
    "mined": "mined: pairs the replay loop mined so far",
    "usd": "usd: its teachers' spend so far",
    "sec": "sec: wall seconds",
}


def columns() -> tuple[tuple[str, str, int, str], ...]:
    """Every column of the step table, the loss channels' from the registry."""
    from trainer_client.losses.channels import channel_class, channel_names, metric_key

    per_channel = []
    for name in channel_names():
        c = channel_class(name)
        per_channel += [(name, metric_key(name), 8, ".4f"), (c.column, metric_key(name, c.counts[0]), 5, "g")]
    return HEAD_COLUMNS + tuple(per_channel) + TAIL_COLUMNS


def legend() -> dict[str, str]:
    """Each column's legend line, keyed by the column's header."""
    from trainer_client.losses.channels import channel_class, channel_names, total_formula

    names = channel_names()
    numbers = "/".join(str(channel_class(n).number) for n in names)
    out = dict(LEGEND)
    out["grpo"] = f"grpo/{'/'.join(names)}: loss of channel 1/{numbers}"
    for name in names:
        out[channel_class(name).column] = channel_class(name).column_legend
    out["total"] = total_formula()
    return out


def is_summary(record: dict[str, Any]) -> bool:
    """The run summary (TRL's end-of-training record), old files (with a `step`) included."""
    return record.get("kind") == "summary" or any(k in record for k in SUMMARY_KEYS)


def step_records(jsonl: str | Path) -> list[dict[str, Any]]:
    """The step records of a metrics JSONL (no run summary; lines cut by a killed run skipped)."""
    path = Path(jsonl)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and "step" in record and not is_summary(record):
            rows.append(record)
    return rows


def _columns(record: dict[str, Any]) -> list[tuple[str, str, int, str]]:
    has_channels = "channels/total" in record
    live = "channels/pairs/buffer" in record  # the replay loop runs: its counters come after its first round
    return [c for c in columns() if (c[1] in record or c[1] == "sec" or (live and c[1].startswith("replay/")))
            and not (c[0] == "loss" and has_channels)]  # with channels, `total` is the loss


def table_header(record: dict[str, Any]) -> list[str]:
    """The table's header line and its legend lines, for the columns `record` has."""
    cols = _columns(record)
    head = f"{'step':>5} " + " ".join(f"{name:>{width}}" for name, _, width, _ in cols)
    lines, line = [], ""
    texts = legend()
    for part in (texts[name] for name, *_ in cols if name in texts):
        if line and 6 + len(line) + len(part) + 2 > 100:  # 6: the indent every legend line gets
            lines.append(line)
            line = ""
        line = f"{line}; {part}" if line else part
    return [head] + [f"      {text}" for text in lines + ([line] if line else [])]


def table_row(record: dict[str, Any], columns_of: dict[str, Any] | None = None) -> str:
    """One table row: `record`'s values under the columns of `columns_of` (default: its own); '-' for
    a value the record lacks."""
    cells = []
    for _, key, width, fmt in _columns(columns_of or record):
        value = record.get(key)
        cells.append(f"{value:>{width}{fmt}}" if isinstance(value, (int, float)) else f"{'-':>{width}}")
    return f"{record.get('step', '-'):>5} " + " ".join(cells)


def _write(text: str) -> None:
    """A console line above the progress bar (tqdm clears the bar, writes, redraws it)."""
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with transformers
        print(text, flush=True)
        return
    tqdm.write(text)


class MetricsCallback(TrainerCallback):
    """Append every `on_log` record to a JSONL file (step records with their step, the run summary
    as `"kind": "summary"`) and print a table row per step. `fresh`: start the file empty (a new run
    in an output directory used before; a resumed run appends)."""

    def __init__(self, path: str | Path, echo: bool = True, fresh: bool = False):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if fresh:
            self.path.write_text("")
        self.echo = echo
        self._first: dict[str, Any] | None = None  # the record the table's columns come from
        self._last_t: float | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self._last_t = time.monotonic()

    def on_log(self, args, state, control, logs: dict[str, Any] | None = None, **kwargs):
        if not logs or not state.is_world_process_zero:
            return
        numbers = {k: v for k, v in logs.items() if _is_number(v)}
        if is_summary(numbers):
            record = {"kind": "summary", "global_step": state.global_step, **numbers}
        else:
            record = {"step": state.global_step, **numbers}
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        if not self.echo or "reward" not in record:  # the summary, an evaluation-only record: no row
            return
        now = time.monotonic()
        shown = dict(record)
        if self._last_t is not None:
            shown["sec"] = now - self._last_t
        self._last_t = now
        lines = []
        if self._first is None:
            self._first = record
            lines += table_header(record)
        lines.append(table_row(shown, self._first))
        _write("\n".join(lines))


def quiet_progress(trainer: Any, terminal: bool | None = None) -> None:
    """Keep the progress bar but drop its dump of every log dict (MetricsCallback prints the table).

    The bar is kept only on a terminal (``terminal``, default: whether stderr is one): in a log
    file or a pipe its carriage-return redraws glue to the table's rows, which are the progress there."""
    import sys

    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    class _QuietProgress(ProgressCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            return None

    for cls in (ProgressCallback, PrinterCallback):
        if any(isinstance(cb, cls) for cb in trainer.callback_handler.callbacks):
            trainer.remove_callback(cls)
    if terminal is None:
        terminal = sys.stderr.isatty()
    if not trainer.args.disable_tqdm and terminal:
        trainer.add_callback(_QuietProgress)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def channel_curves() -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    """The plot's two channel panels, from the registry: the losses (GRPO, each channel, the total) and
    their inputs (each channel's input count; the pairs the replay loop mined), as (metrics key, label)."""
    from trainer_client.losses.channels import channel_class, channel_names, metric_key

    names = channel_names()
    losses = (("channels/grpo", "1 grpo"), *((metric_key(n), f"{channel_class(n).number} {n}") for n in names),
              ("channels/total", "total"))
    inputs = (*((metric_key(n, channel_class(n).counts[0]), f"{channel_class(n).column} ({n})") for n in names),
              ("replay/pairs_mined", "pairs mined so far"))
    return losses, inputs


def plot_metrics(jsonl: str | Path, png: str | Path, keys: tuple[str, ...] | None = None) -> Path | None:
    """Plot the training curves of a metrics JSONL; None if nothing to plot.

    The three loss channels share one panel and their inputs (error sites, pairs) another; then the
    headline curves and error kinds, one panel each (`loss` is the channels' total). Only measured
    values are drawn: a step without a metric is a gap in its curve, never a line across. A metric
    with the same value at every step it was measured (two or more) gets no panel; the figure's
    footnote lists it with its value. `keys`: exactly these curves, one panel each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    by_step: dict[int, dict[str, Any]] = {}
    for r in step_records(jsonl):  # records of one step (training, evaluation) merged
        if "reward" in r or "loss" in r or "eval/resolved_rate" in r:
            by_step.setdefault(int(r["step"]), {}).update(r)
    if not by_step:
        return None
    steps = sorted(by_step)
    rows = [by_step[s] for s in steps]
    available = sorted({k for r in rows for k in r if k != "step" and _is_number(r[k])})

    def series(key: str) -> list[float]:
        return [float(r[key]) if _is_number(r.get(key)) else math.nan for r in rows]

    def constant(key: str) -> bool:  # measured at two steps or more, the same value at each
        values = [v for v in series(key) if not math.isnan(v)]
        return len(values) > 1 and len(set(values)) == 1

    channel_losses, channel_inputs = channel_curves()
    groups = [("loss channels", [(k, label) for k, label in channel_losses if k in available]),
              ("channel inputs", [(k, label) for k, label in channel_inputs if k in available and not constant(k)])]
    groups = [(title, curves) for title, curves in groups if curves and not keys]
    grouped = {k for _, curves in groups for k, _ in curves} | {k for k, _ in channel_losses + channel_inputs}
    if "channels/total" in available:
        grouped.add("loss")  # the same value as channels/total, drawn in the channels' panel
    wanted = list(keys or (tuple(k for k in HEADLINE if k in available)  # the headline first, in its order
                           + tuple(k for k in available if k.startswith(("channels/", "env/errors/")))))
    wanted = [k for k in dict.fromkeys(wanted) if k in available and (keys or k not in grouped)]
    constants = [k for k in wanted if constant(k)] if not keys else []
    wanted = [k for k in wanted if k not in constants]
    panels = len(groups) + len(wanted)
    if not panels:
        return None
    ncols = min(3, panels)
    nrows = math.ceil(panels / ncols)
    footnote = ("the same value at every step it was measured (no panel): "
                + ", ".join(f"{k}={next(v for v in series(k) if not math.isnan(v)):g}" for k in constants)
                if constants else "")
    height = 2.6 * nrows + (0.4 if footnote else 0)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, height), squeeze=False, sharex=True)
    flat = list(axes.flat)
    for ax, (title, curves) in zip(flat, groups):
        for i, (key, label) in enumerate(curves):  # a curve equal to another (grpo = total) stays visible
            ax.plot(steps, series(key), marker="os^D"[i % 4], ms=5 - i % 3, linestyle=("-", "--", ":", "-.")[i % 4],
                    label=label)
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
    for ax, key in zip(flat[len(groups):], wanted):
        ax.plot(steps, series(key), marker="o", ms=3)
        ax.set_title(key, fontsize=9)
    for ax in flat[:panels]:
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    for ax in flat[panels:]:
        ax.set_visible(False)
    for ax in flat[max(0, panels - ncols):panels]:  # the lowest plot of each column
        ax.set_xlabel("step", fontsize=8)
        ax.xaxis.set_tick_params(labelbottom=True)
    if footnote:
        fig.text(0.01, 0.01, footnote, fontsize=7, wrap=True)
        fig.tight_layout(rect=(0, 0.4 / height, 1, 1))
    else:
        fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return Path(png)
