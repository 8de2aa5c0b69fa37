"""What a training run prints besides the step table (metrics.py), so the console shows the run's
health and what the policy does:

- a step that lost rollouts to the env (infrastructure, masked out of the loss) says how many and on
  which replica, with the error; a replica that leaves rotation is named once, with the live ones;
- inside a long step, a heartbeat line every ``every_s`` seconds (rollouts finished, tool calls so
  far), plain lines that read the same on a terminal, a pipe or a log file;
- every ``sample_every`` steps one rollout of the step (its tool calls, their errors, its reward,
  its episode and the replica holding its trace) is printed, and every step's sample is kept in
  ``<output_dir>/samples.jsonl``.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from env_client.urls import http_base

__all__ = ["Heartbeat", "RunConsole", "describe_call", "rollout_summary"]

ARGS_SHOWN = 72  # characters of a call's arguments on the console (samples.jsonl keeps ARGS_KEPT)
ARGS_KEPT = 2000


def _write(text: str) -> None:
    from trainer_client.metrics import _write as write  # above tqdm's bar where there is one

    write(text)


def describe_call(arguments: dict[str, Any], limit: int = ARGS_KEPT) -> str:
    """A tool call's arguments as one line: the values only, in order, cut at ``limit``."""
    text = ", ".join(repr(v) if not isinstance(v, str) else json.dumps(v, ensure_ascii=False)
                     for v in arguments.values())
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def rollout_summary(env: Any) -> dict[str, Any]:
    """What a finished rollout did (a SweEnvironment after ``get_reward``): its episode, the replica
    holding its trace, its reward, an infra failure if any, and its tool calls."""
    replica = getattr(env, "replica_url", None)
    return {"episode_id": getattr(env, "episode_id", None), "instance_id": getattr(env, "instance_id", None),
            "replica": http_base(replica) if replica else None, "reward": getattr(env, "reward", None),
            "infra_error": getattr(env, "infra_error", None),
            "calls": [{"tool": t.get("tool_name"), "args": t.get("args", ""), "error_kind": t.get("error_kind")}
                      for t in getattr(env, "turns", [])]}


class RunConsole:
    """The main process's console lines about the env (lost rollouts, replicas, sampled episodes)."""

    def __init__(self, output_dir: str | Path | None, sample_every: int = 5) -> None:
        self.samples = Path(output_dir) / "samples.jsonl" if output_dir else None
        self.sample_every = sample_every
        self.down: set[str] = set()
        self._picked = 0

    def report(self, step: int, rollouts: list[dict[str, Any]], replicas: dict[str, bool]) -> None:
        """After a generation batch of step ``step``: every rank's rollout summaries and, per replica
        URL, whether it is live."""
        lost = [r for r in rollouts if r.get("infra_error")]
        if lost:
            where = Counter(r.get("replica") or "no replica" for r in lost)
            first = lost[0]["infra_error"]
            _write(f"[env] step {step}: {len(lost)} of {len(rollouts)} rollouts lost to the env (masked out of the "
                   f"loss): {', '.join(f'{n} on {url}' for url, n in where.items())}; first error: {first}")
        for url, live in replicas.items():
            if not live and url not in self.down:
                self.down.add(url)
                alive = [u for u, ok in replicas.items() if ok]
                _write(f"[env] replica {url} is out of rotation (its connection failed); new sessions go to "
                       f"{len(alive)} live replica(s): {', '.join(alive) or 'none'}")
        sample = self._pick(rollouts)
        if sample is None:
            return
        if self.samples is not None:
            self.samples.parent.mkdir(parents=True, exist_ok=True)
            with self.samples.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"step": step, **sample}, ensure_ascii=False) + "\n")
        if self.sample_every and (step - 1) % self.sample_every == 0:
            _write(self.format_sample(step, sample))

    def _pick(self, rollouts: list[dict[str, Any]]) -> dict[str, Any] | None:
        """One rollout of the batch, in turn over the batch's positions (not always the first)."""
        graded = [r for r in rollouts if not r.get("infra_error")] or rollouts
        if not graded:
            return None
        self._picked += 1
        return graded[self._picked % len(graded)]

    @staticmethod
    def format_sample(step: int, sample: dict[str, Any]) -> str:
        reward = sample.get("reward")
        head = (f"[sample] step {step}, {sample.get('instance_id')}: reward "
                f"{'-' if reward is None else format(reward, 'g')}, {len(sample['calls'])} tool call(s)")
        lines = [head]
        for n, call in enumerate(sample["calls"], 1):
            mark = f" -> {call['error_kind']}" if call.get("error_kind") else ""
            args = call.get("args") or ""
            args = args if len(args) <= ARGS_SHOWN else args[: ARGS_SHOWN - 3] + "..."
            lines.append(f"   {n:>2}. {call['tool']}({args}){mark}")
        where = sample.get("replica")
        if sample.get("episode_id") and where:
            lines.append(f"       trace: {where.rstrip('/')}/episodes/{sample['episode_id']}/trace")
        return "\n".join(lines)


class Heartbeat(TrainerCallback):
    """A line every ``every_s`` seconds while a step runs: how long, rollouts finished, tool calls.

    Reads the trainer's environments (their ``done`` flags and ``turns``) from a timer thread;
    prints nothing for a step shorter than ``every_s``."""

    def __init__(self, trainer: Any = None, every_s: float = 30.0) -> None:
        self.trainer = trainer
        self.every_s = every_s
        self._stop: threading.Event | None = None

    def _progress(self) -> str:
        pool = getattr(self.trainer, "_environment_pool", {}).get(None, []) if self.trainer is not None else []
        if not pool:
            return ""
        done = sum(bool(getattr(env, "done", False)) for env in pool)
        calls = sum(len(getattr(env, "turns", ())) for env in pool)
        return f": {done}/{len(pool)} rollouts finished, {calls} tool calls so far"

    def _beat(self, step: int, started: float, stop: threading.Event) -> None:
        while not stop.wait(self.every_s):
            _write(f"[step {step}] running for {time.monotonic() - started:.0f} s{self._progress()}")

    def on_train_begin(self, args, state, control, **kwargs):
        """A line as the first step starts (its heartbeat comes `every_s` later): loading the model and
        the trainer's set-up went before it, quiet, tens of seconds on a busy machine."""
        if state.is_world_process_zero and self.every_s > 0:
            _write(f"[step {state.global_step + 1}] starting: generating its rollouts")

    def on_step_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero or self.every_s <= 0:
            return
        self._stop = threading.Event()
        threading.Thread(target=self._beat, args=(state.global_step + 1, time.monotonic(), self._stop),
                         daemon=True, name="heartbeat").start()

    def on_step_end(self, args, state, control, **kwargs):
        if self._stop is not None:
            self._stop.set()
            self._stop = None

    on_train_end = on_step_end
