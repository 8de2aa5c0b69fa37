"""What a run prints besides the step table (trainer_client/console.py): lost rollouts with their
replica, a replica out of rotation named once, a sampled episode every N steps (and every step's
kept in samples.jsonl), a heartbeat inside a long step, and the step table's `lost` column."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

from transformers import TrainerState

from trainer_client import metrics
from trainer_client.console import Heartbeat, RunConsole, describe_call
from trainer_client.metrics import table_header, table_row

A, B = "http://127.0.0.1:8000", "http://127.0.0.1:8001"


def _rollout(n: int, replica: str = A, reward: float | None = 1.0, infra: str | None = None) -> dict:
    return {"episode_id": f"ep{n}", "instance_id": "toolz__1.0.0-x", "replica": replica, "reward": reward,
            "infra_error": infra,
            "calls": [{"tool": "bash", "args": describe_call({"command": "pytest -q " + "x" * 200}),
                       "error_kind": "test_failure"},
                      {"tool": "str_replace", "args": describe_call({"path": "a.py", "old": "1", "new": "2"}),
                       "error_kind": None},
                      {"tool": "submit", "args": "", "error_kind": None}]}


def _capture(monkeypatch) -> list[str]:
    lines: list[str] = []
    monkeypatch.setattr(metrics, "_write", lines.append)
    return lines


def test_lost_rollouts_replicas_and_sampled_episodes(tmp_path, monkeypatch):
    lines = _capture(monkeypatch)
    console = RunConsole(tmp_path, sample_every=5)
    lost = _rollout(9, B, None, "EnvConnectionError: replica ws://127.0.0.1:8001/mux lost")
    console.report(1, [_rollout(1), _rollout(2), lost], {A: True, B: False})
    assert lines[0] == ("[env] step 1: 1 of 3 rollouts lost to the env (masked out of the loss): 1 on "
                        f"{B}; first error: EnvConnectionError: replica ws://127.0.0.1:8001/mux lost")
    assert lines[1] == (f"[env] replica {B} is out of rotation (its connection failed); new sessions go to "
                        f"1 live replica(s): {A}")
    sample = lines[2].splitlines()
    assert sample[0] == "[sample] step 1, toolz__1.0.0-x: reward 1, 3 tool call(s)"
    assert sample[1].startswith('    1. bash("pytest -q xxx') and sample[1].endswith('...) -> test_failure')
    assert len(sample[1]) < 110  # the console cuts long arguments (at ARGS_SHOWN characters)
    assert sample[2] == '    2. str_replace("a.py", "1", "2")' and sample[3] == "    3. submit()"
    assert sample[4].startswith(f"       trace: {A}/episodes/ep")
    for step in range(2, 7):
        console.report(step, [_rollout(1), _rollout(2)], {A: True, B: False})
    printed = [line.splitlines()[0] for line in lines if line.startswith("[sample]")]
    assert [p.split(",")[0] for p in printed] == ["[sample] step 1", "[sample] step 6"]  # every 5th step
    assert sum("out of rotation" in line for line in lines) == 1  # named once
    kept = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert [k["step"] for k in kept] == [1, 2, 3, 4, 5, 6]  # every step's sample is kept
    assert all(k["infra_error"] is None for k in kept)  # a graded rollout, not the lost one
    assert len(kept[0]["calls"][0]["args"]) > 200  # kept whole (up to ARGS_KEPT), not cut as on the console


def test_the_step_table_has_a_lost_column():
    record = {"step": 3, "reward": 0.5, "env/infra_failures": 2.0, "loss": 0.1}
    head, *legend = table_header(record)
    assert head.split()[:4] == ["step", "reward", "lost", "loss"]
    assert any("lost: rollouts lost to env failures" in line for line in legend)
    assert table_row(record).split()[:3] == ["3", "0.500", "2"]


def test_a_heartbeat_while_a_step_runs(monkeypatch):
    lines = _capture(monkeypatch)
    pool = [SimpleNamespace(done=True, turns=[{}, {}]), SimpleNamespace(done=False, turns=[{}])]
    beat = Heartbeat(SimpleNamespace(_environment_pool={None: pool}), every_s=0.05)
    state = TrainerState()
    state.global_step = 4
    beat.on_step_begin(None, state, None)
    time.sleep(0.3)
    beat.on_step_end(None, state, None)
    seen = len(lines)
    time.sleep(0.15)
    assert seen >= 2 and len(lines) == seen  # it beat while the step ran, and stopped with it
    assert lines[0].startswith("[step 5] running for ") and lines[0].endswith(
        ": 1/2 rollouts finished, 3 tool calls so far")


def test_a_line_as_training_starts(monkeypatch):
    """The model's load and the trainer's set-up are quiet: a line as the first step starts."""
    lines = _capture(monkeypatch)
    Heartbeat(None, every_s=20).on_train_begin(None, TrainerState(), None)
    Heartbeat(None, every_s=0).on_train_begin(None, TrainerState(), None)  # heartbeats off: nothing
    assert lines == ["[step 1] starting: generating its rollouts"]
