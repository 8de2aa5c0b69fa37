"""The env as a mini-swe-agent `Environment`: mini-swe-agent's own agents drive env replicas
(docs/frameworks/mini-swe-agent.md). Tested with mini-swe-agent 2.4.6.

    from minisweagent.agents.default import DefaultAgent
    from minisweagent.config import get_config_from_spec
    from minisweagent.models import get_model
    from env_client.adapters.minisweagent import SWEOpenEnvEnvironment

    config = get_config_from_spec("swebench.yaml")
    env = SWEOpenEnvEnvironment(urls=["http://env-0:8000"], instance_id="six__demo-1",
                                **{k: v for k, v in config["environment"].items() if k != "environment_class"})
    agent = DefaultAgent(get_model(config=config["model"]), env, **config["agent"])
    info = agent.run(env.issue)        # exit_status "Submitted", submission: the graded patch
    env.result["reward"], env.result["resolved"]

Each environment is one episode on a running replica, reset with the `bash-only` tool profile
(contract/tools.py: mini-swe-agent's protocol, served by the env) and the task's instance id:
`execute({"command": ...})` runs the command in a fresh `bash -c` at the repository root on the
replica (the server's 60 s limit and mini-swe-agent's environment variables) and returns
mini-swe-agent's `{"output", "returncode", "exception_info"}`. A command whose output's first line is
`COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` and that exits 0 ends the episode: the server grades the
rest of the output as the patch (its hidden tests), and `execute` raises mini-swe-agent's own
`Submitted` with the message its `LocalEnvironment` raises (the submission is the command's output
after the sentinel line). The grade stays on the environment (`result`: reward, resolved, the grade's
metadata, episode id) and is in `serialize()`, so an agent's saved trajectory carries it.

Other ends, each with an `exit` message as mini-swe-agent's agents expect them:
- the env's step budget (`env-server --max-steps`, 100 by default) used up without a submission: the
  server scores 0, `execute` raises mini-swe-agent's `LimitsExceeded` (exit_status `LimitsExceeded`,
  `extra.env_step_budget: true`). Run the server with `--max-steps` at least the agent's step limit
  times its tool calls per step (swebench.yaml: 250 model calls).
- the session lost (the replica gone, the session closed or broken, the sandbox failed): the session
  is released (nothing stays open on the server) and `execute` raises mini-swe-agent's
  `InterruptAgentFlow` with an exit whose exit_status is `EnvironmentLost` and whose content and
  `extra.exception_info` are one line saying what was lost and why. The episode is not scored.

`cwd` (choice made here): the agent's config names the repository's path (swebench.yaml: `/testbed`);
on the replica it is `/workspace`. A `cwd` (the argument, else `config.cwd`) that is that path, or
`/workspace`, runs the command at the repository root as sent; a directory below one of them becomes
`cd /workspace/<rest> && <command>`; any other directory becomes `cd <dir> && <command>` (a missing
one fails as `cd` does: return code 1 and its message). Nothing else in commands is rewritten: a
command that names `/testbed` itself fails there (`evaluate --harness mini-swe-agent` shows the
agent `/workspace` instead, see `run_instance`). `timeout`: every command runs with the server's limit
(60 s, mini-swe-agent's swebench value); a `timeout` argument other than that is answered with an
`exception_info` without running. Config `env` entries the server does not set itself (swebench.yaml's
`BASH_ENV`, for the SWE-bench images' conda) are not applied; `serialize()` lists them.

Imports no framework at module level: mini-swe-agent is imported when an environment is made
(`MissingDependencyError` naming the install line when it is absent). `python -m
env_client.adapters.minisweagent` runs one instance with mini-swe-agent's `DefaultAgent` and prints
one JSON line (`run_instance`); with ``--serve`` it runs instances one after another as requests arrive
on stdin, importing mini-swe-agent and litellm once (what `trainer-client evaluate --harness
mini-swe-agent` runs: litellm's import alone is 7 to 9 s of CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import posixpath
import shlex
import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from contract import SUBSHELL_ENV, SUBSHELL_TIMEOUT_S, get_profile
from env_client.config import TOKEN_ENV
from env_client.errors import EnvClientError, MissingDependencyError
from env_client.adapters import shared_client
from env_client.sync import SyncSession

__all__ = ["EXIT_LOST", "MINI_SWE_AGENT", "PROFILE", "REPO_ROOT", "URLS_ENV", "SWEOpenEnvEnvironment",
           "SWEOpenEnvEnvironmentConfig", "main", "run_instance"]

#: the mini-swe-agent release this adapter is tested with (pyproject's `minisweagent` extra)
MINI_SWE_AGENT = "mini-swe-agent==2.4.6"
#: the env's tool profile that is mini-swe-agent's protocol
PROFILE = "bash-only"
#: the repository's path on a replica
REPO_ROOT = "/workspace"
#: comma-separated replica URLs, read when `urls` is not given
URLS_ENV = "SWE_OPENENV_URLS"
#: the exit status of an episode whose session was lost
EXIT_LOST = "EnvironmentLost"
#: the server's note after a graded command's output (env_server/episode.py `_finish`)
_GRADE_NOTE = "\n\nSubmitted. Hidden tests: "
_FINAL_KEYS = ("resolved", "tests_passed", "tests_failed", "grade_error", "grade_error_source", "reward_hacking",
               "suspicious", "error_kind", "error_source", "error_message")



def _minisweagent_exceptions() -> Any:
    try:
        from minisweagent import exceptions
    except ImportError as exc:
        raise MissingDependencyError(
            f"the mini-swe-agent adapter needs mini-swe-agent, which is not installed here ({exc}): "
            f'pip install -e ".[client,minisweagent]" from a checkout (pins {MINI_SWE_AGENT})') from None
    return exceptions


def _one_line(text: str, limit: int = 400) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


class SWEOpenEnvEnvironmentConfig(BaseModel):
    """The environment's settings: where the episode runs, and mini-swe-agent's environment keys
    (``cwd``, ``timeout``, ``env``, ``interpreter``: what its configs' ``environment`` section holds)."""

    model_config = ConfigDict(extra="forbid")

    urls: list[str] = Field(default_factory=list, description=f"env replica URLs (else ${URLS_ENV})")
    token: SecretStr | None = Field(None, exclude=True, description=f"the replicas' bearer token (else ${TOKEN_ENV})")
    instance_id: str | None = Field(None, description="the task (None: the server picks)")
    episode_id: str | None = Field(None, description="the episode's id on the server (None: the server's)")
    cwd: str = Field("/testbed", description="the repository's path as the agent's config names it (mapped to "
                                             f"{REPO_ROOT} on the replica)")
    timeout: int = Field(int(SUBSHELL_TIMEOUT_S), description="seconds per command: the server's limit")
    env: dict[str, str] = Field(default_factory=dict, description="the config's variables (the server sets its own)")
    interpreter: list[str] = Field(default_factory=lambda: ["bash", "-c"])

    @field_validator("urls", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return [u.strip() for u in value.split(",") if u.strip()] if isinstance(value, str) else value

    @field_validator("interpreter")
    @classmethod
    def _bash_c(cls, value: list[str]) -> list[str]:
        if value != ["bash", "-c"]:
            raise ValueError(f"the env server runs every command with bash -c (interpreter {value} cannot be served)")
        return value


class SWEOpenEnvEnvironment:
    """One episode on an env replica as a mini-swe-agent `Environment` (module docstring).

    Made with mini-swe-agent's keyword style: ``SWEOpenEnvEnvironment(urls=..., instance_id=...,
    **config["environment"])``; the reset happens here (the issue is ``self.issue``). ``result`` holds
    the episode's outcome once it ended. ``close()`` releases the session (also at exit of a ``with``)."""

    def __init__(self, *, config_class: type = SWEOpenEnvEnvironmentConfig, **kwargs: Any):
        self._exceptions = _minisweagent_exceptions()
        kwargs.pop("environment_class", None)  # a config's `environment` section as is
        self.config = config_class(**kwargs)
        urls = tuple(self.config.urls) or tuple(u.strip() for u in os.environ.get(URLS_ENV, "").split(",")
                                                if u.strip())
        if not urls:
            raise ValueError(f"no env replica: pass urls=..., or set ${URLS_ENV}")
        token = self.config.token.get_secret_value() if self.config.token else os.environ.get(TOKEN_ENV) or None
        self.urls = urls
        reset: dict[str, Any] = {"profile": PROFILE}
        if self.config.instance_id:
            reset["instance_id"] = self.config.instance_id
        if self.config.episode_id:
            reset["episode_id"] = self.config.episode_id
        self.client = shared_client(urls, token)
        self.session: SyncSession | None = self.client.open(**reset)
        obs = self.session.observation
        meta = obs.get("metadata") or {}
        self.episode_id: str | None = meta.get("episode_id") or self.session.episode_id
        self.instance_id: str | None = meta.get("instance_id") or self.config.instance_id
        self.task_source: str | None = meta.get("task_source")
        self.issue: str = str(obs.get("issue") or obs.get("output") or "")
        #: the last observation the server sent (its output, metadata, reward, done)
        self.observation: dict[str, Any] = obs
        self.steps = 0
        #: failed commands by the env's error_kind, and seconds spent in env calls
        self.error_kinds: Counter[str] = Counter()
        self.env_s = 0.0
        #: the episode's outcome once it ended: exit_status, reward, resolved, the grade's metadata, ids
        self.result: dict[str, Any] = {}
        self.ignored = {k: v for k, v in self.config.env.items() if SUBSHELL_ENV.get(k) != v}

    # ------------------------------------------------------------ mini-swe-agent's protocol
    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        """Run ``action["command"]`` on the replica; mini-swe-agent's output dict, or its `Submitted` /
        `LimitsExceeded` / `InterruptAgentFlow` exits (module docstring)."""
        command = action.get("command", "") if isinstance(action, dict) else str(action)
        if self.session is None:
            return self._refused("the episode is over (its session was released)")
        if timeout is not None and timeout != self.config.timeout:
            return self._refused(f"this environment runs every command with the env server's limit of "
                                 f"{self.config.timeout} s (timeout={timeout} is not supported)")
        command = self._at(cwd or self.config.cwd, command)
        started = time.monotonic()
        try:
            obs = self.session.call_tool("bash", {"command": command})
        except EnvClientError as exc:
            self._lost(f"{type(exc).__name__}: {exc}")
        finally:
            self.env_s += time.monotonic() - started
        self.steps += 1
        self.observation = obs
        meta = obs.get("metadata") or {}
        if meta.get("error_kind"):
            self.error_kinds[str(meta["error_kind"])] += 1
        if obs.get("done"):
            return self._ended(obs)
        if meta.get("error_source") in ("env", "infra"):  # the sandbox or the server failed: not the agent's
            self._lost(f"{meta.get('error_kind')}: {meta.get('error_message') or obs.get('output') or ''}")
        return self.output_of(obs)

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return _merge(self.config.model_dump(), platform.uname()._asdict(),
                      {"instance_id": self.instance_id, "episode_id": self.episode_id, "repo_root": REPO_ROOT},
                      kwargs)

    def serialize(self) -> dict[str, Any]:
        return {"info": {
            "config": {"environment": self.config.model_dump(mode="json"),
                       "environment_type": f"{self.__class__.__module__}.{self.__class__.__name__}"},
            "swe_openenv": {"urls": list(self.urls), "profile": PROFILE, "episode_id": self.episode_id,
                            "instance_id": self.instance_id, "task_source": self.task_source, "steps": self.steps,
                            "error_kinds": dict(self.error_kinds), "env_s": round(self.env_s, 3),
                            "server_subshell": {"cwd": REPO_ROOT, "timeout_s": SUBSHELL_TIMEOUT_S,
                                                "env": dict(SUBSHELL_ENV)},
                            "env_not_applied": dict(self.ignored), **self.result}}}

    # ------------------------------------------------------------ the rest
    @staticmethod
    def output_of(observation: dict[str, Any]) -> dict[str, Any]:
        """mini-swe-agent's output dict of a server observation: the command's output, its return code and
        exception (a call the server refused before running anything: return code -1, its message)."""
        meta = observation.get("metadata") or {}
        text = str(observation.get("output") or "")
        if "returncode" not in meta:
            why = meta.get("error_message") or text or "the call was refused"
            return {"output": "", "returncode": -1,
                    "exception_info": f"An error occurred while executing the command: {why}"}
        return {"output": text, "returncode": meta["returncode"], "exception_info": meta.get("exception_info") or ""}

    def close(self) -> None:
        """Release the session now (idempotent): the episode ends unsubmitted if it had not ended."""
        session, self.session = self.session, None
        if session is None:
            return
        try:
            session.close()
        except Exception:  # noqa: BLE001 - a socket already gone: the server closed the session with it
            pass
        if not self.result:
            self.result = {"exit_status": "Closed", "done": False, "reward": 0.0, "resolved": False,
                           "episode_id": self.episode_id, "instance_id": self.instance_id}

    def __enter__(self) -> "SWEOpenEnvEnvironment":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def _at(self, cwd: str, command: str) -> str:
        """``command`` run at ``cwd`` on the replica (module docstring, "cwd")."""
        path = posixpath.normpath(cwd) if cwd else REPO_ROOT
        for alias in dict.fromkeys((posixpath.normpath(self.config.cwd), "/testbed", REPO_ROOT)):
            if path == alias:
                return command
            if path.startswith(alias.rstrip("/") + "/"):
                path = REPO_ROOT + path[len(alias.rstrip("/")):]
                break
        return f"cd {shlex.quote(path)} && {command}"

    def _refused(self, why: str) -> dict[str, Any]:
        return {"output": "", "returncode": -1,
                "exception_info": f"An error occurred while executing the command: {why}"}

    def _ended(self, obs: dict[str, Any]) -> dict[str, Any]:
        """The episode ended at this command: keep the grade, release the session, raise the exit."""
        meta = obs.get("metadata") or {}
        out = self.output_of(obs)
        text = out["output"]
        if _GRADE_NOTE in text:  # the command's own output, without the server's grade note
            text = text[: text.rindex(_GRADE_NOTE)]
        submission = get_profile(PROFILE).submission(text, out["returncode"])
        submitted = submission is not None
        reward = obs.get("reward")
        self.result = {"exit_status": "Submitted" if submitted else "LimitsExceeded", "done": True,
                       "reward": float(reward) if reward is not None else 0.0,
                       "resolved": meta.get("resolved") is True, "episode_id": self.episode_id,
                       "instance_id": self.instance_id, "step": meta.get("step"),
                       **{k: meta[k] for k in _FINAL_KEYS if k in meta}, "grade": meta}
        if not submitted and meta.get("error_source") in ("env", "infra"):
            self._lost(f"{meta.get('error_kind')}: {meta.get('error_message') or ''}")
        self.close()
        if submission is not None:
            self.result["submission"] = submission
            raise self._exceptions.Submitted({"role": "exit", "content": submission,
                                              "extra": {"exit_status": "Submitted", "submission": submission}})
        self.result["submission"] = ""
        raise self._exceptions.LimitsExceeded({"role": "exit", "content": "LimitsExceeded", "extra": {
            "exit_status": "LimitsExceeded", "submission": "", "env_step_budget": True}})

    def _lost(self, cause: str) -> None:
        """The episode cannot go on: release the session and end the agent with a one-line exit."""
        why = _one_line(f"env session lost (episode {self.episode_id}, {self.instance_id}, after {self.steps} "
                        f"commands): {cause}")
        self.close()
        self.result = {"exit_status": EXIT_LOST, "done": False, "reward": None, "resolved": None,
                       "episode_id": self.episode_id, "instance_id": self.instance_id, "exception_info": why}
        raise self._exceptions.InterruptAgentFlow({"role": "exit", "content": why, "extra": {
            "exit_status": EXIT_LOST, "submission": "", "exception_info": why}})


def _merge(*dicts: dict[str, Any]) -> dict[str, Any]:
    """Later dicts win; nested dicts merge (mini-swe-agent's ``recursive_merge``, without importing it)."""
    out: dict[str, Any] = {}
    for d in dicts:
        for key, value in d.items():
            out[key] = _merge(out[key], value) if isinstance(out.get(key), dict) and isinstance(value, dict) else value
    return out


# ---------------------------------------------------------------- one instance with DefaultAgent


def _usage(messages: list[dict[str, Any]]) -> dict[str, int]:
    prompt = completion = 0
    for m in messages:
        usage = ((m.get("extra") or {}).get("response") or {}).get("usage") if m.get("role") == "assistant" else None
        if isinstance(usage, dict):
            prompt += int(usage.get("prompt_tokens") or 0)
            completion += int(usage.get("completion_tokens") or 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion}


def run_instance(urls: Sequence[str] | str, instance_id: str | None, *, configs: Sequence[str] = ("swebench.yaml",),
                 model_name: str | None = None, model_class: str | None = None, api_key_env: str | None = None,
                 token: str | None = None, episode_id: str | None = None, output: str | None = None,
                 repo_path: str | None = REPO_ROOT) -> dict[str, Any]:
    """One instance with mini-swe-agent's `DefaultAgent`: its configs (``configs``: files, names of its
    built-in configs or ``key=value`` specs, merged as its ``-c`` options do), its model (`get_model`),
    this module's environment. Returns the outcome (exit_status, submission, reward, resolved, the grade,
    episode id, model calls, cost, tokens); ``output``: the trajectory file (mini-swe-agent's format, the
    env's outcome under ``info.swe_openenv``). ``api_key_env``: the variable holding the model's API key
    (set as ``model_kwargs.api_key``). ``repo_path``: the agent's templates name the repository by the
    environment's ``cwd`` (swebench.yaml: /testbed); that path is replaced by ``repo_path`` in them, so the
    agent is told where the repository is on the replica (None: the templates as they are)."""
    _minisweagent_exceptions()  # MissingDependencyError, naming the install line, when it is not installed
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.config import get_config_from_spec
    from minisweagent.models import get_model
    from minisweagent.utils.serialize import recursive_merge

    config = recursive_merge(*(get_config_from_spec(spec) for spec in configs))
    env_config = {k: v for k, v in (config.get("environment") or {}).items() if k != "environment_class"}
    agent_config = dict(config.get("agent") or {})
    rewrites = []
    named = env_config.get("cwd") or "/testbed"
    if repo_path and named != repo_path:
        for key in ("system_template", "instance_template"):
            if isinstance(agent_config.get(key), str) and named in agent_config[key]:
                agent_config[key] = agent_config[key].replace(named, repo_path)
                rewrites.append(f"agent.{key}: {named} -> {repo_path}")
    model_config = dict(config.get("model") or {})
    key = None
    if api_key_env:
        key = os.environ.get(api_key_env)
        if not key:
            raise ValueError(f"the API key variable ${api_key_env} is not set")
        model_config["model_kwargs"] = {**(model_config.get("model_kwargs") or {}), "api_key": key}
    if model_class:
        model_config["model_class"] = model_class
    urls = [u.strip() for u in urls.split(",")] if isinstance(urls, str) else list(urls)
    started = time.monotonic()
    model = get_model(model_name, model_config)
    env = SWEOpenEnvEnvironment(urls=urls, token=token, instance_id=instance_id, episode_id=episode_id, **env_config)
    agent = DefaultAgent(model, env, **agent_config)
    exit_status, submission, extra = None, "", {}
    try:
        info = agent.run(env.issue)
        exit_status, submission = info.get("exit_status"), info.get("submission") or ""
        extra = {k: v for k, v in info.items() if k not in ("exit_status", "submission")}
    except Exception as exc:  # noqa: BLE001 - the agent recorded it (its exit message); reported, not raised
        exit_status = type(exc).__name__
        extra = {"exception_str": _one_line(str(exc), 2000)}
    finally:
        env.close()
    outcome = {"exit_status": exit_status, "submission": submission, "instance_id": env.instance_id,
               "episode_id": env.episode_id, "task_source": env.task_source, "steps": env.steps,
               "error_kinds": dict(env.error_kinds), "env_s": round(env.env_s, 3),
               "reward": env.result.get("reward"), "resolved": env.result.get("resolved"),
               "env_exit_status": env.result.get("exit_status"), "grade": env.result.get("grade"),
               "exception_info": env.result.get("exception_info") or extra.get("exception_str"),
               "exit_extra": extra, "api_calls": agent.n_calls, "cost": agent.cost, **_usage(agent.messages),
               "wall_s": round(time.monotonic() - started, 3), "config_rewrites": rewrites,
               "mini_swe_agent": _version()}
    if output:  # mini-swe-agent's trajectory (agent.save's data), the API key left out
        from pathlib import Path

        data = agent.save(None, {"info": {"exit_status": exit_status, "submission": submission, **extra},
                                 "instance_id": env.instance_id})
        path = Path(output)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(_redact(data, key), indent=2), encoding="utf-8")
    return outcome


def _redact(data: Any, secret: str | None) -> Any:
    """``data`` with every string equal to ``secret`` replaced (the model's config holds the API key)."""
    if not secret:
        return data
    if isinstance(data, dict):
        return {k: _redact(v, secret) for k, v in data.items()}
    if isinstance(data, list):
        return [_redact(v, secret) for v in data]
    return "[redacted]" if data == secret else data


def _version() -> str | None:
    try:
        from importlib.metadata import version

        return version("mini-swe-agent")
    except Exception:  # noqa: BLE001
        return None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m env_client.adapters.minisweagent",
        description="Run one task with mini-swe-agent's DefaultAgent against a running env replica (the "
        "bash-only profile); prints one JSON line: exit status, submission, reward, resolved, the grade.")
    p.add_argument("--env-url", action="append", required=True, metavar="URL", help="env replica (repeatable)")
    p.add_argument("--instance-id", metavar="ID", help="the task (default: the server picks)")
    p.add_argument("--episode-id", metavar="ID")
    p.add_argument("-c", "--config", action="append", metavar="SPEC",
                   help="mini-swe-agent config: a file, a built-in name or key=value (repeatable, merged in "
                        "order; default swebench.yaml)")
    p.add_argument("-m", "--model", metavar="NAME", help="the model name (litellm's, e.g. openai/my-model)")
    p.add_argument("--model-class", metavar="CLASS", help="mini-swe-agent's model class (e.g. litellm)")
    p.add_argument("--api-key-env", metavar="VAR", help="environment variable holding the model's API key")
    p.add_argument("--repo-path", default=REPO_ROOT, metavar="PATH",
                   help=f"the repository path the agent's templates name instead of the config's cwd "
                        f"(default {REPO_ROOT}; 'keep': the templates as they are)")
    p.add_argument("--output", metavar="FILE", help="write the trajectory here")
    p.add_argument("--serve", action="store_true",
                   help="run instances one after another in this process (mini-swe-agent and litellm imported "
                        "once): one JSON request per line on stdin (instance_id, output, episode_id), one JSON "
                        "line per instance on stdout, until stdin ends")
    return p


def _outcome(args: argparse.Namespace, instance_id: str | None, output: str | None,
             episode_id: str | None) -> dict[str, Any]:
    """`run_instance`'s outcome, or the ``NotStarted`` one (one line: no episode ran, a refused reset, a bad config)."""
    try:
        return run_instance(args.env_url, instance_id, configs=args.config or ["swebench.yaml"],
                            model_name=args.model, model_class=args.model_class, api_key_env=args.api_key_env,
                            episode_id=episode_id, output=output,
                            repo_path=None if args.repo_path == "keep" else args.repo_path)
    except Exception as exc:  # noqa: BLE001 - reported as data, the caller decides
        return {"exit_status": "NotStarted", "error": _one_line(f"{type(exc).__name__}: {exc}", 2000),
                "error_type": type(exc).__name__}


def _fresh_global_stats() -> None:
    """mini-swe-agent's process-wide cost and call counters at zero, as in a process of its own: its
    ``MSWEA_GLOBAL_COST_LIMIT`` / ``MSWEA_GLOBAL_CALL_LIMIT`` hold per instance with ``--serve`` too."""
    try:
        from minisweagent.models import GLOBAL_MODEL_STATS as stats
    except ImportError:
        return
    with stats._lock:
        stats._cost, stats._n_calls = 0.0, 0


def _serve(args: argparse.Namespace) -> int:
    """``--serve``: instances as requests arrive on stdin. Stdout carries the outcomes only: what anything
    else writes there (a library's print) goes to stderr."""
    sys.stdout.flush()
    results = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    served = 0
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            if not isinstance(request, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            outcome = {"exit_status": "NotStarted", "error": f"bad request line: {exc}", "error_type": "BadRequest"}
        else:
            _fresh_global_stats()
            outcome = _outcome(args, request.get("instance_id"), request.get("output"), request.get("episode_id"))
        served += 1
        outcome["process"] = {"pid": os.getpid(), "instance": served}  # the n-th instance this process ran
        results.write(json.dumps(outcome) + "\n")
        results.flush()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.serve:
        given = [flag for flag, value in (("--instance-id", args.instance_id), ("--output", args.output),
                                          ("--episode-id", args.episode_id)) if value]
        if given:
            parser.error(f"--serve takes {', '.join(given)} from each request line, not from the command line")
        return _serve(args)
    outcome = _outcome(args, args.instance_id, args.output, args.episode_id)
    print(json.dumps(outcome), flush=True)
    return 1 if outcome["exit_status"] == "NotStarted" else 0


if __name__ == "__main__":
    sys.exit(main())
