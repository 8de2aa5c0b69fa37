"""The environment class handed to GRPOTrainer's `environment_factory`.

TRL creates one instance per concurrent rollout (`Cls()`, no arguments), calls
`reset(**row)` (sync) and then the public methods as tools; `get_reward()` ends a rollout.
Each instance drives one remote session on the env server. All instances share one
`EnvRuntime`: a daemon thread running an asyncio loop that owns the replica pool (one /mux
connection per replica), so sync tool methods block on `run_coroutine_threadsafe` (the
pattern of trl.experimental.harbor._env) while the sessions of all rollouts multiplex over
the same sockets.

Per turn, `turns` records (turn index, tool name, error_kind, hint_template_key,
error_source) from the observation metadata; the trainer turns failing agent turns into
token-indexed error sites for the loss channels. The final (graded) observation's hack-attempt
signals are kept as `reward_hacking` (grading detected tampering: reward 0) and `suspicious`
(the monitor's flags); the trainer sums them per step. `get_reward` applies the run's
`suspicion_policy` to them (keep, zero or mask per reason; `decision` records what it did).
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, ClassVar

from contract import (DEFAULT_SUSPICION_POLICY, SuspicionDecision, SuspicionPolicy, ToolProfile, format_tool_output,
                      get_profile, suspicion_decision)
from env_client import ClientConfig, EnvClient, EnvClientError, RemoteSession
from trainer_client.console import describe_call

__all__ = ["EnvRuntime", "SweEnvironment", "environment_class", "make_environment_class"]


class EnvRuntime(EnvClient):
    """One background event loop + one replica pool, shared by every environment instance
    (the client library's blocking `EnvClient`; the environments use its `run` / `submit`)."""


class SweEnvironment:
    """A remote SWE task session exposed to TRL as tools (use `make_environment_class`).

    The tools are not written here: `environment_class(profile)` adds one method per tool of a
    profile of the contract's registry (contract/tools.py), whose signature and docstring TRL reads
    as the tool's schema, so the policy sees each tool exactly as the env serves it."""

    runtime: ClassVar[EnvRuntime | None] = None
    #: the tool profile episodes are reset with (its tools are this class's tool methods)
    profile: ClassVar[ToolProfile] = get_profile(None)
    #: dataset-row columns forwarded to the server's reset (the rest of the row is ignored)
    reset_keys: ClassVar[tuple[str, ...]] = ("instance_id", "index", "seed")
    #: grade a rollout that never called submit when its reward is asked for
    auto_submit: ClassVar[bool] = True
    #: tool output kept per call (head and tail), in characters
    max_output_chars: ClassVar[int] = 8000
    #: reward after an env/infra failure: None masks the rollout out of GRPO (set 0.0 to score it)
    infra_reward: ClassVar[float | None] = None
    #: what a graded rollout's monitor flags and `reward_hacking` do to its reward (config env.suspicion_policy)
    suspicion_policy: ClassVar[dict[str, SuspicionPolicy]] = DEFAULT_SUSPICION_POLICY

    def __init__(self) -> None:
        if self.runtime is None:
            raise RuntimeError("SweEnvironment needs a runtime: use make_environment_class(urls)")
        self._session: RemoteSession | None = None
        self._prepared: tuple[dict, Any] | None = None
        self.turns: list[dict[str, Any]] = []
        self.reward: float | None = None
        self.done = False
        self.infra_error: str | None = None
        self.instance_id: str | None = None
        self.episode_id: str | None = None
        self.reward_hacking = False
        self.suspicious: tuple[str, ...] = ()
        #: what `suspicion_policy` did with the graded reward (set by `get_reward`; None before it, or
        #: after an infra failure, which the policy never sees)
        self.decision: SuspicionDecision | None = None
        #: set by the trainer before a policy turn's tool calls: the assistant message they came from
        self.pending_assistant: dict | None = None
        self._turn = 0
        #: the auto-submit started by `_submit_ahead` (a future of the submit's observation), if any
        self._submitting: Any = None

    # ------------------------------------------------------------ lifecycle
    def _reset_kwargs(self, row: dict) -> dict:
        kwargs = {k: row[k] for k in self.reset_keys if row.get(k) is not None}
        if self.profile.name != get_profile(None).name:
            kwargs["profile"] = self.profile.name
        if isinstance(row.get("prompt"), list) and row["prompt"]:  # a conversational row: TRL's presentation
            kwargs["context"] = {"prompt": row["prompt"], "tools": self.tool_schemas(),
                                 "max_output_chars": self.max_output_chars}
        return kwargs

    @classmethod
    def tool_methods(cls) -> list[str]:
        """The methods TRL exposes as tools, in its order (public functions but reset/get_reward)."""
        return [name for name, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
                if name not in ("reset", "get_reward") and not name.startswith("_")]

    @classmethod
    def tool_schemas(cls) -> list[dict]:
        """The tool schemas the policy is shown (transformers derives them from the methods, as TRL does)."""
        from transformers.utils import get_json_schema

        return [get_json_schema(getattr(cls, name)) for name in cls.tool_methods()]

    def _prepare(self, **row: Any) -> None:
        """Start opening the session for `row` in the background (the trainer calls this for
        all rollouts of a batch before TRL's serial `reset` loop, so sandbox boots overlap)."""
        self._release()
        kwargs = self._reset_kwargs(row)
        self._prepared = (kwargs, self.runtime.submit(self.runtime.pool.open_session(**kwargs)))

    def reset(self, **row: Any) -> str:
        """Open a session on the env server for the task named by the dataset row; return the issue."""
        kwargs = self._reset_kwargs(row)
        prepared, self._prepared = self._prepared, None
        if prepared is not None and prepared[0] == kwargs:
            session, obs = prepared[1].result()
        else:
            if prepared is not None:  # prepared for another row: discard it
                self.runtime.submit(self._discard(prepared[1]))
            self._release()
            session, obs = self.runtime.run(self.runtime.pool.open_session(**kwargs))
        self._session = session
        self.pending_assistant, self._turn = None, 0
        self.turns, self.reward, self.done, self.infra_error = [], None, False, None
        self.reward_hacking, self.suspicious, self.decision = False, (), None
        self.instance_id = (obs.get("metadata") or {}).get("instance_id", kwargs.get("instance_id"))
        self.episode_id = (obs.get("metadata") or {}).get("episode_id")
        self.replica_url = session.connection.url  # where the episode's trace lives (replay reads it there)
        return str(obs.get("issue") or obs.get("output") or "")

    async def _discard(self, future) -> None:
        try:
            session, _ = await asyncio.wrap_future(future)
            await self.runtime.pool.release(session)
        except Exception:  # noqa: BLE001 - nothing to release
            pass

    def _release(self) -> None:
        session, self._session = self._session, None
        submitting, self._submitting = self._submitting, None
        if session is not None and not session.closed:
            self.runtime.submit(self._release_after(submitting, session))

    async def _release_after(self, submitting, session: RemoteSession) -> None:
        if submitting is not None:  # a grading never collected: let it end before the slot is freed
            try:
                await asyncio.wrap_future(submitting)
            except Exception:  # noqa: BLE001 - its outcome was not asked for
                pass
        await self.runtime.pool.release(session)

    def _submit_ahead(self) -> None:
        """Start this rollout's auto-submit (its grading) in the background; `get_reward` collects it.

        TRL asks for rewards one environment after another; the trainer calls this for every rollout
        of a batch first, so the gradings of a GRPO group run at once on the env server instead of in
        turn (each grading is a fresh sandbox and a test run: seconds, mostly spent waiting)."""
        submit = self._submit_tool()
        if (self.done or not self.auto_submit or self._session is None or self.infra_error is not None
                or self._submitting is not None or submit is None):
            return
        self._submitting = self.runtime.submit(
            self._session.call_tool(submit, {}, metadata=self._turn_metadata(False)))

    @classmethod
    def _submit_tool(cls) -> str | None:
        """The profile's submitting tool (None: it submits by a command's sentinel line only)."""
        return cls.profile.submit_tool

    def get_reward(self) -> float | None:
        """The env's reward for this rollout (grading on submit).

        After a failure that is not the policy's (the env server or its sandbox failed, or
        grading could not run: `infra_error` says which) the reward is `infra_reward`: None by
        default, which TRL (>= 1.16) treats as unscorable: the rollout is left out of its
        group's baseline and gets advantage 0, instead of being scored as a wrong answer.

        Otherwise `suspicion_policy` decides from the graded observation's `reward_hacking` and
        `suspicious` flags: the reward stands (keep), becomes 0.0 (zero) or None (mask, as above).

        A profile without a submitting tool (``bash-only``: mini-swe-agent's sentinel line) has no
        auto-submit: a rollout that never printed its submission scores 0.0, as in that protocol.
        """
        submitting, self._submitting = self._submitting, None
        submit = self._submit_tool()
        if submitting is not None and not self.done:
            self._settle(submit or "submit", False, submitting.result)
        elif (not self.done and self.auto_submit and self._session is not None and self.infra_error is None
              and submit is not None):
            self._call(submit, {}, record=False)
        if self.infra_error is not None:
            reward = self.infra_reward
        else:
            self.decision = suspicion_decision(self.suspicion_policy, self.reward_hacking, self.suspicious)
            reward = self.decision.reward(float(self.reward) if self.reward is not None else 0.0)
        self._release()  # TRL has no teardown hook: free the server slot now
        return reward

    # ------------------------------------------------------------ plumbing
    def _tool(self, tool_name: str, arguments: dict[str, Any]) -> str:
        """What every generated tool method does (``Tool.method``): one call on the session."""
        return self._call(tool_name, arguments)

    def _call(self, tool_name: str, arguments: dict[str, Any], record: bool = True) -> str:
        if self._session is None:
            return "Error: no active episode."
        if self.done or self._submitting is not None:
            return "Error: the episode is over (submit was called); no more tool calls are accepted."
        args = {k: v for k, v in arguments.items() if v is not None}
        return self._settle(tool_name, record, lambda: self.runtime.run(
            self._session.call_tool(tool_name, args, metadata=self._turn_metadata(record))), describe_call(args))

    def _settle(self, tool_name: str, record: bool, observe, args: str = "") -> str:
        """Record the observation `observe()` returns (or the infra failure it raises) as this turn's
        (`args`: the call's arguments in one line, for the run's sampled episodes)."""
        turn = len(self.turns)
        try:
            obs = observe()
        except EnvClientError as exc:
            # infrastructure, not the policy: recorded, never turned into an error site
            self.infra_error = f"{type(exc).__name__}: {exc}"
            self.turns.append({"turn": turn, "tool_name": tool_name, "error_kind": "infra",
                               "hint_template_key": None, "error_source": "infra", "args": args})
            self.done = True
            return f"Error: the environment failed ({type(exc).__name__}); the episode cannot continue."
        meta = obs.get("metadata") or {}
        if record:
            self.turns.append({
                "turn": turn,
                "tool_name": tool_name,
                "error_kind": meta.get("error_kind"),
                "hint_template_key": meta.get("hint_template_key"),
                "error_source": meta.get("error_source"),
                "args": args,
            })
        if obs.get("done"):
            self.done = True
            self.reward = obs.get("reward")
            self.reward_hacking = meta.get("reward_hacking") is True
            flags = meta.get("suspicious")
            self.suspicious = tuple(f for f in flags if isinstance(f, str)) if isinstance(flags, list) else ()
            if meta.get("error_source") in ("env", "infra"):  # e.g. grading failed, the sandbox died
                self.infra_error = f"{meta.get('error_kind')}: {meta.get('error_message', '')}"
        return self._format(obs)

    def _turn_metadata(self, by_policy: bool) -> dict:
        """Action metadata that lets state(t) rebuild the policy's context: the turn and its message."""
        if not by_policy:
            return {"origin": "client"}
        pending, self.pending_assistant = self.pending_assistant, None
        if pending is None:
            return {"turn": self._turn} if self._turn else {}
        self._turn += 1
        return {"turn": self._turn, "assistant": pending}

    def _format(self, obs: dict) -> str:
        return format_tool_output(obs, self.max_output_chars, self.profile.output_style)


def make_environment_class(
    urls: list[str] | tuple[str, ...],
    config: ClientConfig = ClientConfig(),
    *,
    reset_keys: tuple[str, ...] | None = None,
    auto_submit: bool | None = None,
    max_output_chars: int | None = None,
    offset: int = 0,
    suspicion_policy: dict[str, SuspicionPolicy] | None = None,
    profile: str | None = None,
) -> type[SweEnvironment]:
    """A SweEnvironment subclass bound to a runtime for `urls` (TRL instantiates it with no args);
    `offset`: the replica pool's round-robin start (the trainer's process index); `suspicion_policy`:
    the keys to change from `DEFAULT_SUSPICION_POLICY` (a config's `env.suspicion_policy`); `profile`:
    the tool profile (None: the default), whose tools become the class's methods."""
    attrs: dict[str, Any] = {"runtime": EnvRuntime(urls, config, offset=offset)}
    if suspicion_policy is not None:
        attrs["suspicion_policy"] = {**DEFAULT_SUSPICION_POLICY, **suspicion_policy}
    if reset_keys is not None:
        attrs["reset_keys"] = tuple(reset_keys)
    if auto_submit is not None:
        attrs["auto_submit"] = auto_submit
    if max_output_chars is not None:
        attrs["max_output_chars"] = max_output_chars
    return type("SweEnvironment", (environment_class(profile),), attrs)


_CLASSES: dict[str, type[SweEnvironment]] = {}


def environment_class(profile: str | None = None) -> type[SweEnvironment]:
    """SweEnvironment with one method per tool of ``profile`` (None: the default), generated from the
    contract's registry (no runtime yet: `make_environment_class` binds one)."""
    chosen = get_profile(profile)
    if chosen.name not in _CLASSES or _CLASSES[chosen.name].profile is not chosen:
        _CLASSES[chosen.name] = type("SweEnvironment", (SweEnvironment,),
                                     {"profile": chosen, **chosen.methods(SweEnvironment._tool)})
    return _CLASSES[chosen.name]
