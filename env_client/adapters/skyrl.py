"""The env as a skyrl-gym `BaseTextEnv`: SkyRL's generator drives env replicas (docs/frameworks/skyrl.md).

    from env_client.adapters.skyrl import register
    register(["http://env-0:8000", "http://env-1:8000"], token=...)   # then env_class: swe_openenv

SkyRL makes one env per trajectory (`skyrl_gym.make(env_class, env_config=..., extras=row)`),
calls `init(prompt)` once and `step(model_text)` per turn. Here `init` opens a session on a
running replica (reset with the row's `instance_id`) and appends the issue to the prompt;
`step` parses the model's Hermes-style `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`
blocks (skyrl-gym has no parser of its own; this is the format SkyRL's tool-calling examples
and Qwen's chat template use), runs each call as an env tool, and returns the outputs as
`<tool_response>` messages. The reward is the hidden tests' at `submit` (0.0 before). A
trajectory ends (`done`) at `submit` or at its `max_turns`-th step, whichever comes first: at the
limit the client submits (`submit_on_truncation`, the default: the hidden tests' reward, the
submit marked `origin: client` and left out of state(t)), or, with `submit_on_truncation=False`,
it closes the session unsubmitted (reward 0.0; the server's trace ends at the last tool step,
ungraded). Every step after that is `done` too (reward 0.0, no env call). Each step's
`metadata` carries `episode_id`, `instance_id` and, for a failed call, `error_kind` /
`hint_template_key` / `error_source`. Sessions of one process share one `EnvClient` (one /mux
socket per replica); nothing here starts an environment. The dataset SkyRL reads (one row per
task: `prompt`, `env_class`, `instance_id`): `python -m env_client.adapters.skyrl_dataset`.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from contract import format_tool_output, get_profile
from env_client.adapters import shared_client, step_info
from env_client.adapters.skyrl_dataset import ENV_ID, system_prompt, write_dataset
from env_client.config import TOKEN_ENV

__all__ = ["ENV_ID", "URLS_ENV", "SWEOpenEnv", "parse_tool_calls", "register", "system_prompt", "write_dataset"]

#: comma-separated replica URLs, read when neither `register` nor `env_config` names them
URLS_ENV = "SWE_OPENENV_URLS"

_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def parse_tool_calls(text: str) -> list[tuple[str, dict[str, Any]]]:
    """The `(name, arguments)` of each `<tool_call>` block, in order (a missing closing tag, as
    when `</tool_call>` is the stop string, is tolerated). ValueError on a malformed block."""
    calls = []
    for body in _CALL.findall(text):
        try:
            call = json.loads(body)
        except json.JSONDecodeError as exc:
            raise ValueError(f"invalid JSON in <tool_call>: {exc}") from None
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise ValueError('a <tool_call> must hold {"name": ..., "arguments": {...}}')
        args = call.get("arguments") or {}
        if isinstance(args, str):  # some templates emit the arguments as a JSON string
            try:
                args = json.loads(args)
            except json.JSONDecodeError as exc:
                raise ValueError(f"invalid JSON in the arguments of {call['name']}: {exc}") from None
        if not isinstance(args, dict):
            raise ValueError(f"the arguments of {call['name']} must be a JSON object")
        calls.append((call["name"], args))
    return calls


def _flag(value: object) -> bool:
    """A boolean setting, also as a dataset column's string ("false", "0", "no": false)."""
    if isinstance(value, str):
        return value.strip().lower() not in ("", "0", "false", "no", "off")
    return bool(value)


def _setting(name: str, *sources: Any) -> Any:
    for source in sources:
        value = source.get(name) if hasattr(source, "get") else None
        if value is not None:
            return value
    return None


class SWEOpenEnv(BaseTextEnv):
    """One SWE episode on a running env replica, as a skyrl-gym text env.

    Settings, first found wins: the keyword arguments (what `register` stores), then
    `env_config` (what SkyRL's generator passes), then the row's `extras`: `urls` (else
    $SWE_OPENENV_URLS), `token` (else $ENV_SERVER_TOKEN), `max_output_chars` (tool output kept,
    head and tail), `submit_on_truncation` (default true: the client submits at `max_turns`;
    false: the episode ends there unsubmitted, reward 0.0).
    Per row (`extras`): `instance_id` (else the server picks), `episode_id` (optional),
    `max_turns` (SkyRL sets it from `generator.max_turns`; default 30).
    """

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None, **settings: Any):
        super().__init__()
        extras = dict(extras or {})
        sources = (settings, env_config or {}, extras)
        urls = _setting("urls", *sources) or os.environ.get(URLS_ENV, "")
        urls = [u.strip() for u in urls.split(",")] if isinstance(urls, str) else list(urls)
        self.urls = tuple(u for u in urls if u)
        if not self.urls:
            raise ValueError(f"no env replica: pass urls to register(), or set {URLS_ENV}")
        self.token = _setting("token", *sources) or os.environ.get(TOKEN_ENV) or None
        self.max_output_chars = _setting("max_output_chars", *sources)
        submit = _setting("submit_on_truncation", *sources)
        self.submit_on_truncation = True if submit is None else _flag(submit)
        self.max_turns = int(extras.get("max_turns") or _setting("max_turns", *sources) or 30)
        #: the env's tool profile (contract/tools.py; ValueError naming the nearest for an unknown one)
        self.profile = get_profile(_setting("profile", *sources))
        self.instance_id: str | None = extras.get("instance_id")
        self.episode_id: str | None = extras.get("episode_id")
        self.session = None
        self.done = False
        self.reward = 0.0
        self.final: dict[str, Any] = {}
        self.calls = 0
        self.errors = 0

    def init(self, prompt: list[dict[str, Any]] | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Open the episode; the prompt's last message gets the issue (a bare prompt: the tool
        system prompt + the issue). Info: episode_id, instance_id, step."""
        reset = {k: v for k, v in (("instance_id", self.instance_id), ("episode_id", self.episode_id)) if v}
        if self.profile.name != get_profile(None).name:
            reset["profile"] = self.profile.name
        self.session = shared_client(self.urls, self.token).open(**reset)
        obs = self.session.observation
        info = step_info(obs)
        self.episode_id, self.instance_id = info.get("episode_id"), info.get("instance_id")
        issue = obs.get("issue") or ""
        messages = [dict(m) for m in prompt or []]
        if messages:
            messages[-1]["content"] = f"{messages[-1].get('content') or ''}{issue}"
        else:
            messages = [{"role": "system", "content": system_prompt(profile=self.profile.name)},
                        {"role": "user", "content": issue}]
        return messages, info

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        ids = {"episode_id": self.episode_id, "instance_id": self.instance_id}
        if self.done:
            return BaseTextEnvStepOutput(observations=[], reward=0.0, done=True, metadata=ids)
        try:
            calls = parse_tool_calls(action)
            problem = None if calls else "no <tool_call> in the reply: call a tool, or submit to finish"
        except ValueError as exc:
            calls, problem = [], str(exc)
        outputs, infos = [], []
        for name, arguments in calls:
            obs = self.session.call_tool(name, arguments)
            outputs.append(format_tool_output(obs, self.max_output_chars, self.profile.output_style))
            infos.append(step_info(obs, name))
            self.calls += 1
            self.errors += "error_kind" in infos[-1]
            if obs.get("done"):
                self._finish(obs)
                break
        metadata: dict[str, Any] = {**ids, "tool_calls": infos}
        failed = next((i for i in infos if "error_kind" in i), None)
        if failed:  # the turn's first error site
            metadata.update({k: failed[k] for k in ("error_kind", "hint_template_key", "error_source") if k in failed})
        if problem:
            metadata["tool_call_error"] = problem
            outputs.append(problem)
        if not self.done and self.turns >= self.max_turns:  # the turn limit ends the episode
            metadata["truncated"] = True
            submit = self.profile.submit_tool
            if self.submit_on_truncation and submit is not None:  # graded: the hidden tests' reward
                obs = self.session.call_tool(submit, {}, metadata={"origin": "client"})
                infos.append(step_info(obs, submit))
                self._finish(obs)
            else:  # abandoned (or a profile that submits by its sentinel line only): reward 0.0, the session
                # closed unsubmitted (its trace ends ungraded)
                self._finish({"done": True, "reward": 0.0})
        if self.done:
            metadata.update(self.final)
            return BaseTextEnvStepOutput(observations=[], reward=self.reward, done=True, metadata=metadata)
        text = "\n".join(f"<tool_response>\n{out}\n</tool_response>" for out in outputs)
        return BaseTextEnvStepOutput(observations=[{"role": "user", "content": text}], reward=0.0, done=False,
                                     metadata=metadata)

    def _finish(self, obs: dict[str, Any]) -> None:
        """End the episode with `obs` (the submit's observation, or a bare `{"done", "reward"}` for
        one closed unsubmitted) and free the replica's slot now; the trace stays on the server."""
        self.done = True
        self.reward = float(obs.get("reward") or 0.0)
        self.final = {k: v for k, v in step_info(obs).items() if k not in ("step", "tool_name")}
        self.close()

    def close(self) -> None:
        if self.session is not None:
            session, self.session = self.session, None
            session.close()

    def get_metrics(self) -> dict[str, Any]:
        return {"resolved": float(bool(self.final.get("resolved"))), "tool_calls": self.calls,
                "tool_errors": self.errors}


def register(urls: str | list[str] | None = None, token: str | None = None, env_id: str = ENV_ID,
             **settings: Any) -> None:
    """Register `SWEOpenEnv` with skyrl-gym as `env_id`, bound to these replicas (in each process
    that calls `skyrl_gym.make`, e.g. SkyRL's Ray entrypoint). Unset urls/token fall back to
    $SWE_OPENENV_URLS / $ENV_SERVER_TOKEN when an env is made."""
    from skyrl_gym.envs.registration import register as skyrl_register

    kwargs = {k: v for k, v in {"urls": urls, "token": token, **settings}.items() if v is not None}
    skyrl_register(id=env_id, entry_point=f"{__name__}:SWEOpenEnv", kwargs=kwargs)
