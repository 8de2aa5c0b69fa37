"""Evaluate a policy on a task set: k samples per task, N episodes at a time, resumable.

    config = EvalConfig(env_urls=["http://127.0.0.1:8000"], tasks="held_out.jsonl", samples=4,
                        concurrency=8, out="runs/eval")
    summary = asyncio.run(evaluate(config, ChatEndpoint(endpoint_config)))

What lands in `out` (docs/evaluation.md):
- `results.jsonl`: one `EpisodeResult` per finished episode, appended as each ends (a rerun
  keeps them and runs only what is missing; a lost episode is run again);
- `rollouts.jsonl` (and `rollouts.parquet` with `parquet=True`): the episodes as
  `env_client.export` records, token ids and log-probs included when the endpoint returned them;
- `predictions.jsonl`: SWE-bench's predictions format for the tasks imported from
  SWE-bench-family rows (per task, its first scored sample whose graded diff is known; a task
  without one gets no prediction and the report names it);
- `report.json`, `report.md`, `report.png`: the numbers (evaluation/stats.py) and a plot;
- `eval_config.json`: what was run (a rerun with other settings is refused unless `fresh`).

An attempt lost to the env, its sandbox, grading or the model endpoint is retried up to
`max_attempts` times (on whichever replica is live); still lost, it is reported as lost and
left out of every rate, never counted as a 0. What lost attempts used (tokens, cost) is kept
(`EpisodeResult.lost_usage`, carried over when a rerun runs a lost episode again) and counted
in the report's totals.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from pydantic import BaseModel, ConfigDict, Field

from env_client import (ClientConfig, EnvAuthError, NoLiveReplicaError, ReplicaPool, RolloutRecord,
                        read_jsonl, write_parquet)

from .agent import AgentLimits, EpisodeResult, LostEpisode, Policy, TaskRef, Usage, run_episode
from .endpoint import EndpointError
from .report import write_report
from .stats import summarize
from .tasksets import TaskSetError, read_task_lines, repo_of

__all__ = ["EvalConfig", "EvaluationError", "evaluate", "load_task_refs", "read_results"]

RESULTS = "results.jsonl"
ROLLOUTS = "rollouts.jsonl"
PREDICTIONS = "predictions.jsonl"
CONFIG = "eval_config.json"


class EvaluationError(Exception):
    """The run could not go on (a refused token, no live replica, an endpoint that refuses every
    request, a task file or output directory that does not fit); finished episodes are kept."""


class EvalConfig(BaseModel):
    """One evaluation run (everything but the policy)."""

    model_config = ConfigDict(extra="forbid")

    env_urls: list[str] = Field(min_length=1, description="env server replicas")
    tasks: str | None = Field(None, description="task file (JSON list or JSONL): instance_id, source, repo")
    instance_ids: list[str] | None = Field(None, description="these tasks only (default: every task of the file)")
    samples: int = Field(1, ge=1, description="episodes per task (n of pass@k)")
    concurrency: int = Field(8, ge=1, description="episodes at a time")
    out: str = Field(description="output directory")
    model_name: str = Field("model", description="model_name_or_path of the predictions and the report")
    limits: AgentLimits = Field(default_factory=AgentLimits)
    max_attempts: int = Field(3, ge=1, description="attempts of an episode lost to infrastructure")
    retry_backoff_s: float = Field(2.0, ge=0.0)
    parquet: bool = Field(False, description="also write rollouts.parquet (needs pyarrow)")
    fresh: bool = Field(False, description="discard the output directory's earlier results")
    progress: bool = True
    heartbeat_s: float = Field(20.0, ge=0.0, description="with progress: when no episode finished for this long, "
                               "a line says how many are running (0: never)")
    client: ClientConfig = Field(default_factory=ClientConfig)
    describe: dict[str, Any] = Field(default_factory=dict, description="what the report says about the policy "
                                     "(endpoint, sampling; never a key)")

    def identity(self) -> dict[str, Any]:
        """What must match for a rerun to continue the same evaluation."""
        policy = {k: v for k, v in self.describe.items() if k != "model"}  # where it is served may move
        return {"tasks": self.tasks, "instance_ids": self.instance_ids, "samples": self.samples,
                "model_name": self.model_name, "policy": policy,
                # the default profile is left out: folders written before profiles existed still continue
                "limits": self.limits.model_dump(exclude={"profile"} if self.limits.profile == "default" else None)}


def load_task_refs(config: EvalConfig) -> list[TaskRef]:
    """The tasks to evaluate (file order, `instance_ids` filtered), with their source and repo."""
    if config.tasks is None:
        if not config.instance_ids:
            raise EvaluationError("give a task file (tasks) or instance_ids")
        return [TaskRef(instance_id=i, repo=repo_of({"instance_id": i})) for i in dict.fromkeys(config.instance_ids)]
    path = Path(config.tasks)
    try:
        rows = read_task_lines(path)
    except TaskSetError as exc:
        raise EvaluationError(str(exc)) from None
    refs: dict[str, TaskRef] = {}
    for row, _ in rows:
        refs.setdefault(row["instance_id"], TaskRef(instance_id=row["instance_id"], source=row.get("source"),
                                                    repo=repo_of(row)))
    if config.instance_ids:
        missing = [i for i in config.instance_ids if i not in refs]
        if missing:
            raise EvaluationError(f"instance ids not in {path}: {', '.join(missing[:5])}")
        return [refs[i] for i in dict.fromkeys(config.instance_ids)]
    if not refs:
        raise EvaluationError(f"{path} holds no tasks")
    return list(refs.values())


def _complete_lines(path: Path) -> None:
    """Cut a line left half-written by a killed run, so appends start on a fresh line."""
    if not path.exists() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if not data.endswith(b"\n"):
        path.write_bytes(data[: data.rfind(b"\n") + 1])


def read_results(out: str | Path) -> dict[tuple[str, int], EpisodeResult]:
    """The finished episodes of an output directory: the last result per (instance, sample)."""
    path = Path(out) / RESULTS
    results: dict[tuple[str, int], EpisodeResult] = {}
    if not path.exists():
        return results
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            r = EpisodeResult.model_validate_json(line)
        except ValueError:
            continue  # a line cut by a kill
        results[(r.instance_id, r.sample)] = r
    return results


class _Progress:
    def __init__(self, total: int, done: int, stream: TextIO | None):
        self.total, self.done_before, self.stream = total, done, stream
        self.finished = self.resolved = self.scored = self.lost = 0
        self.running = 0
        self.start = self.last = time.monotonic()

    async def heartbeat(self, every_s: float) -> None:
        """While episodes run: a line whenever `every_s` pass without one (a slow policy or grading)."""
        if self.stream is None or every_s <= 0:
            return
        while True:
            await asyncio.sleep(min(1.0, every_s))
            now = time.monotonic()
            if now - self.last >= every_s:
                self.last = now
                print(f"[{self.done_before + self.finished}/{self.total}] {self.running} episode(s) running, "
                      f"{now - self.start:.0f} s in", file=self.stream, flush=True)

    def update(self, result: EpisodeResult) -> None:
        self.finished += 1
        self.lost += result.status == "lost"
        self.scored += result.status != "lost"
        self.resolved += result.status == "resolved"
        self.last = time.monotonic()
        if self.stream is None:
            return
        elapsed = time.monotonic() - self.start
        rate = self.finished / elapsed * 60 if elapsed > 0 else 0.0
        left = self.total - self.done_before - self.finished
        eta = f"{left / rate:.1f} min" if rate > 0 else "?"
        share = f"{self.resolved / self.scored:.1%}" if self.scored else "-"
        what = result.status if result.status != "lost" else f"lost ({result.lost_reasons[-1][:60]})"
        print(f"[{self.done_before + self.finished}/{self.total}] {result.instance_id} #{result.sample}: {what} "
              f"in {result.turns} turns · resolved {self.resolved}/{self.scored} ({share}) · lost {self.lost} · "
              f"{rate:.1f} episodes/min · ETA {eta}", file=self.stream, flush=True)


async def _attempts(pool: ReplicaPool, policy: Policy, task: TaskRef, sample: int, config: EvalConfig,
                    before: EpisodeResult | None = None) -> tuple[EpisodeResult, RolloutRecord | None]:
    """Up to `max_attempts` attempts of one episode; `before`: its lost result of an earlier run,
    whose attempts (reasons, usage) the result carries on."""
    reasons = list(before.lost_reasons) if before is not None else []
    usage = before.lost_usage if before is not None else Usage()
    done = before.attempts if before is not None else 0
    for attempt in range(1, config.max_attempts + 1):
        try:
            harness = getattr(policy, "run_episode", None)  # a harness with its own agent loop (harness.py)
            if harness is not None:
                result, record = await harness(pool, task, sample, config.limits)
            else:
                result, record = await run_episode(pool, policy, task, sample, config.limits)
        except LostEpisode as exc:
            reasons.append(exc.reason)
            usage = usage.plus(exc.usage)
            if attempt < config.max_attempts:
                await asyncio.sleep(config.retry_backoff_s * attempt)
            continue
        return result.model_copy(update={"attempts": done + attempt, "lost_reasons": reasons,
                                         "lost_usage": usage}), record
    lost = EpisodeResult(instance_id=task.instance_id, sample=sample, status="lost", task_source=task.source,
                         repo=task.repo, attempts=done + config.max_attempts, lost_reasons=reasons, lost_usage=usage)
    return lost, None


def _fatal(exc: BaseException) -> bool:
    return isinstance(exc, (EnvAuthError, NoLiveReplicaError)) or (isinstance(exc, EndpointError) and exc.fatal)


def _check_config(config: EvalConfig, out: Path) -> None:
    path = out / CONFIG
    identity = json.loads(json.dumps(config.identity()))  # as it reads back from the file
    if config.fresh:
        for name in (RESULTS, ROLLOUTS):
            (out / name).unlink(missing_ok=True)
    elif path.exists():
        try:
            before = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            before = None
        if before is not None and before != identity:
            changed = sorted(k for k in identity if before.get(k) != identity[k])
            raise EvaluationError(f"{out} holds an evaluation with other settings ({', '.join(changed)}): "
                                  "use another --out, or --fresh to discard it")
    path.write_text(json.dumps(identity, indent=2) + "\n", encoding="utf-8")


async def evaluate(config: EvalConfig, policy: Policy, *,
                   on_result: Callable[[EpisodeResult], None] | None = None) -> dict[str, Any]:
    """Run the evaluation (only the episodes `out` does not hold yet) and write its outputs;
    returns the report's summary. Raises `EvaluationError` when the run cannot go on."""
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    tasks = load_task_refs(config)
    _check_config(config, out)
    for name in (RESULTS, ROLLOUTS):
        _complete_lines(out / name)
    earlier = read_results(out)
    done = {k: r for k, r in earlier.items() if r.status != "lost"}
    todo = [(t, s) for t in tasks for s in range(config.samples) if (t.instance_id, s) not in done]
    total = len(tasks) * config.samples
    progress = _Progress(total, total - len(todo), sys.stderr if config.progress else None)
    if config.progress:
        print(f"evaluating {config.model_name} on {len(tasks)} tasks x {config.samples} samples "
              f"({len(done)} episodes already in {out}, {len(todo)} to run, {config.concurrency} at a time)",
              file=sys.stderr, flush=True)
    start = time.monotonic()
    client = config.client.model_copy(update={"record_episodes": True})
    pool = ReplicaPool(config.env_urls, client)
    semaphore = asyncio.Semaphore(config.concurrency)
    fatal: list[BaseException] = []

    with open(out / RESULTS, "a", encoding="utf-8") as results_fh, \
            open(out / ROLLOUTS, "a", encoding="utf-8") as roll_fh:

        async def one(task: TaskRef, sample: int) -> None:
            async with semaphore:
                if fatal:
                    return
                progress.running += 1
                try:
                    result, record = await _attempts(pool, policy, task, sample, config,
                                                     earlier.get((task.instance_id, sample)))
                except BaseException as exc:  # noqa: BLE001 - a fatal error stops the run below
                    if not isinstance(exc, asyncio.CancelledError):
                        fatal.append(exc)
                    raise
                finally:
                    progress.running -= 1
                if record is not None:
                    roll_fh.write(record.model_dump_json() + "\n")
                    roll_fh.flush()
                results_fh.write(result.model_dump_json() + "\n")
                results_fh.flush()
                os.fsync(results_fh.fileno())
                progress.update(result)
                if on_result is not None:
                    on_result(result)

        try:
            try:
                if todo:  # nothing left to run (a rerun to rewrite the report): no replica needed
                    await pool.connect()
            except (EnvAuthError, NoLiveReplicaError) as exc:
                raise EvaluationError(str(exc)) from None
            jobs = [asyncio.create_task(one(t, s)) for t, s in todo]
            beat = asyncio.create_task(progress.heartbeat(config.heartbeat_s))
            try:
                await asyncio.gather(*jobs)
            except BaseException:
                for job in jobs:
                    job.cancel()
                await asyncio.gather(*jobs, return_exceptions=True)
                if fatal and _fatal(fatal[0]):
                    raise EvaluationError(f"the run stopped: {fatal[0]} (finished episodes are kept in {out}; "
                                          "rerun the same command to continue)") from fatal[0]
                raise
            finally:
                beat.cancel()
        finally:
            closer = getattr(policy, "aclose", None)  # a harness's processes (harness.py)
            if closer is not None:
                await closer()
            await pool.close()
    wall = time.monotonic() - start
    return finish(config, wall_s=wall)


def finish(config: EvalConfig, wall_s: float | None = None) -> dict[str, Any]:
    """Write the report, the predictions and (if asked) the Parquet rollouts of `config.out`."""
    out = Path(config.out)
    tasks = load_task_refs(config)
    wanted = {(t.instance_id, s) for t in tasks for s in range(config.samples)}
    repos = {t.instance_id: t.repo for t in tasks}  # the task file's, by `repo_of` (a result may predate it)
    results = [r.model_copy(update={"repo": repos[r.instance_id]}) for k, r in read_results(out).items()
               if k in wanted]
    summary = summarize(results, config.samples, wall_s=wall_s)
    summary["predictions"] = _write_predictions(out, results, config.model_name)
    rollouts = _keep_rollouts(out / ROLLOUTS, {r.episode_id for r in results if r.status != "lost"})
    if config.parquet:
        write_parquet(rollouts, out / "rollouts.parquet")
    write_report(out, config, summary, results)
    return summary


def _keep_rollouts(path: Path, episode_ids: set[str | None]) -> list[RolloutRecord]:
    """The rollouts of the reported episodes, once each (a kill between an episode's rollout and
    its result line leaves a rollout whose episode was run again)."""
    if not path.exists():
        return []
    records = {r.episode_id: r for r in read_jsonl(path) if r.episode_id in episode_ids}
    kept = list(records.values())
    path.write_text("".join(r.model_dump_json() + "\n" for r in kept), encoding="utf-8")
    return kept


def _write_predictions(out: Path, results: list[EpisodeResult], model_name: str) -> dict[str, Any]:
    """predictions.jsonl: per SWE-bench task, the graded diff of its first scored sample whose
    diff is known. Returns what was written and the tasks without a prediction, with why."""
    by_task: dict[str, list[EpisodeResult]] = {}
    for r in sorted(results, key=lambda r: (r.instance_id, r.sample)):
        if r.task_source == "swe-bench":
            by_task.setdefault(r.instance_id, []).append(r)
    rows, without = [], {}
    for iid, samples in by_task.items():
        scored = [r for r in samples if r.status != "lost"]
        chosen = next((r for r in scored if r.model_patch is not None), None)
        if chosen is not None:
            rows.append({"instance_id": iid, "model_name_or_path": model_name, "model_patch": chosen.model_patch})
        elif not scored:
            without[iid] = "no scored sample (every sample lost)"
        else:
            without[iid] = "graded diff unknown: " + (scored[0].patch_error or "not recorded")
    path = out / PREDICTIONS
    if rows:
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    else:
        path.unlink(missing_ok=True)
    return {"tasks": len(by_task), "written": len(rows), "without": without}
