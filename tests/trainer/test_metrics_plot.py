"""trainer_client.metrics: metrics.jsonl (step records and the run summary told apart), the per-step
table, and plot_metrics (a grid: the three channels together, only measured values drawn)."""

from __future__ import annotations

import json
from types import SimpleNamespace


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _state(step):
    return SimpleNamespace(global_step=step, is_world_process_zero=True)


def test_plot_is_a_grid_of_the_headline_and_channel_curves(tmp_path):
    from PIL import Image

    from trainer_client.metrics import plot_metrics

    keys = ["reward", "reward_std", "loss", "tools/call_frequency", "channels/grpo", "channels/hints",
            "env/errors/timeout"]
    rows = [{"step": s, **{k: float(s * (i + 1)) for i, k in enumerate(keys)}, "learning_rate": 1e-6}
            for s in range(1, 6)]
    _write(tmp_path / "m.jsonl", rows)
    png = plot_metrics(tmp_path / "m.jsonl", tmp_path / "m.png")
    assert png is not None and png.exists()
    width, height = Image.open(png).size
    assert width > height, (width, height)  # 1 channels panel + 5 curves in 3 columns x 2 rows, not one column
    assert (width, height) == (1260, 520)


def _axes(monkeypatch):
    """plot_metrics' axes: {title: [(x, y) of each line]} plus the figure texts, captured at savefig."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    seen: dict = {}
    original = Figure.savefig

    def savefig(fig, *args, **kwargs):
        for ax in fig.axes:
            if ax.get_visible():
                seen[ax.get_title()] = [(list(l.get_xdata()), list(l.get_ydata())) for l in ax.get_lines()]
                seen.setdefault("_styles", {})[ax.get_title()] = [(l.get_linestyle(), l.get_marker())
                                                                  for l in ax.get_lines()]
                seen.setdefault("_xticks", {})[ax.get_title()] = list(ax.get_xticks())
        seen["_texts"] = [t.get_text() for t in fig.texts]
        return original(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return seen


def test_plot_draws_only_measured_values_and_the_channels_together(tmp_path, monkeypatch):
    import math

    from trainer_client.metrics import plot_metrics

    seen = _axes(monkeypatch)
    rows = [{"step": s, "reward": s / 4, "loss": 0.1 * s, "channels/grpo": 0.1 * s, "channels/hints": 0.0,
             "channels/pairs": 0.5 if s > 1 else 0.0, "channels/total": 0.1 * s, "channels/hints/weight": 0.1,
             "env/infra_failures": 0.0, "channels/hints/sites": float(s % 2), "channels/pairs/used": float(s > 1)}
            for s in range(1, 5)]
    rows[1]["eval/resolved_rate"] = 0.0  # measured at steps 0 and 2 only
    rows.insert(0, {"step": 0, "eval/resolved_rate": 0.5})
    del rows[3]["reward"]  # step 3 has no reward
    rows.append({"kind": "summary", "global_step": 4, "train_runtime": 9.0, "train_loss": 0.2})
    _write(tmp_path / "m.jsonl", rows)
    assert plot_metrics(tmp_path / "m.jsonl", tmp_path / "m.png") is not None

    # the three channels (and their total) in one panel, their inputs in the next; each curve its own line
    # style and marker (grpo equals total here: neither hides the other)
    assert len(seen["loss channels"]) == 4 and len(seen["channel inputs"]) == 2
    assert len(set(seen["_styles"]["loss channels"])) == 4, seen["_styles"]
    # steps are whole numbers: so are the ticks of every panel
    assert all(float(t).is_integer() for ticks in seen["_xticks"].values() for t in ticks), seen["_xticks"]
    assert "loss" not in seen and "channels/grpo" not in seen  # drawn in the channels' panel
    # a missing value is a gap (NaN), never a line across; the summary draws nothing
    xs, ys = seen["reward"][0]
    assert xs == [0, 1, 2, 3, 4] and math.isnan(ys[0]) and math.isnan(ys[3]) and ys[4] == 1.0
    xs, ys = seen["eval/resolved_rate"][0]
    assert ys[0] == 0.5 and ys[2] == 0.0 and all(math.isnan(y) for y in (ys[1], ys[3], ys[4]))
    # constant metrics get no panel: the footnote names them with their value
    assert "env/infra_failures" not in seen and "channels/hints/weight" not in seen
    assert any("env/infra_failures=0" in t and "channels/hints/weight=0.1" in t for t in seen["_texts"]), seen["_texts"]


def test_plot_with_nothing_to_plot_returns_none(tmp_path):
    from trainer_client.metrics import plot_metrics

    assert plot_metrics(tmp_path / "missing.jsonl", tmp_path / "a.png") is None
    _write(tmp_path / "m.jsonl", [{"step": 1, "learning_rate": 1e-6}])
    assert plot_metrics(tmp_path / "m.jsonl", tmp_path / "b.png") is None
    assert not (tmp_path / "a.png").exists() and not (tmp_path / "b.png").exists()


def test_the_run_summary_is_a_record_of_its_own_kind_without_a_step(tmp_path, capsys):
    """Per-step readers see each step once: TRL's end-of-training record is `"kind": "summary"`, its
    step in `global_step`; `step_records` and ablate's finished-check read both forms."""
    from trainer_client.ablate import _finished
    from trainer_client.metrics import MetricsCallback, is_summary, step_records

    path = tmp_path / "m.jsonl"
    cb = MetricsCallback(path)
    cb.on_train_begin(None, _state(0), None)
    cb.on_log(None, _state(1), None, logs={"reward": 0.5, "loss": 0.1, "note": "text is not kept"})
    cb.on_log(None, _state(1), None, logs={"train_runtime": 3.0, "train_loss": 0.1, "total_flos": 0.0})
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert records == [{"step": 1, "reward": 0.5, "loss": 0.1},
                       {"kind": "summary", "global_step": 1, "train_runtime": 3.0, "train_loss": 0.1,
                        "total_flos": 0.0}]
    assert [r["step"] for r in step_records(path)] == [1] and is_summary(records[1])
    assert _finished(records, 1) and not _finished(records, 2)
    assert _finished([{"step": 2, "train_runtime": 1.0}], 2)  # an older file's summary
    MetricsCallback(path, echo=False)  # a resumed run appends ...
    assert len(path.read_text().splitlines()) == 2
    MetricsCallback(path, echo=False, fresh=True)  # ... a new run in the same directory starts afresh
    assert path.read_text() == ""
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["step", "reward", "loss", "sec"] and out[-1].split()[:3] == ["1", "0.500", "0.1000"]


def test_the_step_table_has_a_column_per_channel_and_input(tmp_path, capsys):
    from trainer_client.metrics import MetricsCallback

    cb = MetricsCallback(tmp_path / "m.jsonl")
    cb.on_train_begin(None, _state(0), None)
    step = {"loss": 0.4, "reward": 0.75, "env/pass_rate": 0.5, "env/reward_hacking": 0.0, "channels/grpo": 0.25,
            "channels/hints": 0.125, "channels/hints/sites": 2.0, "channels/pairs": 0.5, "channels/pairs/used": 1.0,
            "replay/pairs_mined": 3.0, "channels/total": 0.4, "env/errors/file_not_found": 0.5}
    cb.on_log(None, _state(1), None, logs=step)
    cb.on_log(None, _state(2), None, logs={**step, "reward": 1.0})
    cb.on_log(None, _state(2), None, logs={"eval/resolved_rate": 0.5})  # no reward: no row
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["step", "reward", "pass", "hacked", "grpo", "hints", "sites", "pairs", "used",
                                "mined", "total", "sec"]  # `loss` is the channels' total: no column of its own
    rows = [line.split() for line in lines if line.split()[0] in ("1", "2")]
    assert [r[:11] for r in rows] == [
        ["1", "0.750", "0.50", "0", "0.2500", "0.1250", "2", "0.5000", "1", "3", "0.4000"],
        ["2", "1.000", "0.50", "0", "0.2500", "0.1250", "2", "0.5000", "1", "3", "0.4000"]]
    assert all(float(r[11]) >= 0 for r in rows)
    assert all(len(line) <= 100 for line in lines)


def test_the_progress_bar_is_kept_on_a_terminal_only():
    """On a terminal the bar stays (without its dump of every log dict: the table prints the step);
    in a log file or a pipe its carriage-return redraws would glue to the table rows, so it goes."""
    from types import SimpleNamespace

    from transformers.trainer_callback import CallbackHandler, PrinterCallback, ProgressCallback

    from trainer_client.metrics import quiet_progress

    def trainer():  # what quiet_progress uses of a Trainer: its callback handler and args
        handler = CallbackHandler([ProgressCallback, PrinterCallback], None, None, None, None)
        return SimpleNamespace(callback_handler=handler, args=SimpleNamespace(disable_tqdm=False),
                               add_callback=handler.add_callback, remove_callback=handler.remove_callback)

    def bars(t):
        return [type(cb) for cb in t.callback_handler.callbacks if isinstance(cb, ProgressCallback)]

    on_terminal, in_a_file = trainer(), trainer()
    quiet_progress(on_terminal, terminal=True)
    quiet_progress(in_a_file, terminal=False)
    assert len(bars(on_terminal)) == 1 and bars(on_terminal)[0] is not ProgressCallback  # the quiet one
    assert bars(on_terminal)[0]().on_log(None, None, None, logs={"loss": 1.0}) is None
    assert bars(in_a_file) == []
    assert not any(isinstance(cb, PrinterCallback) for t in (on_terminal, in_a_file) for cb in t.callback_handler.callbacks)
