"""`trainer-client ablate`: what each loss channel adds, measured.

    trainer-client ablate --config trainer_client/configs/cpu_smoke.yaml --env-url http://127.0.0.1:8000 \\
        --tasks tasks.jsonl --arms grpo,grpo+hints --seeds 0,1 --max-steps 2 --out runs/ablation

One idea in four stages: arms (the loss settings that differ; `arms()`, from the channel registry) -> runs (one
`trainer-client train` subprocess per arm and seed, on the same tasks, env servers, steps and
teacher USD ceiling, under OUT/<arm>/seed<k>/) -> aggregate (reward and pass rate per step: mean,
std, min and max across seeds; final-window means and their deltas against the `grpo` arm) ->
report (OUT/ablation.md, arms.csv, runs.csv, curves.csv, ablation.json, ablation.png).

A run is its own process, so one arm's crash or OOM is a failed row (with its log tail) and the
others go on. A run whose metrics reach the step budget with TRL's end-of-training record is
finished and is not run again (`--force` does); any other run is started afresh, so the
teacher spend of every run stays under one ceiling. On the CPU with the smoke config this checks
the machinery (a smoke ablation: a tiny model, two steps); the same command with a GPU config
(trainer_client/configs/gpu_qwen.yaml) is the measurement. See docs/ablation.md.

`ablate(args)` is the whole ablation; the command's options and exit code are cli.py's. A
configuration that cannot give comparable runs raises `RunSetupError` (trainer_client/run.py).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shlex
import signal
import statistics
import subprocess
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from env_client.processes import log_tail, start_process, stop_process_group
from trainer_client.losses.channels import channel_class, channel_names, count_keys, metric_key

__all__ = ["Arm", "arms", "ArmSummary", "RunResult", "Spread", "ablate", "aggregate", "read_run",
           "run_ablation", "write_report"]

RUN_RECORD = "ablate.json"  # per run: arm, seed, overrides, command, resolved config, status
LOG = "train.log"
BASELINE = "grpo"
HELD_OUT_KEY = "eval/resolved_rate"  # held-out evaluation during training (trainer_client/eval_during_training.py)
SPEND_KEY = "replay/spent_usd"  # the replay loop's cumulative teacher spend (trainer_client/replay/during_training.py)
TAIL_LINES = 20


def channel_means() -> tuple[str, ...]:
    """Per run, the mean of each channel's scheduled weight (``channels/<name>/weight``)."""
    return tuple(metric_key(n, "weight") for n in channel_names())


def channel_sums() -> tuple[str, ...]:
    """Per run, the sum of each channel's counts (error sites, pairs used)."""
    return count_keys()


def input_key(name: str) -> str:
    """The count that says a channel had inputs (its step-table column)."""
    return metric_key(name, channel_class(name).counts[0])


# ---------------------------------------------------------------------------------------------------------- arms
@dataclass(frozen=True)
class Arm:
    """One loss setting: the channels it turns on (by name); the others get weight 0."""

    name: str
    channels: frozenset[str]
    what: str

    def overrides(self, weights: dict[str, float]) -> list[str]:
        """The keys this arm sets (after the user's --set): every channel's weight, and what each channel
        needs besides (the pairs channel: the replay loop)."""
        out = []
        for n in channel_names():
            on = n in self.channels
            out += [f"loss.{n}.weight={weights[n] if on else 0.0}", *channel_class(n).arm_overrides(on)]
        return out


def arms() -> dict[str, Arm]:
    """GRPO alone, GRPO with each channel, and all channels: generated from the registry."""
    names = channel_names()
    out = [Arm(BASELINE, frozenset(), "GRPO only: " + ", ".join(f"loss.{n}.weight=0" for n in names))]
    for n in names:
        c = channel_class(n)
        out.append(Arm(f"{BASELINE}+{n}", frozenset({n}), f"GRPO + channel {c.number}, {n} ({c.summary}): "
                       f"{c.symbol}>0, the others 0"))
    out.append(Arm("all", frozenset(names), "every channel: " + ", ".join(f"{channel_class(n).symbol}>0" for n in names)))
    return {a.name: a for a in out}



def channel_weights(cfg: Any) -> dict[str, float]:
    """The weight of each channel in the arms that turn it on: the config's value when > 0, else the
    channel's default."""
    return {n: section.weight if section.weight > 0 else channel_class(n).default_weight
            for n, section in cfg.loss.items()}


def arm_problem(arm: Arm, cfg: Any) -> str | None:
    """Why `arm` cannot run on this config (the pairs channel without teachers), or None."""
    for n in sorted(arm.channels):
        problem = channel_class(n).arm_problem(cfg)
        if problem:
            return problem
    return None


# ---------------------------------------------------------------------------------------------------------- runs
@dataclass
class RunResult:
    """One arm x seed: its per-step curves and what its channels did."""

    arm: str
    seed: int
    dir: str
    status: str  # "ok": the metrics reach the step budget; "failed": anything else
    steps: list[int] = field(default_factory=list)
    reward: list[float | None] = field(default_factory=list)
    pass_rate: list[float | None] = field(default_factory=list)
    channels: dict[str, float] = field(default_factory=dict)  # means of channel_means(), sums of channel_sums()
    spend_usd: float | None = None
    seconds: float | None = None
    returncode: int | None = None
    error: str = ""  # why it failed, then the log tail
    final_reward: float | None = None  # filled by `aggregate` (mean over the final window)
    final_pass_rate: float | None = None
    held_out_start: float | None = None  # eval/resolved_rate before the first step (`--held-out`)
    held_out_final: float | None = None  # ... and after the last


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut by a killed run
            continue
    return rows


def _finished(rows: list[dict[str, Any]], max_steps: int) -> bool:
    """TRL's end-of-training record (train_runtime; metrics.py writes it as the run summary, its step
    in `global_step`) at a step >= the budget."""
    return any("train_runtime" in r and r.get("global_step", r.get("step", 0)) >= max_steps for r in rows)


def read_run(run_dir: Path, arm: str, seed: int, max_steps: int) -> RunResult:
    """A run's result from its directory: metrics.jsonl (one record per step) and RUN_RECORD."""
    record = json.loads((run_dir / RUN_RECORD).read_text()) if (run_dir / RUN_RECORD).exists() else {}
    rows = _read_jsonl(run_dir / "metrics.jsonl")
    by_step = {int(r["step"]): r for r in rows if "reward" in r and "step" in r}  # the last record of a step wins
    steps = sorted(by_step)
    res = RunResult(arm=arm, seed=seed, dir=str(run_dir), status="ok" if _finished(rows, max_steps) else "failed",
                    steps=steps, seconds=record.get("seconds"), returncode=record.get("returncode"))
    res.reward = [_number(by_step[s].get("reward")) for s in steps]
    res.pass_rate = [_number(by_step[s].get("env/pass_rate")) for s in steps]
    means = channel_means()
    for key in means + channel_sums():
        vals = [v for s in steps if (v := _number(by_step[s].get(key))) is not None]
        if vals:
            res.channels[key] = statistics.fmean(vals) if key in means else float(sum(vals))
    evals = sorted((int(r["step"]), v) for r in rows if "step" in r and (v := _number(r.get(HELD_OUT_KEY))) is not None)
    if evals:
        res.held_out_start = evals[0][1] if evals[0][0] == 0 else None
        res.held_out_final = evals[-1][1] if evals[-1][0] >= max_steps else None
    spend = [v for s in steps if (v := _number(by_step[s].get(SPEND_KEY))) is not None]
    res.spend_usd = spend[-1] if spend else None
    if res.status == "failed":
        why = record.get("error") or (f"exited with {record['returncode']}" if record.get("returncode") else
                                      f"did not reach step {max_steps} (logged {len(steps)} step(s))")
        tail = log_tail(run_dir / LOG, TAIL_LINES)  # progress-bar carriage returns split lines
        res.error = why + ("\n" + tail if tail else "")
    return res


def _reason(res: RunResult) -> str:
    """A failed run in one line: why, and the last line of its log."""
    lines = res.error.splitlines() or [""]
    return lines[0] + (f": {lines[-1]}" if len(lines) > 1 else "")


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


@dataclass
class Plan:
    """Everything the runs share: how to start `train`, and what each arm x seed adds."""

    args: argparse.Namespace
    out: Path
    max_steps: int
    launcher: list[str]
    weights: dict[str, float]  # each channel's weight where an arm turns it on

    def run_dir(self, arm: str, seed: int) -> Path:
        return self.out / arm / f"seed{seed}"

    def overrides(self, arm: Arm, seed: int) -> list[str]:
        seeds = [f"loss.{n}.seed={seed}" for n in channel_names() if "seed" in channel_class(n).settings_class.model_fields]
        return arm.overrides(self.weights) + [f"grpo.seed={seed}", f"grpo.data_seed={seed}", *seeds]

    def command(self, arm: Arm, seed: int) -> list[str]:
        a = self.args
        cmd = [*self.launcher, "-m", "trainer_client.cli", "train", "--config", a.config]
        for url in a.env_url:
            cmd += ["--env-url", url]
        if a.tasks:
            cmd += ["--tasks", a.tasks]
        cmd += ["--output-dir", str(self.run_dir(arm.name, seed)), "--max-steps", str(self.max_steps)]
        for item in list(a.overrides) + self.overrides(arm, seed):
            cmd += ["--set", item]
        return cmd

    def config(self, arm: Arm, seed: int) -> Any:
        """The run's resolved config, as `train` will resolve it (validated here, before any run starts)."""
        from trainer_client.run import resolve_config

        a = self.args
        cfg = resolve_config(a.config, list(a.overrides) + self.overrides(arm, seed), env_urls=a.env_url,
                             tasks=a.tasks, output_dir=str(self.run_dir(arm.name, seed)), max_steps=self.max_steps,
                             env_token=a.env_token)  # a bad loss.* value fails here, for every arm at once
        return cfg


def _redacted(cmd: list[str]) -> list[str]:
    from env_client import split_token

    return [split_token(c)[0] if c.startswith(("http://", "https://")) else c for c in cmd]


def _config_record(cfg: Any) -> dict[str, Any]:
    from env_client import split_token

    data = cfg.model_dump(mode="json")  # env.client.token is a SecretStr: dumped masked
    data["env"]["urls"] = [split_token(u)[0] for u in cfg.env.urls]
    return data


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}."""
    if not isinstance(d, dict):
        return {prefix[:-1]: d}
    return {k: v for key, sub in d.items() for k, v in _flat(sub, f"{prefix}{key}.").items()}


def _changed(run_dir: Path, config: dict[str, Any]) -> str:
    """The keys whose values differ between a kept run's recorded config and this invocation's
    (env.urls and env.client aside: a restarted env server does not change what a run measured)."""
    try:
        before = _flat(json.loads((run_dir / RUN_RECORD).read_text())["config"])
    except (OSError, KeyError, json.JSONDecodeError):
        return "no recorded config"
    now = _flat(config)
    keys = sorted(k for k in before.keys() | now.keys() if before.get(k) != now.get(k)
                  and k != "env.urls" and not k.startswith("env.client."))
    return ", ".join(f"{k} ({before.get(k)!r} -> {now.get(k)!r})" for k in keys)


def launch(cmd: list[str], run_dir: Path, env: dict[str, str], timeout_s: float | None) -> tuple[int, str]:
    """Run one `train` process (its own session, output to the run's log); (returncode, error)."""
    proc = start_process(cmd, run_dir / LOG, env=env)
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill(proc)
        return proc.returncode, f"timed out after {timeout_s:g} s (--timeout-s)"
    except BaseException:  # Ctrl-C: leave no training process behind
        _kill(proc)
        raise
    if rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.valid_signals() else str(-rc)
        return rc, f"killed by {name}" + (" (out of memory?)" if -rc == signal.SIGKILL else "")
    return rc, f"exited with {rc}" if rc else ""


def _kill(proc: subprocess.Popen) -> None:
    """SIGTERM the run's process group (accelerate launch has children), SIGKILL after 30 s."""
    stop_process_group(proc, grace_s=30)


def run_ablation(plan: Plan, arms: list[Arm], seeds: list[int], force: bool = False,
                 timeout_s: float | None = None) -> list[RunResult]:
    """Every arm x seed (seeds outer: a cut-short ablation still compares the arms on seed 0)."""
    configs = {(a.name, s): plan.config(a, s) for a in arms for s in seeds}  # every config valid before any run
    problems = {a.name: arm_problem(a, configs[a.name, seeds[0]]) for a in arms}
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if plan.args.env_token:
        from env_client import TOKEN_ENV

        env[TOKEN_ENV] = plan.args.env_token  # not on the command line (ps, the run record)
    order = [(s, a) for s in seeds for a in arms]
    results = []
    for i, (seed, arm) in enumerate(order, 1):
        run_dir, head = plan.run_dir(arm.name, seed), f"[ablate {i}/{len(order)}] {arm.name} seed {seed}:"
        config = _config_record(configs[arm.name, seed])
        done = read_run(run_dir, arm.name, seed, plan.max_steps) if run_dir.exists() and not force else None
        if done is not None and done.status == "ok":
            changed = _changed(run_dir, config)
            print(f"{head} finished earlier, kept" + (f"; WARNING: its settings differ from this invocation's: "
                  f"{changed}; --force reruns it" if changed else " (--force reruns it)"), flush=True)
            results.append(done)
            continue
        record = {"arm": arm.name, "seed": seed, "overrides": plan.overrides(arm, seed),
                  "command": _redacted(plan.command(arm, seed)), "config": config}
        results.append(_run_one(plan, arm, seed, record, problems[arm.name], env, timeout_s, head))
    return results


def _run_one(plan: Plan, arm: Arm, seed: int, record: dict[str, Any], problem: str | None, env: dict[str, str],
             timeout_s: float | None, head: str) -> RunResult:
    """Start one run afresh (an unfinished run's metrics.jsonl would be appended to) and read its result."""
    import shutil

    run_dir = plan.run_dir(arm.name, seed)
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    if problem:
        record.update(error=f"arm {arm.name}: {problem}")
        print(f"{head} FAILED: {record['error']}", flush=True)
    else:
        (run_dir / RUN_RECORD).write_text(json.dumps({**record, "status": "running"}, indent=2))
        print(f"{head} running (log {run_dir / LOG})", flush=True)
        start = time.monotonic()
        rc, error = launch(plan.command(arm, seed), run_dir, env, timeout_s)
        record.update(seconds=round(time.monotonic() - start, 1), returncode=rc, error=error)
    finished = _finished(_read_jsonl(run_dir / "metrics.jsonl"), plan.max_steps)
    (run_dir / RUN_RECORD).write_text(json.dumps({**record, "status": "ok" if finished else "failed"}, indent=2))
    res = read_run(run_dir, arm.name, seed, plan.max_steps)
    if not problem:
        print(f"{head} " + (f"ok in {record['seconds']:.0f} s" if res.status == "ok" else f"FAILED: {_reason(res)}"),
              flush=True)
    return res


# ----------------------------------------------------------------------------------------------------- aggregate
@dataclass(frozen=True)
class Spread:
    """Values across seeds: count, mean, sample std (None below 2 values), min, max."""

    n: int = 0
    mean: float | None = None
    std: float | None = None
    min: float | None = None
    max: float | None = None

    @classmethod
    def of(cls, values: list[float | None]) -> Spread:
        vals = [v for v in values if v is not None]
        if not vals:
            return cls()
        return cls(len(vals), statistics.fmean(vals), statistics.stdev(vals) if len(vals) > 1 else None,
                   min(vals), max(vals))

    def text(self) -> str:
        if self.mean is None:
            return "—"
        std = f" ± {self.std:.3f}" if self.std is not None else ""
        return f"{self.mean:.3f}{std} [{self.min:.3f}, {self.max:.3f}]"


@dataclass
class ArmSummary:
    arm: str
    runs: int
    runs_ok: int
    final_reward: Spread
    final_pass_rate: Spread
    delta_reward: float | None  # final-window mean minus the `grpo` arm's
    delta_pass_rate: float | None
    channels: dict[str, float]  # per-run means across the finished runs
    spend_usd: float | None
    curve: list[dict[str, Any]]  # per step: step, reward Spread, pass_rate Spread
    notes: list[str] = field(default_factory=list)
    held_out_start: Spread = field(default_factory=Spread)  # held-out resolved rate before training (--held-out)
    held_out_final: Spread = field(default_factory=Spread)  # ... after the last step
    delta_held_out: float | None = None  # final held-out mean minus the `grpo` arm's


def _window_mean(values: list[float | None], window: int) -> float | None:
    vals = [v for v in values[-window:] if v is not None]
    return statistics.fmean(vals) if vals else None


def aggregate(runs: list[RunResult], window: int, baseline: str = BASELINE) -> list[ArmSummary]:
    """Per arm, from its finished runs only: per-step spread across seeds, final-window spread, deltas."""
    for r in runs:
        r.final_reward = _window_mean(r.reward, window) if r.status == "ok" else None
        r.final_pass_rate = _window_mean(r.pass_rate, window) if r.status == "ok" else None
    summaries = []
    for arm in dict.fromkeys(r.arm for r in runs):
        mine = [r for r in runs if r.arm == arm]
        ok = [r for r in mine if r.status == "ok"]
        curve, by_step = [], [dict(zip(r.steps, zip(r.reward, r.pass_rate))) for r in ok]
        for step in sorted({s for r in ok for s in r.steps}):
            at = [points.get(step, (None, None)) for points in by_step]
            curve.append({"step": step, "reward": Spread.of([a[0] for a in at]),
                          "pass_rate": Spread.of([a[1] for a in at])})
        channels = {k: statistics.fmean(r.channels.get(k, 0.0) for r in ok) for k in channel_means() + channel_sums()
                    if any(k in r.channels for r in ok)}
        spend = [r.spend_usd for r in ok if r.spend_usd is not None]
        notes = []
        known = arms()
        for n in sorted(known[arm].channels if arm in known else ()):
            if ok and not channels.get(input_key(n)):
                notes.append(f"channel {n} had no inputs ({channel_class(n).column}) in any finished run: "
                             f"this arm measured no {n}")
        summaries.append(ArmSummary(arm, len(mine), len(ok), Spread.of([r.final_reward for r in ok]),
                                    Spread.of([r.final_pass_rate for r in ok]), None, None, channels,
                                    statistics.fmean(spend) if spend else None, curve, notes,
                                    Spread.of([r.held_out_start for r in ok]),
                                    Spread.of([r.held_out_final for r in ok])))
    base = next((s for s in summaries if s.arm == baseline), None)
    for s in summaries:
        if base is not None and s is not base:
            s.delta_reward = _diff(s.final_reward.mean, base.final_reward.mean)
            s.delta_pass_rate = _diff(s.final_pass_rate.mean, base.final_pass_rate.mean)
            s.delta_held_out = _diff(s.held_out_final.mean, base.held_out_final.mean)
    return summaries


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


# -------------------------------------------------------------------------------------------------------- report
def _fmt(v: float | None, spec: str = ".3f", signed: bool = False) -> str:
    return "—" if v is None else format(v, ("+" if signed else "") + spec)


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def arms_table(summaries: list[ArmSummary]) -> str:
    """The Markdown table of the arms (also the end-of-run summary)."""
    head = ["arm", "runs ok", "reward (final window)", f"Δ vs {BASELINE}", "pass rate (final window)",
            f"Δ vs {BASELINE}", *_channel_headers("/run"), "teacher $/run"]
    rows = [[s.arm, f"{s.runs_ok}/{s.runs}", s.final_reward.text(), _fmt(s.delta_reward, signed=True),
             s.final_pass_rate.text(), _fmt(s.delta_pass_rate, signed=True),
             *(_fmt(s.channels.get(k), "g") for k in _channel_columns()), _fmt(s.spend_usd, ".2f")] for s in summaries]
    if any(s.held_out_final.n for s in summaries):  # --held-out: the measure that counts, on unseen tasks
        head[6:6] = ["held-out resolved: before", "after", f"Δ vs {BASELINE}"]
        for s, row in zip(summaries, rows):
            row[6:6] = [s.held_out_start.text(), s.held_out_final.text(), _fmt(s.delta_held_out, signed=True)]
    return _md_table(head, rows)


def runs_table(runs: list[RunResult]) -> str:
    head = ["arm", "seed", "status", "steps", "reward (final)", "pass rate (final)", *_channel_headers(""), "time s",
            "dir"]
    rows = [[r.arm, str(r.seed), r.status, str(len(r.steps)), _fmt(r.final_reward), _fmt(r.final_pass_rate),
             *(_fmt(r.channels.get(k), "g") for k in _channel_columns()), _fmt(r.seconds, ".0f"), r.dir] for r in runs]
    return _md_table(head, rows)


def _channel_columns() -> list[str]:
    """The channel keys the tables show: each channel's mean weight, then its input count."""
    return [k for n in channel_names() for k in (metric_key(n, "weight"), input_key(n))]


def _channel_headers(suffix: str) -> list[str]:
    return [h for n in channel_names() for h in (channel_class(n).symbol, f"{channel_class(n).column}{suffix}")]


def _rel(path: str, out: Path) -> str:
    try:
        return str(Path(path).relative_to(out))
    except ValueError:
        return path


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_report(out: Path, runs: list[RunResult], summaries: list[ArmSummary], settings: dict[str, Any],
                 window: int) -> dict[str, Path]:
    """OUT/ablation.md, arms.csv, runs.csv, curves.csv, ablation.json and ablation.png; their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {k: out / n for k, n in (("md", "ablation.md"), ("arms_csv", "arms.csv"), ("runs_csv", "runs.csv"),
                                     ("curves_csv", "curves.csv"), ("json", "ablation.json"), ("png", "ablation.png"))}
    runs = [replace(r, dir=_rel(r.dir, out)) for r in runs]  # the report names run dirs relative to OUT
    paths["json"].write_text(json.dumps(_jsonable({"settings": settings, "final_window": window,
                                                   "arms": [asdict(s) for s in summaries],
                                                   "runs": [asdict(r) for r in runs]}), indent=2))
    spread_cols = ["n", "mean", "std", "min", "max"]
    with paths["arms_csv"].open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["arm", "runs", "runs_ok"] + [f"final_reward_{c}" for c in spread_cols] + ["delta_reward"]
                   + [f"final_pass_rate_{c}" for c in spread_cols] + ["delta_pass_rate", *_csv_names(_channel_columns()),
                                                                     "spend_usd_per_run"])
        for s in summaries:
            w.writerow([s.arm, s.runs, s.runs_ok, *_cells(s.final_reward), _cell(s.delta_reward),
                        *_cells(s.final_pass_rate), _cell(s.delta_pass_rate),
                        *(_cell(s.channels.get(k)) for k in _channel_columns()),
                        _cell(s.spend_usd)])
    with paths["runs_csv"].open("w", newline="") as f:
        w = csv.writer(f)
        keys = list(channel_means() + channel_sums())
        w.writerow(["arm", "seed", "status", "steps", "final_reward", "final_pass_rate", *_csv_names(keys),
                    "spend_usd", "seconds", "returncode", "dir", "error"])
        for r in runs:
            w.writerow([r.arm, r.seed, r.status, len(r.steps), _cell(r.final_reward), _cell(r.final_pass_rate),
                        *(_cell(r.channels.get(k)) for k in keys),
                        _cell(r.spend_usd), _cell(r.seconds), _cell(r.returncode), r.dir,
                        r.error.splitlines()[0] if r.error else ""])
    with paths["curves_csv"].open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["arm", "step"] + [f"{m}_{c}" for m in ("reward", "pass_rate") for c in spread_cols])
        for s in summaries:
            for point in s.curve:
                w.writerow([s.arm, point["step"], *_cells(point["reward"]), *_cells(point["pass_rate"])])
    plotted = plot_curves(summaries, paths["png"])
    paths["md"].write_text(_markdown(runs, summaries, settings, window, plotted))
    if plotted is None:
        del paths["png"]
    return paths


def _csv_names(keys: list[str]) -> list[str]:
    """CSV column names of channel metrics: ``channels/hints/weight`` -> ``hints_weight``."""
    return [k.removeprefix("channels/").replace("/", "_") for k in keys]


def _cell(v: Any) -> str:
    return "" if v is None else str(v)


def _cells(s: Spread) -> list[str]:
    return [_cell(s.n), _cell(s.mean), _cell(s.std), _cell(s.min), _cell(s.max)]


def _markdown(runs: list[RunResult], summaries: list[ArmSummary], settings: dict[str, Any], window: int,
              plot: Path | None) -> str:
    lines = ["# Ablation: what each loss channel adds", ""]
    lines += [f"- {k}: `{v}`" for k, v in settings.items()]
    lines += [f"- final window: the last {window} logged step(s) of each run; arms aggregate their finished runs "
              "only; cells are mean ± sample std [min, max] across seeds", ""]
    lines += ["## Arms", "", arms_table(summaries), ""]
    known = arms()
    for s in summaries:
        what = known[s.arm].what if s.arm in known else ""
        lines.append(f"- `{s.arm}`: {what}" + "".join(f"; NOTE: {n}" for n in s.notes))
    lines += ["", "## Runs", "", runs_table(runs), ""]
    if plot is not None:
        lines += [f"![reward and pass rate per step]({plot.name})", ""]
    failed = [r for r in runs if r.status != "ok"]
    if failed:
        lines += ["## Failed runs", ""]
        for r in failed:
            lines += [f"### {r.arm} seed {r.seed}", "", "```", r.error or "(no log)", "```", ""]
    return "\n".join(lines)


def plot_curves(summaries: list[ArmSummary], png: Path) -> Path | None:
    """Reward and pass rate against steps: per arm the mean across seeds and a min-max band."""
    if not any(s.curve for s in summaries):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), squeeze=False)
    for ax, key, title in zip(axes[0], ("reward", "pass_rate"), ("reward (mean, min–max band)", "pass rate")):
        for s in summaries:
            pts = [(p["step"], p[key]) for p in s.curve if p[key].mean is not None]
            if not pts:
                continue
            x = [p[0] for p in pts]
            line, = ax.plot(x, [p[1].mean for p in pts], marker="o", ms=3, label=f"{s.arm} (n={s.runs_ok})")
            ax.fill_between(x, [p[1].min for p in pts], [p[1].max for p in pts], color=line.get_color(), alpha=0.2)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if key == "pass_rate":
            ax.set_ylim(-0.05, 1.05)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return png


# ------------------------------------------------------------------------------------------------------ ablation
def ablate(args: argparse.Namespace) -> list[RunResult]:
    """The whole ablation for the `trainer-client ablate` arguments: plan, run every arm x seed,
    aggregate, write the report and print its tables and failures; returns the runs (a failed run
    is a row with status "failed"; `trainer-client ablate` exits 1 when there is one).

    Raises `RunSetupError` before any run starts when the runs would share no step budget or have
    no env server."""
    from trainer_client.run import RunSetupError, resolve_config

    if args.max_usd is not None:
        args.overrides = list(args.overrides) + [f"replay.max_total_usd={args.max_usd}"]
    if getattr(args, "held_out", None):  # every run is evaluated on the held-out tasks before and after training
        if not Path(args.held_out).is_file():
            raise RunSetupError(f"--held-out {args.held_out}: no such task file")
        args.overrides = list(args.overrides) + [f"eval.tasks={Path(args.held_out).resolve()}"]
    base = resolve_config(args.config, args.overrides, env_urls=args.env_url, tasks=args.tasks,
                          max_steps=args.max_steps, env_token=args.env_token)
    max_steps = args.max_steps if args.max_steps is not None else int(base.grpo.get("max_steps", -1))
    if max_steps <= 0:
        raise RunSetupError("every run needs the same step budget: pass --max-steps N")
    if not base.env.urls:
        raise RunSetupError("no env server: pass --env-url or set env.urls")
    out = Path(args.out)
    weights = channel_weights(base)
    plan = Plan(args, out, max_steps, shlex.split(args.launcher), weights)
    where_on = " ".join(f"{n}={w:g}" for n, w in weights.items())
    window = args.window or max(1, max_steps // 4)
    print(f"ablation: {len(args.arms)} arm(s) x {len(args.seeds)} seed(s), {max_steps} step(s) each, "
          f"weights where on: {where_on}, under {out}", flush=True)
    runs = run_ablation(plan, args.arms, args.seeds, force=args.force, timeout_s=args.timeout_s)
    summaries = aggregate(runs, window)
    ceiling = base.replay.max_total_usd
    settings = {"config": args.config, "tasks": args.tasks or base.data.tasks or base.data.instance_ids,
                "arms": ",".join(a.name for a in args.arms), "seeds": ",".join(map(str, args.seeds)),
                "steps": max_steps, **{f"loss.{n}.weight (where on)": w for n, w in weights.items()},
                "teacher USD ceiling per run": "none" if math.isinf(ceiling) else ceiling,
                "held-out tasks": getattr(args, "held_out", None) or "none",
                "overrides": " ".join(args.overrides) or "none"}
    paths = write_report(out, runs, summaries, settings, window)
    print(f"\n{arms_table(summaries)}\n")
    for s in summaries:
        for note in s.notes:
            print(f"note: {s.arm}: {note}")
    failed = [r for r in runs if r.status != "ok"]
    for r in failed:
        log = Path(r.dir) / LOG
        print(f"failed: {r.arm} seed {r.seed}: {_reason(r)}" + (f" (log: {log})" if log.exists() else ""))
    print("report: " + "  ".join(str(p) for p in paths.values()))
    return runs
