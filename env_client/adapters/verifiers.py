"""The env as a verifiers (v1) taskset: any verifiers harness solves SWE tasks on env replicas
(docs/frameworks/verifiers.md).

verifiers 0.4 runs a rollout as a harness program (e.g. `null`, `bash`, Codex) whose model
calls go through its interception server and whose tools come from the task's `Toolset`s,
each an MCP server. Here:

- `SWETaskset` loads the tasks (instance id + issue) from the env's task file;
- `SWETask` serves one `SWEToolset` per rollout, scores the hidden tests' reward (`@reward`)
  and stops the rollout once the episode is graded (`@stop`);
- `SWEToolset` (TOOL_PREFIX None: the tools are those of the configured tool profile, as the
  env names them; `tools.profile`, default `default`: `bash`, `view`, `str_replace`, `create`,
  `submit`; `bash-only`: mini-swe-agent's one `bash`) serves one MCP tool per tool of the profile,
  generated from the contract's registry; it opens a session on a running replica for its rollout
  (reset with the task's instance id and the profile) and forwards each MCP tool call the harness parsed from
  the model's tool calls; the tool result is the env's output (with the error message of a
  failed call). The rollout's typed state (`SWEState`, on `trace.state`) carries the
  `episode_id`, `instance_id`, and per step the tool name and, for a failed call, the
  `error_kind` / `hint_template_key` / `error_source` markers; `SWETask.finalize` copies it
  into `trace.info["swe_openenv"]`, which traces.jsonl keeps.

The rollout stops at the first model call after `submit`, so the submit result is in the
state (and the reward), not in the message graph.

verifiers loads a taskset by module name, so export it from a module of your own:
`from env_client.adapters.verifiers import SWETaskset; __all__ = ["SWETaskset"]`.
Replicas: `tools.urls` in the task config (else $SWE_OPENENV_URLS), the token from the
environment variable `tools.token_var` names (default $ENV_SERVER_TOKEN; never in the
config, which verifiers serialises into traces). Nothing here starts an environment.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import verifiers.v1 as vf
from pydantic import Field, SecretStr

from contract import DEFAULT_PROFILE, PROFILES, format_tool_output, get_profile
from env_client import ClientConfig, ReplicaPool
from env_client.adapters import step_info
from env_client.config import TOKEN_ENV

__all__ = ["URLS_ENV", "SWEState", "SWETask", "SWETaskConfig", "SWETaskset", "SWETasksetConfig", "SWEToolset",
           "SWEToolsetConfig"]

#: comma-separated replica URLs, read when the config names none
URLS_ENV = "SWE_OPENENV_URLS"


class SWEState(vf.State):
    """The rollout's env episode, as the tool calls saw it (`trace.state`)."""

    episode_id: str | None = None
    instance_id: str | None = None
    done: bool = False
    reward: float | None = None
    resolved: bool | None = None
    steps: list[dict[str, Any]] = Field(default_factory=list, description=(
        "per tool call: tool_name, episode_id, instance_id, step; error_kind, hint_template_key, "
        "error_source on a failed call; the grading summary on the last"))


class SWEToolsetConfig(vf.ToolsetConfig):
    urls: list[str] = Field(default_factory=list, description=f"env replica URLs (empty: ${URLS_ENV})")
    token_var: str = Field(TOKEN_ENV, description="environment variable holding the replicas' bearer token")
    max_output_chars: int | None = Field(None, gt=0, description="tool output kept (head and tail)")
    profile: str = Field(DEFAULT_PROFILE, description=f"the env's tool profile ({', '.join(PROFILES)})")


class SWEToolset(vf.Toolset[SWEToolsetConfig, SWEState]):
    """The env's tools for one rollout, each call a step of that rollout's env session."""

    TOOL_PREFIX = None

    async def setup(self) -> None:
        urls = self.config.urls or [u.strip() for u in os.environ.get(URLS_ENV, "").split(",") if u.strip()]
        if not urls:
            raise ValueError(f"no env replica: set tools.urls or ${URLS_ENV}")
        token = os.environ.get(self.config.token_var) or None
        self.pool = ReplicaPool(urls, ClientConfig(token=SecretStr(token) if token else None))
        self.session = None

    async def setup_task(self, task: vf.TaskData) -> None:
        """Open this rollout's episode: reset with the task's instance id. (The session ends at
        submit, or with this server's process: the replica closes a disconnected session.)"""
        reset = {"instance_id": task.id} if task.id else {}
        if self.config.profile != DEFAULT_PROFILE:
            reset["profile"] = self.config.profile
        self.session, _ = await self.pool.open_session(**reset)

    def register(self, mcp: Any) -> None:
        """One MCP tool per tool of the configured profile, generated from its contract entry
        (``Tool.method``: the tool's parameters are the method's, its docstring the description)."""
        for name, method in get_profile(self.config.profile).methods(SWEToolset._tool, asynchronous=True).items():
            mcp.add_tool(self._with_state(method.__get__(self)), name=name, description=method.__doc__.strip())

    async def _tool(self, name: str, arguments: dict[str, Any]) -> str:
        if self.session is None:
            return "error: the episode is over (submitted); no further tool calls run"
        observation = await self.session.call_tool(name, arguments)
        info = step_info(observation, name)
        state = self.state
        state.episode_id, state.instance_id = info.get("episode_id"), info.get("instance_id")
        state.steps.append(info)
        if observation.get("done"):
            state.done, state.reward, state.resolved = True, observation.get("reward"), info.get("resolved")
            session, self.session = self.session, None
            await self.pool.release(session)  # free the replica's slot; the trace stays on the server
        return format_tool_output(observation, self.config.max_output_chars,
                                  get_profile(self.config.profile).output_style)


class SWETaskConfig(vf.TaskConfig):
    tools: SWEToolsetConfig = SWEToolsetConfig()


class SWETask(vf.Task[vf.TaskData, SWEState, SWETaskConfig]):
    @classmethod
    def toolsets(cls, config: SWETaskConfig) -> list[vf.Toolset]:
        return [SWEToolset(config.tools)]

    async def finalize(self, trace: vf.Trace, runtime: Any) -> None:
        """Copy the episode record into `trace.info` (`trace.state` is not written to traces.jsonl)."""
        trace.info["swe_openenv"] = trace.state.model_dump(mode="json", exclude={"artifacts"})

    @vf.stop
    async def submitted(self, trace: vf.Trace) -> bool:
        return trace.state.done

    @vf.reward(weight=1.0)
    async def hidden_tests(self, trace: vf.Trace) -> float:
        """The env's reward at submit (1.0 resolved); 0.0 for an episode never submitted."""
        return float(trace.state.reward or 0.0)

    @vf.metric
    async def tool_errors(self, trace: vf.Trace) -> float:
        return float(sum("error_kind" in step for step in trace.state.steps))


class SWETasksetConfig(vf.TasksetConfig):
    tasks_path: str | None = Field(None, description="the env's task file (JSONL: instance_id, problem_statement "
                                                     "per line)")
    instance_ids: list[str] = Field(default_factory=list, description="only these instances (empty: all)")
    task: SWETaskConfig = SWETaskConfig()


class SWETaskset(vf.Taskset[SWETask, SWETasksetConfig]):
    def load(self) -> list[SWETask]:
        if not self.config.tasks_path:
            raise ValueError("SWETaskset needs taskset.tasks_path: the env's task file (JSONL)")
        keep = set(self.config.instance_ids)
        tasks = []
        for line in Path(self.config.tasks_path).read_text().splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            if keep and row["instance_id"] not in keep:
                continue
            data = vf.TaskData(id=row["instance_id"], name=row["instance_id"],
                               prompt=get_profile(self.config.task.tools.profile).prompt + row["problem_statement"])
            tasks.append(SWETask(data, self.config.task))
        return tasks


if __name__ == "__main__":  # verifiers starts a task's tool server as `python -m <this module>`
    SWEToolset.run()
