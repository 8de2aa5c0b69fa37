"""One evaluated episode: the policy's own harness, driven through the env server.

The context the policy sees is the contract's: the prompt and tool schemas of a `ContextSpec`
sent with reset (what a trainer sends: `DEFAULT_PROMPT`, `policy_tools()`, its output cut),
messages rendered by `render_context` from the session's recording, tool outputs by
`format_tool_output`. Every policy turn goes to the server with its assistant message
(`begin_turn`), so the server's state(t) of an evaluated episode is exactly the context the
model saw, and the turn's token ids (when the endpoint returns them) are in its record.

How an episode ends (`EpisodeResult.end_reason`; docs/evaluation.md):

| end | when | graded |
|---|---|---|
| `submitted` | the policy called submit | yes |
| `step_limit` | the env's step budget (`episode.max_steps`) was used up | by the env |
| `no_tool_call` | an answer without a tool call (as in training: TRL ends the rollout there) | auto-submit |
| `turn_limit` | `max_turns` policy turns were taken | auto-submit |
| `time_limit` | the episode ran `max_episode_s` | auto-submit |
| `context_limit` | the endpoint says the context no longer fits, or usage reached `max_context_tokens` | auto-submit |

The wall limit covers the whole episode (reset, model calls, env steps): a model call is cut
at the limit; before each tool call the time left is checked (once it is spent, the answer's
other calls are not run); a `bash` call runs with its `timeout` capped at the time left (the
env kills the command there: the agent's `timeout` error). Then the episode is auto-submitted;
grading runs past the limit (the env's grading timeout bounds it).

A tool call whose arguments are not a JSON object is still sent (under `_raw_arguments`): the
env rejects it as the agent's `invalid_arguments` error and the episode goes on, as any bad
call does; one without a function name likewise (endpoint.py `wire_tool_calls`: the env's
`unknown_tool`). A failure that is not the policy's (the env, its sandbox or grading, or the
model endpoint down after its retries) makes the attempt *lost* (`LostEpisode`, with what the
attempt used): the runner retries it and never scores it as a 0.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import Counter
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from contract import (DEFAULT_PROFILE, DEFAULT_PROMPT, ContextSpec, get_profile,
                      policy_tools, render_context)
from env_client import EnvAuthError, EnvClientError, NoLiveReplicaError, PolicyTurn, ReplicaPool, RolloutRecord

from .endpoint import EndpointError, PolicyReply

__all__ = ["AgentLimits", "EndReason", "EpisodeResult", "LostEpisode", "Policy", "TaskRef", "Usage", "run_episode"]

#: what a `bash` call without a `timeout` gets from the env (the server's default,
#: `sandbox.limits.command_timeout_s`): below this much time left, the harness passes the time left
ENV_COMMAND_TIMEOUT_S = 120.0

EndReason = Literal["submitted", "step_limit", "no_tool_call", "turn_limit", "time_limit", "context_limit"]


class Policy(Protocol):
    """What the harness needs of a model: its next assistant message for a context."""

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> PolicyReply: ...


class AgentLimits(BaseModel):
    """Where an episode stops, and what the policy is shown."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(30, gt=0, description="policy turns (assistant messages) before auto-submit")
    max_episode_s: float = Field(1800.0, gt=0, description="wall seconds of one episode (model calls and env "
                                 "steps) before auto-submit")
    max_context_tokens: int | None = Field(None, gt=0, description="auto-submit once a turn's prompt + "
                                           "completion tokens reach this (None: the endpoint's own limit)")
    max_output_chars: int = Field(8000, gt=0, description="tool output kept per call (head and tail)")
    prompt: str = Field(DEFAULT_PROMPT, description="the user message before the issue (the trainer's data.prompt)")
    profile: str = Field(DEFAULT_PROFILE, description="the env's tool profile (the trainer's env.profile): its tools "
                         "are shown, a profile without a submit tool ends unsubmitted at a limit (reward 0)")

    def context(self) -> ContextSpec:
        """The ContextSpec sent with reset: the trainer's presentation of an episode."""
        return ContextSpec(prompt=[{"role": "user", "content": self.prompt}], tools=policy_tools(self.profile),
                           max_output_chars=self.max_output_chars)

    def reset(self, instance_id: str) -> dict[str, Any]:
        """The reset a trainer sends for ``instance_id``: its context, and its profile when not the default."""
        return {"instance_id": instance_id, "context": self.context(),
                **({"profile": self.profile} if self.profile != DEFAULT_PROFILE else {})}


class TaskRef(BaseModel):
    """A task as the evaluator knows it: its id and what the report groups it by."""

    model_config = ConfigDict(extra="forbid")

    instance_id: str
    source: str | None = None
    repo: str | None = None


class Usage(BaseModel):
    """What attempts used: turns, tokens and cost (a paid API bills a lost attempt too)."""

    model_config = ConfigDict(extra="forbid")

    attempts: int = Field(0, ge=0)
    turns: int = Field(0, ge=0)
    prompt_tokens: int = Field(0, ge=0)
    completion_tokens: int = Field(0, ge=0)
    cost_usd: float = Field(0.0, ge=0.0)

    def plus(self, other: Usage) -> Usage:
        return Usage(**{k: getattr(self, k) + getattr(other, k) for k in Usage.model_fields})


class LostEpisode(Exception):
    """An attempt that ended for a reason not the policy's: retried, never scored. `usage` is
    what the attempt used before it was lost (set by `run_episode`)."""

    def __init__(self, reason: str, episode_id: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.episode_id = episode_id
        self.usage = Usage(attempts=1)


class EpisodeResult(BaseModel):
    """One finished episode (one line of results.jsonl)."""

    model_config = ConfigDict(extra="forbid")

    instance_id: str
    sample: int = Field(ge=0)
    status: Literal["resolved", "unresolved", "lost"]
    reward: float | None = None
    end_reason: EndReason | None = None
    task_source: str | None = None
    repo: str | None = None
    episode_id: str | None = None
    replica: str | None = None
    attempts: int = Field(1, ge=1)
    lost_reasons: list[str] = Field(default_factory=list, description="why each lost attempt was lost")
    lost_usage: Usage = Field(default_factory=Usage, description="what the lost attempts used (billed, never "
                              "scored); the fields below are the scored attempt's")
    turns: int = 0
    steps: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    wall_s: float = 0.0
    policy_s: float = Field(0.0, description="seconds waiting for the model")
    env_s: float = Field(0.0, description="seconds in env requests (reset, steps, submit)")
    error_kinds: dict[str, int] = Field(default_factory=dict, description="failed tool calls per error_kind")
    reward_hacking: bool = False
    suspicious: list[str] = Field(default_factory=list)
    model_patch: str | None = Field(None, description="the workspace diff that was graded (None: unknown, "
                                    "see patch_error)")
    patch_error: str | None = Field(None, description="why the graded diff is unknown (no prediction is made of it)")


def _message(m: Any) -> dict[str, Any]:
    data = m.model_dump() if isinstance(m, BaseModel) else dict(m)
    return {k: v for k, v in data.items() if v is not None}


def _arguments(call: dict[str, Any]) -> dict[str, Any]:
    raw = call["function"].get("arguments")
    try:
        args = json.loads(raw) if isinstance(raw, str) and raw.strip() else (raw or {})
    except json.JSONDecodeError:
        return {"_raw_arguments": raw}
    return args if isinstance(args, dict) else {"_raw_arguments": raw}


class _Episode:
    """The state of one attempt (kept on the instance so a lost attempt still reports its usage)."""

    def __init__(self) -> None:
        self.turns = self.prompt_tokens = self.completion_tokens = 0
        self.cost = self.policy_s = self.env_s = 0.0
        self.errors: Counter[str] = Counter()
        self.start = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def usage(self) -> Usage:
        return Usage(attempts=1, turns=self.turns, prompt_tokens=self.prompt_tokens,
                     completion_tokens=self.completion_tokens, cost_usd=self.cost)


async def run_episode(pool: ReplicaPool, policy: Policy, task: TaskRef, sample: int,
                      limits: AgentLimits = AgentLimits()) -> tuple[EpisodeResult, RolloutRecord | None]:
    """Run one episode of `task` with `policy`; the result and the client's rollout record.

    Raises `LostEpisode` when the attempt was lost (the caller retries); `EndpointError` when
    the endpoint fails in a way no retry cures (`fatal`), `EnvAuthError` / `NoLiveReplicaError`
    when no env replica will take an episode.
    """
    ep = _Episode()
    try:
        return await _run(pool, policy, task, sample, limits, ep)
    except LostEpisode as exc:
        exc.usage = ep.usage()
        raise


async def _run(pool: ReplicaPool, policy: Policy, task: TaskRef, sample: int, limits: AgentLimits,
               ep: _Episode) -> tuple[EpisodeResult, RolloutRecord | None]:
    t0 = time.monotonic()
    try:
        session, _ = await pool.open_session(**limits.reset(task.instance_id))
    except (EnvAuthError, NoLiveReplicaError):
        raise  # no attempt can succeed: the run stops
    except EnvClientError as exc:
        raise LostEpisode(f"env reset: {type(exc).__name__}: {exc}") from None
    ep.env_s += time.monotonic() - t0
    episode_id = session.episode_id
    try:
        final, end = await _loop(session, policy, limits, ep)
        meta = final.get("metadata") or {}
        if meta.get("error_source") in ("env", "infra"):
            raise LostEpisode(f"{meta.get('error_source')}: {meta.get('error_kind')}: "
                              f"{meta.get('error_message', '')}".strip(), episode_id)
        patch, patch_error = await _graded_diff(session, final)
        record = session.export() if session.recording is not None else None
    except EnvClientError as exc:
        raise LostEpisode(f"env: {type(exc).__name__}: {exc}", episode_id) from None
    finally:
        await pool.release(session)
    reward = final.get("reward")
    resolved = meta.get("resolved")
    if not isinstance(resolved, bool):
        resolved = reward is not None and float(reward) >= 1.0
    flags = meta.get("suspicious")
    result = EpisodeResult(
        instance_id=task.instance_id, sample=sample, status="resolved" if resolved else "unresolved",
        reward=float(reward) if reward is not None else 0.0, end_reason=end,
        task_source=meta.get("task_source") or task.source, repo=task.repo, episode_id=episode_id,
        replica=getattr(session.connection, "url", None), turns=ep.turns,
        steps=len(session.recording.steps) if session.recording is not None else 0,
        prompt_tokens=ep.prompt_tokens, completion_tokens=ep.completion_tokens, cost_usd=ep.cost,
        wall_s=ep.elapsed(), policy_s=ep.policy_s, env_s=ep.env_s, error_kinds=dict(ep.errors),
        reward_hacking=meta.get("reward_hacking") is True,
        suspicious=[f for f in flags if isinstance(f, str)] if isinstance(flags, list) else [], model_patch=patch,
        patch_error=patch_error)
    return result, record


async def _step(session: Any, ep: _Episode, name: str, arguments: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    t0 = time.monotonic()
    obs = await session.call_tool(name, arguments, **kwargs)
    ep.env_s += time.monotonic() - t0
    meta = obs.get("metadata") or {}
    if meta.get("error_kind"):
        if meta.get("error_source") in ("env", "infra") and not obs.get("done"):
            raise LostEpisode(f"{meta['error_source']}: {meta['error_kind']}: {meta.get('error_message', '')}".strip(),
                              session.episode_id)
        ep.errors[str(meta["error_kind"])] += 1
    return obs


async def _auto_submit(session: Any, ep: _Episode) -> dict[str, Any]:
    """The client's submit at a limit; under a profile without a submit tool (bash-only: the sentinel line
    is the only submission) nothing is submitted: the episode ends ungraded, reward 0."""
    profile = get_profile((session.recording.head.get("profile") if session.recording is not None else None))
    submit = profile.submit_tool
    if submit is None:
        steps = session.recording.steps if session.recording is not None else []
        return {"done": True, "reward": 0.0, "output": "", "metadata": {
            "step": len(steps), "resolved": False, "unsubmitted": True,
            "grade_error": "nothing was submitted (the submit line never ran)", "grade_error_source": "agent"}}
    return await _step(session, ep, submit, {}, metadata={"origin": "client"})


def _submitted(name: str, obs: dict[str, Any], profile: str | None) -> bool:
    """A done observation that came from a submission: the submit tool, or a command whose output's
    first line is the sentinel (a profile such as bash-only)."""
    chosen = get_profile(profile)
    if name == chosen.submit_tool:
        return True
    meta = obs.get("metadata") or {}
    return (chosen.submission(str(obs.get("output") or ""), meta.get("returncode")) is not None
            and not meta.get("grade_error"))


class _Context:
    """The policy's context, rendered incrementally: `render_context` of the new steps only, each turn.

    Steps are only appended, and every turn's steps are recorded before the next turn is asked
    for, so rendering the steps since the last call (their `t` and turn metadata are absolute)
    appends exactly the messages a full `render_context(head, steps)` would add: the same
    messages without re-rendering the whole episode every turn (O(turns^2) over an episode).
    """

    def __init__(self, recording: Any):
        self.recording = recording
        messages, self.tools, _ = render_context(recording.head, [])
        self.head_len = len(messages)
        self.messages = [_message(m) for m in messages]
        self.rendered = 0

    def render(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        steps = self.recording.steps
        if len(steps) > self.rendered:
            messages, _, _ = render_context(self.recording.head, steps[self.rendered:])
            self.messages.extend(_message(m) for m in messages[self.head_len:])
            self.rendered = len(steps)
        return list(self.messages), self.tools


def _capped(name: str, arguments: dict[str, Any], left: float) -> dict[str, Any]:
    """A bash call's arguments with its `timeout` capped at the `left` seconds of the episode."""
    if name != "bash" or "_raw_arguments" in arguments:
        return arguments
    asked = arguments.get("timeout")
    asked = float(asked) if isinstance(asked, (int, float)) and not isinstance(asked, bool) and asked > 0 else None
    if (asked if asked is not None else ENV_COMMAND_TIMEOUT_S) <= left:
        return arguments
    return {**arguments, "timeout": math.ceil(left * 10) / 10}


async def _loop(session: Any, policy: Policy, limits: AgentLimits, ep: _Episode) -> tuple[dict[str, Any], EndReason]:
    recording = session.recording
    if recording is None:
        raise ValueError("the evaluator needs the client's recording (ClientConfig.record_episodes=True)")
    context = _Context(recording)
    while True:
        if ep.turns >= limits.max_turns:
            return await _auto_submit(session, ep), "turn_limit"
        remaining = limits.max_episode_s - ep.elapsed()
        if remaining <= 0:
            return await _auto_submit(session, ep), "time_limit"
        messages, tools = context.render()
        t0 = time.monotonic()
        try:
            async with asyncio.timeout(remaining):  # not wait_for: no task per turn (~15 us less)
                reply = await policy.complete(messages, tools)
        except TimeoutError:
            ep.policy_s += time.monotonic() - t0
            return await _auto_submit(session, ep), "time_limit"
        except EndpointError as exc:
            ep.policy_s += time.monotonic() - t0
            if exc.kind == "context_length":
                return await _auto_submit(session, ep), "context_limit"
            if exc.fatal:
                raise
            raise LostEpisode(f"policy endpoint: {exc.message}", session.episode_id) from None
        ep.policy_s += time.monotonic() - t0
        ep.turns += 1
        ep.prompt_tokens += reply.prompt_tokens
        ep.completion_tokens += reply.completion_tokens
        ep.cost += reply.cost_usd
        if not reply.tool_calls:
            return await _auto_submit(session, ep), "no_tool_call"
        session.begin_turn(PolicyTurn(content=reply.content, tool_calls=reply.tool_calls, token_ids=reply.token_ids,
                                      logprobs=reply.logprobs))
        for call in reply.tool_calls:
            left = limits.max_episode_s - ep.elapsed()
            if left <= 0:  # the wall limit covers env steps too: the answer's other calls are not run
                return await _auto_submit(session, ep), "time_limit"
            name = call["function"]["name"]
            obs = await _step(session, ep, name, _capped(name, _arguments(call), left))
            if obs.get("done"):
                return obs, "submitted" if _submitted(name, obs, recording.head.get("profile")) else "step_limit"
        if limits.max_context_tokens and reply.prompt_tokens + reply.completion_tokens >= limits.max_context_tokens:
            return await _auto_submit(session, ep), "context_limit"


async def _graded_diff(session: Any, final: dict[str, Any]) -> tuple[str | None, str | None]:
    """(the workspace diff graded at the last step, as a patch; None and why when it is unknown)."""
    meta = final.get("metadata") or {}
    if meta.get("unsubmitted"):
        return None, "nothing was submitted"
    t = meta.get("step")
    if not isinstance(t, int):
        return None, "the final observation names no step"
    try:
        record = await session.state(t)
    except EnvClientError as exc:
        return None, f"state({t}) could not be read: {type(exc).__name__}: {exc}"
    if isinstance(record.get("submission"), str):  # a command's sentinel submission: what was graded
        return record["submission"], None
    diff = record.get("diff")
    if isinstance(diff, str):
        return diff, None
    why = record.get("diff_error") or meta.get("grade_error") or "no diff recorded"
    return None, f"state({t}) holds no graded diff: {why}"
