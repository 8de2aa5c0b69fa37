"""`trainer-client ablate` (trainer_client/ablate.py): arms -> runs -> aggregate -> report.

The aggregate and report are checked on synthetic metrics files against hand computation; the
orchestration (crash isolation, resumption, --force, an arm without teachers) against a scripted
stand-in for `train` (FAKE_TRAIN, run through --launcher); and one end-to-end ablation on the CPU
runs real `trainer-client train` processes against the real env server.
"""

from __future__ import annotations

import csv
import json
import math
import shlex
import sys
from pathlib import Path

import pytest

import trainer_client
from trainer_client.ablate import RUN_RECORD, aggregate, read_run, write_report
from trainer_client.cli import main

CPU_SMOKE = Path(trainer_client.__file__).parent / "configs" / "cpu_smoke.yaml"


def _write_run(run_dir: Path, rewards, passes=None, finished=True, record=None, log="", **per_step):
    """A run directory as `train` + `ablate` leave it: metrics.jsonl, the run record, the log."""
    run_dir.mkdir(parents=True)
    rows = [{"step": i + 1, "reward": r, "loss": 0.1,
             **({"env/pass_rate": passes[i]} if passes else {}), **per_step} for i, r in enumerate(rewards)]
    if finished:
        rows.append({"step": len(rewards), "train_runtime": 1.0, "train_loss": 0.1})
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / RUN_RECORD).write_text(json.dumps(record or {"status": "ok", "returncode": 0, "seconds": 12.0}))
    if log:
        (run_dir / "train.log").write_text(log)


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


# ------------------------------------------------------------------------------------- aggregate + report (synthetic)
def test_table_numbers_match_hand_computation(tmp_path):
    out = tmp_path / "abl"
    _write_run(out / "grpo/seed0", [0.0, 0.5, 0.5, 1.0], [0.0, 0.5, 0.5, 1.0], **{"channels/hints/weight": 0.0})
    _write_run(out / "grpo/seed1", [0.0, 0.0, 0.5, 0.5], [0.0, 0.0, 0.0, 0.5], **{"channels/hints/weight": 0.0})
    _write_run(out / "grpo+hints/seed0", [0.5, 0.5, 1.0, 1.0], [0.5, 0.5, 1.0, 1.0],
               **{"channels/hints/weight": 0.1, "channels/hints/tokens": 3.0})
    _write_run(out / "grpo+hints/seed1", [0.0, 0.5, 0.5, 0.5], [0.0, 0.5, 0.5, 0.5],
               **{"channels/hints/weight": 0.1, "channels/hints/tokens": 1.0})
    runs = [read_run(out / arm / f"seed{s}", arm, s, max_steps=4) for arm in ("grpo", "grpo+hints") for s in (0, 1)]
    assert [r.status for r in runs] == ["ok"] * 4
    summaries = aggregate(runs, window=2)
    grpo, hints = summaries

    # final window = the last 2 steps of each run
    assert [r.final_reward for r in runs] == [0.75, 0.5, 1.0, 0.5]
    assert [r.final_pass_rate for r in runs] == [0.75, 0.25, 1.0, 0.5]
    assert (grpo.final_reward.mean, grpo.final_reward.min, grpo.final_reward.max) == (0.625, 0.5, 0.75)
    assert grpo.final_reward.std == pytest.approx(math.sqrt(2 * 0.125 ** 2))  # sample std of {0.75, 0.5}
    assert hints.final_reward.mean == 0.75 and hints.final_reward.std == pytest.approx(math.sqrt(2 * 0.25 ** 2))
    assert grpo.final_pass_rate.mean == 0.5 and hints.final_pass_rate.mean == 0.75
    assert grpo.delta_reward is None and hints.delta_reward == pytest.approx(0.125)
    assert hints.delta_pass_rate == pytest.approx(0.25)
    # per-step spread across seeds
    step2 = grpo.curve[1]
    assert step2["step"] == 2 and step2["reward"].mean == 0.25 and (step2["reward"].min, step2["reward"].max) == (0, 0.5)
    # channels: the weight is a mean over steps, the counts a sum over the run, then the mean over seeds
    assert grpo.channels["channels/hints/weight"] == 0.0 and hints.channels["channels/hints/weight"] == pytest.approx(0.1)
    assert hints.channels["channels/hints/tokens"] == pytest.approx((4 * 3.0 + 4 * 1.0) / 2)

    paths = write_report(out, runs, summaries, {"config": "c.yaml"}, window=2)
    assert set(paths) == {"md", "arms_csv", "runs_csv", "curves_csv", "json", "png"}
    arms = {r["arm"]: r for r in _csv(paths["arms_csv"])}
    assert float(arms["grpo"]["final_reward_mean"]) == 0.625 and float(arms["grpo+hints"]["delta_reward"]) == 0.125
    assert arms["grpo"]["runs_ok"] == "2" and arms["grpo"]["delta_reward"] == ""
    curves = _csv(paths["curves_csv"])
    assert len(curves) == 8 and {c["reward_n"] for c in curves} == {"2"}
    md = paths["md"].read_text()
    assert "| grpo | 2/2 | 0.625 ± 0.177 [0.500, 0.750] | — | 0.500 ± 0.354 [0.250, 0.750] |" in md
    assert "| grpo+hints | 2/2 | 0.750 ± 0.354 [0.500, 1.000] | +0.125 |" in md
    assert "| grpo | 0 | ok | 4 | 0.750 | 0.750 | 0 |" in md
    assert str(tmp_path) not in paths["json"].read_text()  # run dirs are named relative to the report
    assert paths["png"].stat().st_size > 10_000


def test_held_out_before_and_after_per_arm(tmp_path):
    """--held-out: each run's eval/resolved_rate records (before step 1 and after the last step) become
    the arm's held-out columns, with the delta against grpo; a run without its final evaluation has none."""
    out = tmp_path / "abl"
    for arm, seed, before, after in (("grpo", 0, 0.25, 0.5), ("grpo", 1, 0.25, 0.25),
                                     ("grpo+hints", 0, 0.25, 0.75), ("grpo+hints", 1, 0.25, None)):
        _write_run(out / arm / f"seed{seed}", [0.0, 1.0], [0.0, 1.0])
        evals = [{"step": 0, "eval/resolved_rate": before, "eval/scored": 4}]
        if after is not None:
            evals.append({"step": 2, "eval/resolved_rate": after, "eval/scored": 4})
        with (out / arm / f"seed{seed}" / "metrics.jsonl").open("a") as f:
            f.writelines(json.dumps(e) + "\n" for e in evals)
    runs = [read_run(out / arm / f"seed{s}", arm, s, max_steps=2) for arm in ("grpo", "grpo+hints") for s in (0, 1)]
    assert [(r.held_out_start, r.held_out_final) for r in runs] == [(0.25, 0.5), (0.25, 0.25), (0.25, 0.75),
                                                                   (0.25, None)]
    grpo, hints = aggregate(runs, window=1)
    assert grpo.held_out_final.mean == 0.375 and hints.held_out_final.mean == 0.75 and hints.held_out_final.n == 1
    assert hints.delta_held_out == pytest.approx(0.375) and grpo.delta_held_out is None
    md = write_report(out, runs, [grpo, hints], {"config": "c.yaml"}, window=1)["md"].read_text()
    assert "held-out resolved: before | after" in md
    assert "| 0.250 ± 0.000 [0.250, 0.250] | 0.375 ± 0.177 [0.250, 0.500] | — |" in md
    assert "| 0.750 [0.750, 0.750] | +0.375 |" in md


def test_failed_run_is_shown_failed_with_its_log_tail_and_left_out_of_the_means(tmp_path):
    out = tmp_path / "abl"
    _write_run(out / "grpo/seed0", [0.0, 1.0], [0.0, 1.0])
    _write_run(out / "grpo/seed1", [0.0], [0.0], finished=False,
               record={"status": "failed", "returncode": 1, "error": "exited with 1"},
               log="step 1\rstep 1 done\nTraceback (most recent call last):\ntorch.OutOfMemoryError: CUDA out of memory\n")
    runs = [read_run(out / "grpo" / f"seed{s}", "grpo", s, max_steps=2) for s in (0, 1)]
    assert [r.status for r in runs] == ["ok", "failed"]
    assert runs[1].error.splitlines()[0] == "exited with 1"
    assert runs[1].error.splitlines()[-1] == "torch.OutOfMemoryError: CUDA out of memory"
    (summary,) = aggregate(runs, window=1)
    assert (summary.runs, summary.runs_ok) == (2, 1)
    assert summary.final_reward.mean == 1.0 and summary.final_reward.std is None  # the failed run is not averaged
    assert [p["reward"].n for p in summary.curve] == [1, 1]

    paths = write_report(out, runs, [summary], {}, window=1)
    md = paths["md"].read_text()
    assert "| grpo | 2 | 1/2 |" not in md and "| grpo | 1/2 | 1.000 [1.000, 1.000] |" in md
    assert "| grpo | 1 | failed | 1 | — | — |" in md
    assert "### grpo seed 1" in md and "torch.OutOfMemoryError: CUDA out of memory" in md
    rows = _csv(paths["runs_csv"])
    assert [(r["status"], r["returncode"], r["error"]) for r in rows] == [("ok", "0", ""),
                                                                          ("failed", "1", "exited with 1")]


def test_unfinished_metrics_are_a_failed_run(tmp_path):
    """The run record says nothing (killed with the parent): the metrics decide."""
    _write_run(tmp_path / "r", [0.5, 0.5], [0.5, 0.5], finished=False, record={"status": "running"})
    run = read_run(tmp_path / "r", "grpo", 0, max_steps=2)
    assert run.status == "failed" and "did not reach step 2 (logged 2 step(s))" in run.error
    _write_run(tmp_path / "s", [0.5, 0.5], [0.5, 0.5])
    assert read_run(tmp_path / "s", "grpo", 0, max_steps=3).status == "failed"  # a smaller budget than asked


# --------------------------------------------------------------------------- orchestration (scripted `train` stand-in)
FAKE_TRAIN = '''
"""Stands in for `python -m trainer_client.cli train`: writes metrics like the real one.
Its behaviour per run comes from FAKE_TRAIN_CRASH ("arm/seed=how" pairs, comma-separated)."""
import json, os, signal, sys
from pathlib import Path

argv = sys.argv[1:]
assert argv[:3] == ["-m", "trainer_client.cli", "train"], argv
out = Path(argv[argv.index("--output-dir") + 1])
steps = int(argv[argv.index("--max-steps") + 1])
sets = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "--set")
with open(os.environ["FAKE_TRAIN_CALLS"], "a") as f:
    f.write(json.dumps({"run": f"{out.parent.name}/{out.name}", "sets": sets}) + "\\n")
how = dict(p.split("=") for p in os.environ.get("FAKE_TRAIN_CRASH", "").split(",") if p).get(f"{out.parent.name}/{out.name}")
seed = int(sets["grpo.seed"])
with open(out / "metrics.jsonl", "a") as m:
    for step in range(1, steps + 1):
        reward = 0.25 * seed + 0.1 * step
        m.write(json.dumps({"step": step, "reward": reward, "env/pass_rate": reward,
                            "channels/hints/weight": float(sets["loss.hints.weight"]), "channels/pairs/weight": float(sets["loss.pairs.weight"]),
                            **({"replay/spent_usd": 0.5 * step} if sets["replay.enabled"] == "true" else {})}) + "\\n")
        print(f"[step {step}] reward={reward}", flush=True)
        if how == "raise" and step == 1:
            raise RuntimeError("fake crash at step 1")
        if how == "oom" and step == 1:
            os.kill(os.getpid(), signal.SIGKILL)
    m.write(json.dumps({"step": steps, "train_runtime": 0.1}) + "\\n")
'''


@pytest.fixture
def fake_train(tmp_path, monkeypatch):
    script = tmp_path / "fake_train.py"
    script.write_text(FAKE_TRAIN)
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_TRAIN_CALLS", str(calls))

    def ablate(out: Path, *extra: str, crash: str = "") -> tuple[int, list[dict]]:
        monkeypatch.setenv("FAKE_TRAIN_CRASH", crash)
        before = len(calls.read_text().splitlines()) if calls.exists() else 0
        rc = main(["ablate", "--config", str(CPU_SMOKE), "--env-url", "http://127.0.0.1:9", "--set",
                   "data.instance_ids=[t1]", "--max-steps", "3", "--out", str(out),
                   "--launcher", f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}", *extra])
        new = calls.read_text().splitlines()[before:] if calls.exists() else []
        return rc, [json.loads(l) for l in new]

    return ablate


def test_crashes_are_isolated_and_a_rerun_only_redoes_what_did_not_finish(fake_train, tmp_path, capsys):
    out = tmp_path / "abl"
    rc, calls = fake_train(out, "--arms", "grpo,grpo+hints", "--seeds", "0,1", crash="grpo+hints/seed0=raise,grpo/seed1=oom")
    assert rc == 1
    assert [c["run"] for c in calls] == ["grpo/seed0", "grpo+hints/seed0", "grpo/seed1", "grpo+hints/seed1"]
    # the arm's and the seed's settings reach `train`, after the user's
    assert {c["run"]: (c["sets"]["loss.hints.weight"], c["sets"]["loss.pairs.weight"], c["sets"]["replay.enabled"], c["sets"]["grpo.seed"])
            for c in calls} == {"grpo/seed0": ("0.0", "0.0", "false", "0"), "grpo+hints/seed0": ("0.1", "0.0", "false", "0"),
                                "grpo/seed1": ("0.0", "0.0", "false", "1"), "grpo+hints/seed1": ("0.1", "0.0", "false", "1")}
    report = json.loads((out / "ablation.json").read_text())
    status = {(r["arm"], r["seed"]): (r["status"], r["returncode"]) for r in report["runs"]}
    assert status == {("grpo", 0): ("ok", 0), ("grpo+hints", 0): ("failed", 1), ("grpo", 1): ("failed", -9),
                      ("grpo+hints", 1): ("ok", 0)}
    errors = {(r["arm"], r["seed"]): r["error"] for r in report["runs"]}
    assert errors[("grpo+hints", 0)].endswith("RuntimeError: fake crash at step 1")
    assert errors[("grpo", 1)].startswith("killed by SIGKILL (out of memory?)")
    text = capsys.readouterr().out
    assert "failed: grpo+hints seed 0: exited with 1: RuntimeError: fake crash at step 1" in text
    assert "| grpo | 1/2 | 0.300 [0.300, 0.300] |" in text  # the end summary: the arm table
    record = json.loads((out / "grpo+hints/seed0" / RUN_RECORD).read_text())
    assert record["status"] == "failed" and record["config"]["loss"]["hints"]["weight"] == 0.1
    assert record["config"]["grpo"]["seed"] == 0 and record["config"]["grpo"]["max_steps"] == 3

    rc, calls = fake_train(out, "--arms", "grpo,grpo+hints", "--seeds", "0,1")  # resume: the two failed runs only
    assert rc == 0 and [c["run"] for c in calls] == ["grpo+hints/seed0", "grpo/seed1"]
    assert "grpo seed 0: finished earlier, kept" in capsys.readouterr().out
    rows = _csv(out / "runs.csv")
    assert [r["status"] for r in rows] == ["ok"] * 4
    assert len((out / "grpo+hints/seed0/metrics.jsonl").read_text().splitlines()) == 4  # started afresh, no appending

    rc, calls = fake_train(out, "--arms", "grpo,grpo+hints", "--seeds", "0,1")
    assert rc == 0 and calls == []
    rc, calls = fake_train(out, "--arms", "grpo", "--seeds", "1", "--force")
    assert rc == 0 and [c["run"] for c in calls] == ["grpo/seed1"]


def test_pairs_arm_without_teachers_fails_up_front(fake_train, tmp_path, capsys):
    out = tmp_path / "abl"
    rc, calls = fake_train(out, "--arms", "grpo,grpo+pairs,all", "--seeds", "0")
    assert rc == 1 and [c["run"] for c in calls] == ["grpo/seed0"]  # neither replay arm ran as plain GRPO
    text = capsys.readouterr().out
    assert "grpo+pairs seed 0: FAILED: arm grpo+pairs: needs replay teachers" in text
    report = json.loads((out / "ablation.json").read_text())
    assert [(r["arm"], r["status"]) for r in report["runs"]] == [("grpo", "ok"), ("grpo+pairs", "failed"),
                                                                 ("all", "failed")]
    assert "replay.teachers" in report["runs"][1]["error"]

    teachers = tmp_path / "teachers.yaml"
    teachers.write_text("teachers: []\n")
    rc, calls = fake_train(out, "--arms", "grpo,grpo+pairs,all", "--seeds", "0", "--max-usd", "2.5",
                           "--set", f"replay.teachers={teachers}", "--set", "loss.hints.weight=0.3")
    assert rc == 0 and [c["run"] for c in calls] == ["grpo+pairs/seed0", "all/seed0"]
    assert ("grpo seed 0: finished earlier, kept; WARNING: its settings differ from this invocation's: "
            "replay.max_total_usd") in capsys.readouterr().out  # kept: --force would rerun it
    sets = {c["run"]: c["sets"] for c in calls}
    assert (sets["grpo+pairs/seed0"]["loss.hints.weight"], sets["grpo+pairs/seed0"]["loss.pairs.weight"]) == ("0.0", "0.05")
    assert (sets["all/seed0"]["loss.hints.weight"], sets["all/seed0"]["replay.enabled"]) == ("0.3", "true")
    assert sets["all/seed0"]["replay.max_total_usd"] == "2.5"
    spend = {r["arm"]: r["spend_usd_per_run"] for r in _csv(out / "arms.csv")}
    assert spend == {"grpo": "", "grpo+pairs": "1.5", "all": "1.5"}  # the loop's spend at the last step
    # the trainer logged no pairs: the report says the pairs arms measured no pairs
    assert "channel pairs had no inputs (used) in any finished run: this arm measured no pairs" in (out / "ablation.md").read_text()


def test_bad_arguments(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["ablate", "--config", str(CPU_SMOKE), "--out", str(tmp_path), "--arms", "grpo,nope"])
    assert "unknown arm(s) ['nope']" in capsys.readouterr().err
    assert main(["ablate", "--config", str(CPU_SMOKE), "--out", str(tmp_path), "--env-url", "http://x:1",
                 "--set", "data.instance_ids=[t]", "--set", "grpo.max_steps=-1"]) == 1  # RunSetupError
    assert "--max-steps" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["ablate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "this is a smoke ablation" in text and "is the real measurement" in text


# --------------------------------------------------------------------------------- end to end: real train, real env
# The cheapest real run: the random smoke model (no warm start: the tool-calling model's FIX prompt
# costs ~2.5x, its toolz grading dominating each step), 16 completion tokens, one task whose hidden
# tests run fast (auto-submit grades every rollout), no checkpoints, no per-run plot. Each run is a
# fresh `train` process (~10 s of imports before the first step).
E2E_INSTANCE = "inflection__0.5.1-9e27ec92"


@pytest.mark.slow
def test_ablate_end_to_end_on_the_cpu(real_env_url, small_pack_file, tmp_path, capsys):
    """2 arms x 2 seeds x 2 steps of real `trainer-client train` processes against the real env server,
    each run evaluated on a held-out task (another repository's) before and after training."""
    out = tmp_path / "abl"
    rows = [json.loads(x) for x in Path(small_pack_file).read_text().splitlines() if x.strip()]
    held = next(r for r in rows if r["repo"] != next(q["repo"] for q in rows if q["instance_id"] == E2E_INSTANCE))
    held_out = tmp_path / "held_out.jsonl"
    held_out.write_text(json.dumps(held) + "\n")
    argv = ["ablate", "--config", str(CPU_SMOKE), "--env-url", real_env_url, "--tasks", str(small_pack_file),
            "--arms", "grpo,grpo+hints", "--seeds", "0,1", "--max-steps", "2", "--out", str(out),
            "--held-out", str(held_out),
            "--set", f"data.instance_ids=[{E2E_INSTANCE}]", "--set", "grpo.max_completion_length=16",
            "--set", "grpo.save_strategy='no'", "--set", "output.plot=false",
            "--set", "eval.samples=1", "--set", "eval.max_turns=1", "--set", "eval.max_new_tokens=16"]
    assert main(argv) == 0, capsys.readouterr().out

    for name in ("ablation.md", "ablation.png", "arms.csv", "runs.csv", "curves.csv", "ablation.json"):
        assert (out / name).is_file(), name
    report = json.loads((out / "ablation.json").read_text())
    assert sorted((r["arm"], r["seed"], r["status"], r["steps"]) for r in report["runs"]) == [
        ("grpo", 0, "ok", [1, 2]), ("grpo", 1, "ok", [1, 2]), ("grpo+hints", 0, "ok", [1, 2]),
        ("grpo+hints", 1, "ok", [1, 2])]
    for run in report["runs"]:  # the trainer's per-step reward and pass rate (graded by the hidden tests)
        assert len(run["reward"]) == len(run["pass_rate"]) == 2
        assert all(v is not None and 0.0 <= v <= 1.0 for v in run["reward"] + run["pass_rate"])
    curves = _csv(out / "curves.csv")
    assert sorted((c["arm"], c["step"], c["reward_n"]) for c in curves) == [
        ("grpo", "1", "2"), ("grpo", "2", "2"), ("grpo+hints", "1", "2"), ("grpo+hints", "2", "2")]

    for arm, alpha in (("grpo", 0.0), ("grpo+hints", 0.1)):  # the arms differ as intended ...
        for seed in (0, 1):
            run_dir = out / arm / f"seed{seed}"
            cfg = json.loads((run_dir / RUN_RECORD).read_text())["config"]
            assert (cfg["loss"]["hints"]["weight"], cfg["loss"]["pairs"]["weight"], cfg["replay"]["enabled"]) == (alpha, 0.0, False)
            assert cfg["grpo"]["seed"] == seed and cfg["grpo"]["output_dir"] == str(run_dir)
            steps = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
            # ... in the trainer's own loss: the hints channel's weight as the trainer applied it at every step
            assert [s["channels/hints/weight"] for s in steps if "reward" in s] == [pytest.approx(alpha)] * 2
        first = [next(r for r in map(json.loads, (out / arm / f"seed{s}/metrics.jsonl").read_text().splitlines())
                      if "reward" in r) for s in (0, 1)]  # the first training step (the held-out baseline precedes it)
        assert first[0]["entropy"] != first[1]["entropy"]  # the seed reached the sampler: other rollouts
    for arm in ("grpo", "grpo+hints"):  # the held-out task was evaluated by every run, before and after
        for seed in (0, 1):
            for step in (0, 2):
                o = json.loads((out / arm / f"seed{seed}" / "eval" / f"step-{step}" / "report.json").read_text())
                assert (o["summary"]["overall"]["scored"], o["summary"]["overall"]["lost"]) == (1, 0)
                assert list(o["tasks"]) == [held["instance_id"]]
    held_rates = {r["arm"]: (r["held_out_start"], r["held_out_final"]) for r in report["arms"]}
    assert set(held_rates) == {"grpo", "grpo+hints"}, report["arms"]
    for start, final in held_rates.values():  # mean and n of the two seeds' rates (0 or 1 each)
        assert start["n"] == final["n"] == 2 and 0.0 <= start["mean"] <= 1.0 and 0.0 <= final["mean"] <= 1.0
    text = capsys.readouterr().out
    assert "| grpo | 2/2 |" in text and "| grpo+hints | 2/2 |" in text
    assert "held-out resolved: before" in text

    assert main(argv) == 0  # resumed: every run finished, none is started again
    assert capsys.readouterr().out.count("finished earlier, kept") == 4
