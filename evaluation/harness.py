"""`trainer-client evaluate --harness mini-swe-agent`: every episode is one run of mini-swe-agent's own agent loop.

Episodes run in harness processes of mini-swe-agent's python (`--harness-python`: a venv with
`mini-swe-agent` and this project's client, `pip install -e ".[client,minisweagent]"`; default: this
interpreter when it has mini-swe-agent): `python -m env_client.adapters.minisweagent --serve`, one per
episode running at once (at most `--concurrency`), each running its episodes one after another (it
imports mini-swe-agent and litellm once: 7 to 9 s of CPU saved per episode) and replaced after
`EPISODES_PER_PROCESS`, or at once when an episode times out or the process dies. Each episode is
`DefaultAgent` with its config (`--harness-config`, default its SWE-bench config `swebench.yaml`:
templates, step limit, cost limit, observation template), its `LitellmModel` pointed at the model
`evaluate` serves or was given (`openai/<model name>` at the OpenAI-compatible base URL, the sampling
flags as `model_kwargs`), and `SWEOpenEnvEnvironment` (the env's `bash-only` profile) on the run's
replicas. The episode is scored by the env's hidden tests as every evaluation is; the result, the
server's rollout record and mini-swe-agent's trajectory (`OUT/trajectories/`) feed the same outputs
(results, report, predictions).

What is set on top of the config (recorded in the report's settings):
- the model: `model_name: openai/<name>`, `model_kwargs.api_base`, `api_key` (from `--api-key-env`,
  else a placeholder a local server ignores), `temperature`, `top_p`, `max_tokens` (evaluate's flags);
  `cost_tracking: ignore_errors` (a local model has no price in litellm's table; evaluate prices tokens
  itself with `--price-in/--price-out`);
- `agent.step_limit`: `--max-turns` when given (else the config's: 250 in swebench.yaml);
  `agent.wall_time_limit_seconds`: `--max-episode-s`;
- the agent's templates name the repository `/workspace` (where the env has it) instead of the
  config's `/testbed` (`run_instance`'s `repo_path`).

How a run ends, as `end_reason`: `Submitted` -> submitted (graded); `LimitsExceeded` -> turn_limit
(the agent's step or cost limit; unsubmitted, reward 0, as mini-swe-agent's own SWE-bench runs score
an empty patch), or step_limit when the env's step budget ended it (graded by the env: 0);
`TimeExceeded` -> time_limit; `RepeatedFormatError` -> no_tool_call; litellm's
`ContextWindowExceededError` -> context_limit. A lost session, a failed reset or an endpoint that
kept failing make the attempt lost (retried, never scored); an endpoint refusing the key, the model
or the request stops the run.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from env_client import EnvClientError, ReplicaPool, RolloutRecord

from .agent import AgentLimits, EndReason, EpisodeResult, LostEpisode, TaskRef, Usage
from .endpoint import EndpointConfig, EndpointError

__all__ = ["HARNESSES", "HarnessError", "MiniSweAgentHarness", "default_python", "describe", "probe"]

HARNESSES = ("default", "mini-swe-agent")
#: the release the harness is tested with (pyproject's `minisweagent` extra)
TESTED = "2.4.6"
DEFAULT_CONFIG = "swebench.yaml"
#: seconds a harness run may take past --max-episode-s (its last model call, the grading) before it is killed
GRACE_S = 900.0
#: episodes one harness process runs before it is replaced (a long run's memory stays bounded)
EPISODES_PER_PROCESS = 50
#: the longest outcome line read from a harness process (it holds the submitted patch)
OUTCOME_LIMIT = 64 * 1024 * 1024
#: the bytes of a harness process's stderr kept for the error that names its last lines
STDERR_BYTES = 64 * 1024
_FATAL = {"AuthenticationError": "auth", "PermissionDeniedError": "auth", "NotFoundError": "bad_request",
          "UnsupportedParamsError": "bad_request", "BadRequestError": "bad_request"}
_ENDS: dict[str, EndReason] = {"Submitted": "submitted", "LimitsExceeded": "turn_limit", "TimeExceeded": "time_limit",
                               "RepeatedFormatError": "no_tool_call", "ContextWindowExceededError": "context_limit"}


class HarnessError(Exception):
    """The harness cannot run at all (no mini-swe-agent at --harness-python, a config it cannot load)."""


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.setdefault("MSWEA_SILENT_STARTUP", "1")  # its banner would go to stdout, where the result line goes
    env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no download of litellm's price table at import
    return {**env, **(extra or {})}


_PROBE = """
import json, sys
from importlib.metadata import version
from minisweagent.config import get_config_from_spec
from minisweagent.utils.serialize import recursive_merge
import env_client.adapters.minisweagent
config = recursive_merge(*(get_config_from_spec(s) for s in sys.argv[1:]))
agent = config.get("agent") or {}
print(json.dumps({"version": version("mini-swe-agent"), "step_limit": agent.get("step_limit"),
                  "cost_limit": agent.get("cost_limit"), "python": sys.executable}))
"""


def default_python() -> str | None:
    """This interpreter when it has mini-swe-agent, else None."""
    import importlib.util

    return sys.executable if importlib.util.find_spec("minisweagent") is not None else None


def probe(python: str, configs: list[str]) -> dict[str, Any]:
    """mini-swe-agent's version and the merged config's limits at ``python`` (HarnessError, one line, when it
    cannot import mini-swe-agent and this project's client, or cannot load the configs)."""
    try:
        proc = subprocess.run([python, "-c", _PROBE, *configs], capture_output=True, text=True, timeout=180,
                              env=_env())
    except (OSError, subprocess.SubprocessError) as exc:
        raise HarnessError(f"--harness-python {python}: {exc}") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        hint = (' (a venv with mini-swe-agent and this project\'s client: python -m venv .venv-mini && '
                '.venv-mini/bin/pip install -e ".[client,minisweagent]", then --harness-python '
                '.venv-mini/bin/python)') if "ModuleNotFoundError" in last else ""
        raise HarnessError(f"mini-swe-agent cannot run from {python}: {last}{hint}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def describe(info: dict[str, Any], configs: list[str]) -> dict[str, Any]:
    """What the report says about the harness (part of the run's identity: a rerun with another is refused)."""
    return {"harness": f"mini-swe-agent {info['version']}" + ("" if info["version"] == TESTED else
                                                               f" (tested: {TESTED})"),
            "harness_config": " ".join(shlex.quote(c) for c in configs)}


class MiniSweAgentHarness:
    """Runs each episode as mini-swe-agent's `DefaultAgent` (module docstring); `evaluate` calls
    `run_episode` instead of its own agent loop."""

    name = "mini-swe-agent"

    def __init__(self, python: str, endpoint: EndpointConfig, env_urls: list[str], out: str | Path, *,
                 configs: list[str] | None = None, token: str | None = None, step_limit: int | None = None,
                 max_episode_s: float | None = None):
        self.python = python
        self.endpoint = endpoint
        self.env_urls = list(env_urls)
        self.out = Path(out)
        self.configs = list(configs or [DEFAULT_CONFIG])
        self.token = token
        self.step_limit = step_limit
        self.max_episode_s = max_episode_s
        self._idle: list[_HarnessProcess] = []
        self.started = 0  # harness processes started so far

    def overrides(self) -> list[str]:
        """The ``key=value`` config specs set on top of the configs (module docstring)."""
        e = self.endpoint
        specs = [f"model.model_name=openai/{e.model}", f"model.model_kwargs.api_base={e.base_url}",
                 "model.cost_tracking=ignore_errors", f"model.model_kwargs.max_tokens={e.max_tokens}"]
        if e.api_key_env is None:
            specs.append("model.model_kwargs.api_key=no-key")
        if e.temperature is not None:
            specs.append(f"model.model_kwargs.temperature={e.temperature}")
        if e.top_p is not None:
            specs.append(f"model.model_kwargs.top_p={e.top_p}")
        if self.step_limit is not None:
            specs.append(f"agent.step_limit={self.step_limit}")
        if self.max_episode_s is not None:
            specs.append(f"agent.wall_time_limit_seconds={int(self.max_episode_s)}")
        return specs

    def command(self) -> list[str]:
        """The harness process: ``python -m env_client.adapters.minisweagent --serve`` with the run's configs."""
        argv = [self.python, "-m", "env_client.adapters.minisweagent", "--serve"]
        for url in self.env_urls:
            argv += ["--env-url", url]
        for spec in [*self.configs, *self.overrides()]:
            argv += ["-c", spec]
        if self.endpoint.api_key_env:
            argv += ["--api-key-env", self.endpoint.api_key_env]
        return argv

    def _process_env(self) -> dict[str, str]:
        extra = {"MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": str(self.endpoint.max_retries + 1)}
        if self.token:
            extra["ENV_SERVER_TOKEN"] = self.token
        env = _env(extra)
        for key in ("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT",):  # the user's own setting wins
            if key in os.environ:
                env[key] = os.environ[key]
        return env

    async def _process(self) -> "_HarnessProcess":
        """An idle harness process, or a new one (at most one per episode running at once)."""
        while self._idle:
            process = self._idle.pop()
            if process.alive():
                return process
            await process.close()
        self.started += 1
        process = await _HarnessProcess.start(self.command(), self._process_env())
        print(f"mini-swe-agent: harness process {self.started} started (pid {process.pid}; it runs up to "
              f"{EPISODES_PER_PROCESS} episodes, one at a time)", file=sys.stderr, flush=True)
        return process

    async def run_episode(self, pool: ReplicaPool, task: TaskRef, sample: int,
                          limits: AgentLimits) -> tuple[EpisodeResult, RolloutRecord | None]:
        """One run of the agent on ``task`` in a harness process: its result and the server's record of the episode."""
        trajectory = self.out / "trajectories" / task.instance_id / f"{task.instance_id}.s{sample}.traj.json"
        trajectory.parent.mkdir(parents=True, exist_ok=True)
        process = await self._process()
        limit = limits.max_episode_s + GRACE_S
        try:
            outcome = await process.run({"instance_id": task.instance_id, "output": str(trajectory)}, limit)
        except BaseException:
            await process.close(kill=True)  # a timeout, a dead process, a cancelled run: its episode is gone
            raise
        if process.episodes >= EPISODES_PER_PROCESS:
            await process.close()
        else:
            self._idle.append(process)
        return self._result(outcome, task, sample), await self._record(pool, outcome.get("episode_id"))

    async def aclose(self) -> None:
        """Stop the idle harness processes (evaluate calls this when the run ends)."""
        idle, self._idle = self._idle, []
        await asyncio.gather(*(p.close() for p in idle))

    def _result(self, o: dict[str, Any], task: TaskRef, sample: int) -> EpisodeResult:
        status = str(o.get("exit_status"))
        usage = Usage(attempts=1, turns=int(o.get("api_calls") or 0), prompt_tokens=int(o.get("prompt_tokens") or 0),
                      completion_tokens=int(o.get("completion_tokens") or 0))
        usage = usage.model_copy(update={"cost_usd": self._cost(usage)})
        episode_id = o.get("episode_id")
        if status == "NotStarted":
            error = str(o.get("error") or "")
            if o.get("error_type", "").startswith(("Env", "NoLiveReplica")):
                lost = LostEpisode(f"env reset: {error}", episode_id)
                lost.usage = usage
                raise lost
            raise EndpointError("bad_request", f"mini-swe-agent could not start: {error}")
        if status in _FATAL:
            raise EndpointError(_FATAL[status], f"policy endpoint ({status}): {o.get('exception_info') or ''}")
        grade = o.get("grade") or {}
        if status not in _ENDS or (grade.get("error_source") in ("env", "infra")):
            why = o.get("exception_info") or grade.get("error_message") or ""
            lost = LostEpisode(f"{status}: {why}".strip(), episode_id)
            lost.usage = usage
            raise lost
        end = _ENDS[status]
        if status == "LimitsExceeded" and (o.get("exit_extra") or {}).get("env_step_budget"):
            end = "step_limit"
        reward = o.get("reward")
        resolved = o.get("resolved") is True
        wall = float(o.get("wall_s") or 0.0)
        env_s = float(o.get("env_s") or 0.0)
        flags = grade.get("suspicious")
        return EpisodeResult(
            instance_id=task.instance_id, sample=sample, status="resolved" if resolved else "unresolved",
            reward=float(reward) if reward is not None else 0.0, end_reason=end,
            task_source=o.get("task_source") or task.source, repo=task.repo, episode_id=episode_id,
            turns=usage.turns, steps=int(o.get("steps") or 0), prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens, cost_usd=usage.cost_usd, wall_s=wall,
            policy_s=max(0.0, wall - env_s), env_s=env_s, error_kinds=dict(o.get("error_kinds") or {}),
            reward_hacking=grade.get("reward_hacking") is True,
            suspicious=[f for f in flags if isinstance(f, str)] if isinstance(flags, list) else [],
            model_patch=str(o.get("submission") or ""))

    def _cost(self, usage: Usage) -> float:
        e = self.endpoint
        return (usage.prompt_tokens * e.price_in + usage.completion_tokens * e.price_out) / 1e6

    async def _record(self, pool: ReplicaPool, episode_id: str | None) -> RolloutRecord | None:
        """The server's record of the episode (its steps and markers; log-probs null), or None."""
        if not episode_id:
            return None
        try:
            return await (await pool.locate(episode_id)).export(episode_id)
        except (EnvClientError, OSError, ValueError):
            return None



class _HarnessProcess:
    """One ``--serve`` process of mini-swe-agent's python: a request line in, an outcome line out, one
    episode at a time; its stderr is read all along (its last STDERR_BYTES kept for the error that names them)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.episodes = 0
        self._stderr = b""  # its last STDERR_BYTES
        self._drain = asyncio.create_task(self._read_stderr())

    @classmethod
    async def start(cls, argv: list[str], env: dict[str, str]) -> "_HarnessProcess":
        proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE, env=env, start_new_session=True,
                                                    limit=OUTCOME_LIMIT)
        return cls(proc)

    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        while chunk := await self.proc.stderr.read(65536):
            self._stderr = (self._stderr + chunk)[-STDERR_BYTES:]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.returncode is None

    def stderr_tail(self, lines: int = 3) -> str:
        text = self._stderr.decode("utf-8", "replace").strip().splitlines()
        return " | ".join(s for s in text[-lines:] if s.strip())[-500:]

    async def run(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """The outcome of one episode (LostEpisode: no outcome within ``timeout_s``, or the process ended)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.episodes += 1
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            await self.proc.stdin.drain()
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout_s)
        except TimeoutError:
            raise LostEpisode(f"mini-swe-agent: no result within {timeout_s:g} s (killed)") from None
        except ValueError:  # asyncio's limit on a line
            raise LostEpisode(f"mini-swe-agent's result line is over {OUTCOME_LIMIT} bytes (killed)") from None
        except ConnectionError:  # its stdin is closed: it has ended
            line = b""
        try:
            outcome = json.loads(line) if line.strip() else None
        except ValueError:
            outcome = None
        if isinstance(outcome, dict):
            return outcome
        if line:  # alive, but that is no outcome (the caller kills it)
            text = line.decode("utf-8", "replace").strip()[:200]
            raise LostEpisode(f"mini-swe-agent answered a line that is not a result (killed): {text}")
        try:  # the process ended: its exit status and last words
            await asyncio.wait_for(asyncio.gather(self.proc.wait(), asyncio.shield(self._drain)), 5)
        except TimeoutError:
            pass
        raise LostEpisode(f"mini-swe-agent exited {self.proc.returncode} without a result: {self.stderr_tail()}")

    async def close(self, kill: bool = False, grace_s: float = 10.0) -> None:
        """End the process: its stdin closed (it exits after its episode), killed after ``grace_s`` or at once."""
        if self.proc.returncode is None:
            if not kill and self.proc.stdin is not None:
                self.proc.stdin.close()
                try:
                    await asyncio.wait_for(self.proc.wait(), grace_s)
                except TimeoutError:
                    pass
            if self.proc.returncode is None:  # asked to, or past the grace
                _kill(self.proc)
        await self.proc.wait()
        await self._drain


def _kill(proc: asyncio.subprocess.Process) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
