"""plot_metrics: a grid of the training curves from the metrics JSONL."""

from __future__ import annotations

import json


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_plot_is_a_grid_of_the_headline_and_channel_curves(tmp_path):
    from PIL import Image

    from trainer_client.metrics import plot_metrics

    keys = ["reward", "reward_std", "loss", "tools/call_frequency", "channels/grpo", "channels/sdpo",
            "env/errors/timeout"]
    rows = [{"step": s, **{k: float(s * (i + 1)) for i, k in enumerate(keys)}, "learning_rate": 1e-6}
            for s in range(1, 6)]
    _write(tmp_path / "m.jsonl", rows)
    png = plot_metrics(tmp_path / "m.jsonl", tmp_path / "m.png")
    assert png is not None and png.exists()
    width, height = Image.open(png).size
    assert width > height, (width, height)  # 7 curves in 3 columns x 3 rows, not one tall column
    assert (width, height) == (1260, 780)


def test_plot_with_nothing_to_plot_returns_none(tmp_path):
    from trainer_client.metrics import plot_metrics

    assert plot_metrics(tmp_path / "missing.jsonl", tmp_path / "a.png") is None
    _write(tmp_path / "m.jsonl", [{"step": 1, "learning_rate": 1e-6}])
    assert plot_metrics(tmp_path / "m.jsonl", tmp_path / "b.png") is None
    assert not (tmp_path / "a.png").exists() and not (tmp_path / "b.png").exists()
