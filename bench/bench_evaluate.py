"""Evaluation harness benchmark: episodes per minute of `evaluation.evaluate` and what the harness adds to a turn.

Starts the real env server (``env-server serve``, bwrap sandbox) on the demo task, then measures
in one run, side by side:

* throughput: episodes per minute of ``evaluate`` at concurrency 1, 8 and 32 (``--concurrency``),
  with a model that answers at once: an explore policy (``--turns`` bash ``ls`` calls, then
  submit) in process (the harness's own cost, no HTTP) and, beside it, the policy double of
  tests/support/policy_double.py (``--mode explore``, no delay) as its own process over HTTP
  (what a real endpoint's client adds). Every episode is graded by the env (the submit runs the
  task's hidden tests), as in a real evaluation;
* the harness's own time per turn beside a raw env step, on the same server in the same run:
  raw = a bare ``session.call_tool("bash", {"command": "ls"})`` round trip through env_client
  (a recorded session, as the evaluator's). Harness, at concurrency 1 on episodes of
  ``--long-turns`` turns (the context grows every turn), two ways: in the loop = each episode's
  wall time in the agent loop (evaluation/agent.py ``_loop``) minus the env's time (its steps) and
  the in-process policy's own time, against the same loop's env time per turn; alone = the same
  loop replayed on one of those recorded episodes with no env wait (a session that answers with
  its recorded observations), against the raw step's p50. The in-loop figure is the same work
  slowed by the server and its sandboxes sharing the cores. Target: the harness adds at most 5%
  to a turn's env time, both ways.

Prints a table and writes the figures as JSON (``--json``, default
``.cache/bench/bench_evaluate.json``). A pipe ping-pong round trip measured before and after tells
how busy the machine was.

    .venv/bin/python bench/bench_evaluate.py [--concurrency 1,8,32] [--episodes 32] [--turns 3]
        [--long-turns 30] [--long-episodes 3] [--replays 100] [--raw-steps 300] [--tasks FILE] [--no-http]

About 45 s on a quiet 2-core machine (in `make bench`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from itertools import count
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.append(str(ROOT / "tests"))  # the test helpers (support/), after the project

from machine import pipe_round_trip_us  # noqa: E402

import evaluation.agent as agent  # noqa: E402
from env_client import ClientConfig, ReplicaPool, SessionBase  # noqa: E402
from env_client.local_server import LocalEnvServer, start_env_server  # noqa: E402
from evaluation import AgentLimits, ChatEndpoint, EndpointConfig, EvalConfig, PolicyReply, evaluate  # noqa: E402
from task_factory.demo_task import demo_tasks_file  # noqa: E402

TARGET_OVERHEAD = 0.05  # the harness adds at most 5% to a turn's env time
LS = {"command": "ls"}
_RUNS = count()


class ExplorePolicy:
    """In process: `turns` bash `ls` calls, then submit (the policy double's explore mode, no HTTP)."""

    def __init__(self, turns: int):
        self.turns = turns
        self.own_s = 0.0  # time inside complete(): the model's, not the harness's

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> PolicyReply:
        t0 = time.perf_counter()
        n = sum(m.get("role") == "assistant" for m in messages)
        call = {"name": "bash", "arguments": json.dumps(LS)} if n < self.turns else {"name": "submit", "arguments": "{}"}
        reply = PolicyReply(tool_calls=[{"id": f"call_{n}", "type": "function", "function": call}],
                            finish_reason="tool_calls", prompt_tokens=100, completion_tokens=10)
        self.own_s += time.perf_counter() - t0
        return reply


class LoopTimer:
    """Wraps the agent loop, its env steps and render_context to split each episode's loop time into
    policy, env and the harness's own; restored on exit. `policy` of an episode: the time inside
    the policy's complete() when the policy measures it (`own_s`), else the loop's policy_s (an
    endpoint's round trip: the model's time)."""

    def __init__(self) -> None:
        self.episodes: list[dict[str, float]] = []
        self.render_s = 0.0
        self.step_s: dict[str, list[float]] = {}
        self.recordings: list[Any] = []  # each episode's EpisodeRecorder (the replayed episodes)

    def __enter__(self) -> LoopTimer:
        self._loop, self._render, self._step = agent._loop, agent.render_context, agent._step
        timer = self

        async def timed_loop(session: Any, policy: Any, limits: Any, ep: Any) -> Any:
            own0 = getattr(policy, "own_s", None)
            p0, e0, t0 = ep.policy_s, ep.env_s, time.perf_counter()
            r0 = timer.render_s
            out = await timer._loop(session, policy, limits, ep)
            wall = time.perf_counter() - t0
            timer.recordings.append(session.recording)
            own = getattr(policy, "own_s", None)
            timer.episodes.append({"wall": wall, "env": ep.env_s - e0, "turns": ep.turns,
                                   "policy": own - own0 if own is not None else ep.policy_s - p0,
                                   "policy_call": ep.policy_s - p0, "render": timer.render_s - r0})
            return out

        async def timed_step(session: Any, ep: Any, name: str, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return await timer._step(session, ep, name, *args, **kwargs)
            finally:
                timer.step_s.setdefault(name, []).append(time.perf_counter() - t0)

        def timed_render(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return timer._render(*args, **kwargs)
            finally:
                timer.render_s += time.perf_counter() - t0

        agent._loop, agent.render_context, agent._step = timed_loop, timed_render, timed_step
        return self

    def __exit__(self, *exc: Any) -> None:
        agent._loop, agent.render_context, agent._step = self._loop, self._render, self._step

    def harness_per_turn_s(self) -> float:
        """Mean per turn of (loop wall - policy - env): the harness's own time."""
        turns = sum(e["turns"] for e in self.episodes)
        return sum(e["wall"] - e["policy"] - e["env"] for e in self.episodes) / max(1, turns)

    def env_per_turn_s(self) -> float:
        """Mean env time per turn, the turn's tool calls (a graded submit excluded: it is not a turn's cost)."""
        turns = sum(e["turns"] for e in self.episodes)
        steps = [x for name, xs in self.step_s.items() if name != "submit" for x in xs]
        return sum(steps) / max(1, turns - len(self.step_s.get("submit", [])))

    def bash_ms(self) -> float:
        """Mean env time of the loop's bash steps (a submit, graded, is far longer)."""
        xs = self.step_s.get("bash", [])
        return sum(xs) / len(xs) * 1e3 if xs else float("nan")


def start_server(tasks: Path, data: Path, max_sessions: int) -> LocalEnvServer:
    return start_env_server(tasks, backend="bwrap", data_dir=data, startup_timeout_s=120, stop_grace_s=60,
                            extra_args=["--max-sessions", str(max_sessions), "--max-steps", "1000"])


def first_instance(tasks: Path) -> str:
    line = next(x for x in tasks.read_text(encoding="utf-8").splitlines() if x.strip())
    return json.loads(line)["instance_id"]


async def raw_steps(url: str, instance_id: str, n: int) -> list[float]:
    """Bare `call_tool("bash", ls)` round trips on one recorded session (the evaluator's client settings)."""
    pool = ReplicaPool([url], ClientConfig(record_episodes=True))
    try:
        await pool.connect()
        session, _ = await pool.open_session(instance_id=instance_id, context=AgentLimits().context())
        try:
            for _ in range(10):  # warm-up
                await session.call_tool("bash", LS)
            lat = []
            for _ in range(n):
                t0 = time.perf_counter()
                await session.call_tool("bash", LS)
                lat.append(time.perf_counter() - t0)
        finally:
            await pool.release(session)
    finally:
        await pool.close()
    return lat


def run_eval(url: str, tasks: Path, out: Path, policy: Callable[[], Any], episodes: int, concurrency: int,
             max_turns: int) -> tuple[dict[str, Any], float]:
    config = EvalConfig(env_urls=[url], tasks=str(tasks), instance_ids=[first_instance(tasks)], samples=episodes,
                        concurrency=concurrency, out=str(out), limits=AgentLimits(max_turns=max_turns),
                        progress=False, fresh=True)

    async def go() -> dict[str, Any]:
        p = policy()  # made inside the run's event loop (an httpx pool is bound to one)
        try:
            return await evaluate(config, p)
        finally:
            if hasattr(p, "aclose"):
                await p.aclose()

    t0 = time.perf_counter()
    summary = asyncio.run(go())
    return summary, time.perf_counter() - t0


@contextlib.contextmanager
def http_double(tasks: Path, turns: int, log_dir: Path):
    from support.policy_double import PolicyDouble

    with PolicyDouble(tasks, "explore", log_dir, turns=turns) as double:
        yield double


def throughput(url: str, tasks: Path, tmp: Path, policy: Callable[[], Any], episodes: int, conc: int,
               turns: int) -> dict[str, Any]:
    """One point: `episodes` episodes, `conc` at a time. Episodes/min over the episodes' wall
    (evaluate's own, without writing the report); the evaluator process's CPU per episode."""
    cpu0 = time.process_time()
    with LoopTimer() as timer:
        summary, total = run_eval(url, tasks, tmp / f"eval-{next(_RUNS)}", policy, episodes, conc, turns + 5)
    cpu = time.process_time() - cpu0
    o = summary["overall"]
    n = o["scored"] + o["lost"]
    wall = summary["wall_s"] or total
    return {"concurrency": conc, "episodes": n, "lost": o["lost"], "wall_s": wall, "episodes_per_min": n / wall * 60,
            "env_bash_ms": timer.bash_ms(), "evaluator_cpu_ms_per_episode": cpu / max(1, n) * 1e3,
            "end_reasons": summary["end_reasons"]}


class ReplaySession(SessionBase):
    """A session that answers with a recorded real episode's observations at once: the agent loop
    runs on it with no env wait, so what it takes beyond the policy is the harness's own time."""

    connection = None

    def __init__(self, recording: Any):
        super().__init__(ClientConfig(record_episodes=True))
        self.reset_obs = recording.head["observation"]
        self.reset_params = {k: v for k, v in recording.head.items() if k in ("instance_id", "context")}
        self.observations = [s["observation"] for s in recording.steps]
        self.at = 0

    async def _request(self, type_: str, data: dict | None, timeout_s: float | None = None) -> dict:
        if type_ == "reset":
            self.at = 0
            return {"type": "observation", "data": dict(self.reset_obs)}
        obs = self.observations[min(self.at, len(self.observations) - 1)]
        self.at += 1
        return {"type": "observation", "data": dict(obs)}

    async def close(self) -> None:
        pass


async def replay_loop(recording: Any, turns: int, repeat: int) -> dict[str, float]:
    """The agent loop over a recorded episode `repeat` times: per turn, wall - policy - env."""
    wall = policy = env = 0.0
    n = 0
    for _ in range(repeat):
        session = ReplaySession(recording)
        await session.reset(**session.reset_params)
        ep, pol = agent._Episode(), ExplorePolicy(turns)
        t0 = time.perf_counter()
        await agent._loop(session, pol, AgentLimits(max_turns=turns + 5), ep)
        wall += time.perf_counter() - t0
        policy, env, n = policy + pol.own_s, env + ep.env_s, n + ep.turns
    return {"harness_us_per_turn": (wall - policy - env) / n * 1e6, "client_us_per_step": env / n * 1e6,
            "turns": n}


def overhead(url: str, tasks: Path, tmp: Path, long_turns: int, repeat: int, replays: int) -> dict[str, Any]:
    """Concurrency 1, `repeat` episodes of `long_turns` ls turns: per-turn harness vs env time, in
    the loop on the real server and on the same episodes replayed without an env wait."""
    with LoopTimer() as timer:
        run_eval(url, tasks, tmp / "overhead", lambda: ExplorePolicy(long_turns), repeat, 1, long_turns + 5)
    eps = timer.episodes
    turns = sum(e["turns"] for e in eps)
    asyncio.run(replay_loop(timer.recordings[0], long_turns, 5))  # warm-up
    direct = asyncio.run(replay_loop(timer.recordings[0], long_turns, replays))
    return {"episodes": len(eps), "turns": turns, "harness_us_per_turn": timer.harness_per_turn_s() * 1e6,
            "render_us_per_turn": sum(e["render"] for e in eps) / turns * 1e6,
            "policy_us_per_turn": sum(e["policy"] for e in eps) / turns * 1e6,
            "policy_call_us_per_turn": sum(e["policy_call"] for e in eps) / turns * 1e6,
            "policy_call_overhead_us": sum(e["policy_call"] - e["policy"] for e in eps) / turns * 1e6,
            "env_bash_ms": timer.bash_ms(), "env_ms_per_turn": timer.env_per_turn_s() * 1e3, "replayed": direct}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", default="1,8,32", help="concurrency points, comma-separated")
    ap.add_argument("--episodes", type=int, default=32, help="episodes per throughput point (samples of the task)")
    ap.add_argument("--turns", type=int, default=3, help="bash ls turns per episode before submit (throughput)")
    ap.add_argument("--long-turns", type=int, default=30, help="turns of the overhead episodes")
    ap.add_argument("--long-episodes", type=int, default=3, help="overhead episodes")
    ap.add_argument("--replays", type=int, default=100, help="replays of a recorded overhead episode")
    ap.add_argument("--raw-steps", type=int, default=300, help="bare call_tool round trips")
    ap.add_argument("--tasks", type=Path, default=None, help="task file (default: the demo task); its first task runs")
    ap.add_argument("--no-http", action="store_true", help="skip the HTTP policy double column")
    ap.add_argument("--json", type=Path, default=ROOT / ".cache" / "bench" / "bench_evaluate.json")
    a = ap.parse_args()
    tasks = a.tasks or demo_tasks_file()
    points = [int(x) for x in a.concurrency.split(",") if x]
    rtt_before = pipe_round_trip_us()
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-evaluate-") as tmp_s:
        tmp = Path(tmp_s)
        server = start_server(tasks, tmp / "env-data", max(points) + 8)
        try:
            instance = first_instance(tasks)
            raw = asyncio.run(raw_steps(server.url, instance, a.raw_steps))
            over = overhead(server.url, tasks, tmp, a.long_turns, a.long_episodes, a.replays)
            raw_after = asyncio.run(raw_steps(server.url, instance, a.raw_steps))
            inproc = [throughput(server.url, tasks, tmp, lambda: ExplorePolicy(a.turns), a.episodes, c, a.turns)
                      for c in points]
            http: list[dict[str, Any]] = []
            if not a.no_http:
                with http_double(tasks, a.turns, tmp) as double:
                    cfg = EndpointConfig(base_url=double.base_url, model="policy-double", max_retries=0)
                    http = [throughput(server.url, tasks, tmp, lambda: ChatEndpoint(cfg), a.episodes, c, a.turns)
                            for c in points]
        finally:
            server.stop()
    total = time.perf_counter() - t_start
    rtt_after = pipe_round_trip_us()
    report(a, tasks, raw + raw_after, over, inproc, http, rtt_before, rtt_after, total)


def report(a: argparse.Namespace, tasks: Path, raw: list[float], over: dict[str, Any], inproc: list[dict[str, Any]],
           http: list[dict[str, Any]], rtt_before: float, rtt_after: float, total: float) -> None:
    raw_ms = statistics.median(raw) * 1e3
    direct_ms = over["replayed"]["harness_us_per_turn"] / 1e3
    in_loop_ms = over["harness_us_per_turn"] / 1e3
    # the target, two ways: the harness in the loop against the same loop's env time per turn (same
    # episodes, same load), and the harness alone (replayed) against a bare step's p50 (strict)
    share_in_loop, share = in_loop_ms / over["env_ms_per_turn"], direct_ms / raw_ms
    met = share <= TARGET_OVERHEAD and share_in_loop <= TARGET_OVERHEAD
    w = 24
    print(f"evaluation harness bench: {first_instance(tasks)}, real env server (bwrap), {os.cpu_count()} cores")
    print(f"throughput: {a.episodes} episodes per point, each {a.turns} x bash ls + submit (graded by the env)")
    print(f"{'':36}{'in-process policy':>{w}}{'HTTP policy double':>{w}}")
    for i, row in enumerate(inproc):
        h = http[i] if i < len(http) else None
        cells = [row] + ([h] if h else [])
        print(f"{'concurrency ' + str(row['concurrency']) + ': episodes/min':36}"
              + "".join(f"{c['episodes_per_min']:>{w}.1f}" for c in cells))
        print(f"{'  bash step ms | evaluator CPU ms/ep':36}"
              + "".join(f"{c['env_bash_ms']:>{w - 10}.1f} |{c['evaluator_cpu_ms_per_episode']:>8.1f}" for c in cells))
    print(f"{'lost episodes':36}{sum(r['lost'] for r in inproc):>{w}}"
          + (f"{sum(r['lost'] for r in http):>{w}}" if http else ""))
    print(f"per turn at concurrency 1 ({over['episodes']} episodes x {a.long_turns} turns, the context growing):")
    print(f"{'  raw env step, call_tool(bash ls)':36}{raw_ms:>10.3f} ms p50, {statistics.fmean(raw) * 1e3:.3f} ms mean "
          f"({len(raw)} calls, half before and half after the loop runs)")
    print(f"{'  env time per turn in the loop':36}{over['env_ms_per_turn']:>10.3f} ms mean (bash steps "
          f"{over['env_bash_ms']:.3f} ms mean; the graded submit apart)")
    print(f"{'  harness in the loop':36}{in_loop_ms:>10.3f} ms = loop - policy - env (render_context "
          f"{over['render_us_per_turn'] / 1e3:.3f} ms; calling the policy {over['policy_call_overhead_us'] / 1e3:.3f} ms)")
    r = over["replayed"]
    print(f"{'  harness alone, the episode replayed':36}{direct_ms:>10.3f} ms = loop - policy - client, {r['turns']} turns "
          f"with no env wait (env_client's part {r['client_us_per_step'] / 1e3:.3f} ms, counted as env)")
    print(f"target: the harness adds <= {TARGET_OVERHEAD:.0%} to a turn's env time: in the loop {in_loop_ms:.3f} / "
          f"{over['env_ms_per_turn']:.3f} ms = {share_in_loop:.1%}; alone {direct_ms:.3f} / {raw_ms:.3f} ms (raw p50) "
          f"= {share:.1%} -> {'MET' if met else 'NOT MET'}")
    print(f"machine: pipe ping-pong round trip {rtt_before:.1f} us before, {rtt_after:.1f} us after "
          f"(a quiet 2-core VM here: ~7 us); bench {total:.0f} s")
    data = {"bench": "bench_evaluate", "tasks": str(tasks), "instance_id": first_instance(tasks),
            "cores": os.cpu_count(), "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
            "raw_step_ms": {"p50": raw_ms, "p90": sorted(raw)[int(.9 * len(raw))] * 1e3, "n": len(raw)},
            "overhead": over, "harness_share_of_env_step": share, "harness_share_in_loop": share_in_loop,
            "target": TARGET_OVERHEAD, "target_met": met,
            "throughput_in_process": inproc, "throughput_http_double": http,
            "pipe_rtt_us": {"before": rtt_before, "after": rtt_after}, "wall_s": total}
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(f"results: {a.json}")


if __name__ == "__main__":
    main()
