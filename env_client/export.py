"""Finished episodes as training records (JSONL, Parquet), for any framework or none.

A `RolloutRecord` holds what an offline pipeline needs once the server is gone: the rendered
chat (`messages`, `tools`), the reward and the grading metadata, and per assistant turn the
exact token ids and log-probs the policy produced plus the error-site markers of its tool
calls (`error_kind`, `hint_template_key`, `error_source`).

Two sources:

* the client's own recording (`session.export()`): every session records its episode
  (`ClientConfig.record_episodes`); token ids and log-probs are there when the caller gave
  them with `session.begin_turn(...)`;
* the server's records, for episodes the client did not record (`AsyncHttpClient.export`,
  `EnvClient.export_episode`, `rollout_from_states` on saved state(t) records): messages,
  reward and markers; token ids where the server has `turn_token_ids`; log-probs null.

Both render the chat with the contract's `render_context`, the function the server's state(t)
uses: with a `context` given at reset the messages are the policy's own context. Without one
the client cannot know the server's default system prompt (it is not on the wire), so a
client recording starts at the issue while a server export starts with the system message.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from contract import render_context  # public wire types and the shared renderer only

from .errors import MissingDependencyError

__all__ = ["ROLLOUT_FORMAT", "EpisodeRecorder", "PolicyTurn", "RolloutRecord", "TurnRecord", "preference_pairs",
           "read_jsonl", "read_parquet", "rollout_from_states", "rollout_from_trace", "sft_examples",
           "write_jsonl", "write_parquet"]

ROLLOUT_FORMAT = "swe-openenv.rollout.v1"


def _check_lengths(token_ids: list[int] | None, logprobs: list[float] | None) -> None:
    if token_ids is not None and logprobs is not None and len(token_ids) != len(logprobs):
        raise ValueError(f"logprobs has {len(logprobs)} entries for {len(token_ids)} token ids")


class PolicyTurn(BaseModel):
    """What the policy generated for one assistant message; given to `session.begin_turn`.

    `content` and `tool_calls` are sent with the turn's first tool call (state(t) then shows
    this message, not a reconstruction), and so are `token_ids` (state(t)'s `turn_token_ids`);
    `logprobs` stay on the client, for `session.export()`.
    """

    model_config = ConfigDict(extra="forbid")

    content: str = ""
    tool_calls: list[dict[str, Any]] = Field(default_factory=list, description=(
        "OpenAI-style calls, `{'function': {'name', 'arguments'}}`; empty: the message holds exactly "
        "the turn's first tool call"))
    token_ids: list[int] | None = Field(None, description="the sampled completion's token ids")
    logprobs: list[float] | None = Field(None, description="one per token id: the sampling policy's log-prob")

    @model_validator(mode="after")
    def _same_length(self) -> "PolicyTurn":
        _check_lengths(self.token_ids, self.logprobs)
        return self

    def assistant(self, tool_name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The `metadata.assistant` of the turn's first call (the contract's AssistantTurn)."""
        calls = self.tool_calls or [{"function": {"name": tool_name, "arguments": arguments}}]
        return {"content": self.content, "tool_calls": calls, "token_ids": self.token_ids}


class TurnRecord(BaseModel):
    """One assistant turn of an episode: what the policy produced and how its tool calls went."""

    model_config = ConfigDict(extra="forbid")

    index: int = Field(ge=0, description="position among the episode's assistant messages")
    message_index: int = Field(ge=0, description="position of the assistant message in `messages`")
    steps: list[int] = Field(default_factory=list, description="the env steps (t) of this turn's tool calls")
    tool_names: list[str] = Field(default_factory=list)
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    error_kind: str | None = Field(None, description="the first failing tool call's marker (None: all succeeded)")
    hint_template_key: str | None = None
    error_source: str | None = Field(None, description="agent | env | infra: score agent, drop env/infra")

    @model_validator(mode="after")
    def _same_length(self) -> "TurnRecord":
        _check_lengths(self.token_ids, self.logprobs)
        return self


class RolloutRecord(BaseModel):
    """One finished (or cut) episode as a training record: one JSONL line, one Parquet row."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["swe-openenv.rollout.v1"] = ROLLOUT_FORMAT
    episode_id: str
    instance_id: str
    task_source: str | None = Field(None, description="synthetic-mutation | release-diff | swe-bench")
    recorded_by: Literal["client", "server"] = Field(description="client: this client's recording (log-probs "
                                                     "possible); server: rebuilt from the server's records")
    messages: list[dict[str, Any]] = Field(description="the rendered chat, state(t)'s shape (None fields left out)")
    tools: list[dict[str, Any]] = Field(description="OpenAI function schemas shown to the policy")
    turns: list[TurnRecord]
    reward: float | None = None
    done: bool = False
    resolved: bool | None = None
    n_steps: int = Field(0, ge=0, description="env steps, a client's own steps (an auto-submit) included")
    metadata: dict[str, Any] = Field(default_factory=dict, description="the last observation's metadata "
                                     "(grading: tests_passed, fail_to_pass, reward_hacking, ...)")


# ------------------------------------------------------------------ building records


def _clean(message: Any) -> dict[str, Any]:
    data = message.model_dump() if isinstance(message, BaseModel) else dict(message)
    return {k: v for k, v in data.items() if v is not None}


def _step_of(tool_call_id: str | None) -> int | None:
    """`call_<t>` -> t (the renderer names each tool result after its step)."""
    if tool_call_id and tool_call_id.startswith("call_"):
        try:
            return int(tool_call_id[5:])
        except ValueError:
            return None
    return None


def _build(*, episode_id: str, instance_id: str, messages: Sequence[Any], tools: list[dict[str, Any]],
           turn_token_ids: Sequence[list[int] | None] | None, observations: dict[int, dict[str, Any]],
           final: dict[str, Any], n_steps: int, recorded_by: str,
           logprobs: Sequence[list[float] | None] | None = None) -> RolloutRecord:
    msgs = [_clean(m) for m in messages]
    turns: list[dict[str, Any]] = []
    for i, msg in enumerate(msgs):
        if msg.get("role") == "assistant":
            k = len(turns)
            turns.append({"index": k, "message_index": i, "steps": [], "tool_names": [],
                          "token_ids": turn_token_ids[k] if turn_token_ids and k < len(turn_token_ids) else None,
                          "logprobs": logprobs[k] if logprobs and k < len(logprobs) else None})
        elif msg.get("role") == "tool" and turns:
            turn = turns[-1]
            t = _step_of(msg.get("tool_call_id"))
            turn["tool_names"].append(msg.get("name") or "")
            if t is None:
                continue
            turn["steps"].append(t)
            meta = (observations.get(t) or {}).get("metadata") or {}
            if meta.get("error_kind") and turn.get("error_kind") is None:
                turn.update(error_kind=meta["error_kind"], hint_template_key=meta.get("hint_template_key"),
                            error_source=meta.get("error_source"))
    final_meta = dict(final.get("metadata") or {})
    source = final_meta.get("task_source")
    if source is None:
        source = next((o.get("metadata", {}).get("task_source") for o in observations.values()
                       if (o.get("metadata") or {}).get("task_source")), None)
    resolved = final_meta.get("resolved")
    return RolloutRecord(episode_id=episode_id, instance_id=instance_id, task_source=source,
                         recorded_by=recorded_by, messages=msgs, tools=list(tools),
                         turns=[TurnRecord.model_validate(t) for t in turns], reward=final.get("reward"),
                         done=bool(final.get("done", False)),
                         resolved=resolved if isinstance(resolved, bool) else None, n_steps=n_steps,
                         metadata=final_meta)


def _policy_groups(steps: Sequence[dict[str, Any]]) -> list[int]:
    """Index (into `steps`) of the first step of each assistant message, by `render_context`'s rule:
    a client's own steps are skipped; consecutive steps sharing `metadata.turn` are one message."""
    firsts: list[int] = []
    current: object = object()
    for i, rec in enumerate(steps):
        meta = rec["action"].get("metadata") or {}
        if meta.get("origin") == "client":
            continue
        turn = meta.get("turn", ("step", rec["t"]))
        if turn != current:
            current = turn
            firsts.append(i)
    return firsts


def rollout_from_trace(records: Sequence[dict[str, Any]], *, state: Any = None) -> RolloutRecord:
    """A record from a server trace (`GET /episodes/{id}/trace`: a reset record, then step records).

    `state`: the server's state(t) record for the last step; when given, its messages, tools and
    `turn_token_ids` are used (the server renders), else they are rendered here the same way.
    """
    if not records or records[0].get("kind") != "reset":
        raise ValueError("a trace starts with its reset record")
    head, steps = records[0], [r for r in records[1:] if r.get("kind") == "step"]
    if state is None:
        messages, tools, turn_ids = render_context(head, steps)
    else:
        s = state.model_dump() if isinstance(state, BaseModel) else dict(state)
        messages, tools, turn_ids = s["messages"], s["tools"], s.get("turn_token_ids")
    observations = {rec["t"]: rec["observation"] for rec in steps}
    final = steps[-1]["observation"] if steps else head["observation"]
    return _build(episode_id=head["episode_id"], instance_id=head["instance_id"], messages=messages, tools=tools,
                  turn_token_ids=turn_ids, observations=observations, final=final, n_steps=len(steps),
                  recorded_by="server")


def rollout_from_states(states: Iterable[Any]) -> RolloutRecord:
    """A record from an episode's state(t) records (dicts or models; e.g. a saved state(t) JSONL).

    The last record gives the messages, tools, token ids and reward; each record's observation
    gives the markers of step t (pass every t for every turn's markers; the last alone gives
    the chat, the reward and the last turn's markers).
    """
    rows = sorted((s.model_dump() if isinstance(s, BaseModel) else dict(s) for s in states), key=lambda s: s["t"])
    if not rows:
        raise ValueError("no state(t) records")
    if len({r["episode_id"] for r in rows}) != 1:
        raise ValueError("state(t) records of more than one episode")
    last = rows[-1]
    observations = {r["t"]: r["observation"] for r in rows if r["t"] > 0}
    return _build(episode_id=last["episode_id"], instance_id=last.get("instance_id") or "",
                  messages=last["messages"], tools=last["tools"], turn_token_ids=last.get("turn_token_ids"),
                  observations=observations, final=last["observation"], n_steps=last["t"], recorded_by="server")


class EpisodeRecorder:
    """The client's record of one episode: reset and steps in the trace's shape, plus log-probs."""

    def __init__(self, reset_params: dict[str, Any], observation: dict[str, Any]):
        meta = observation.get("metadata") or {}
        self.episode_id: str = str(meta.get("episode_id") or "")
        self.instance_id: str = str(meta.get("instance_id") or reset_params.get("instance_id") or "")
        self.head: dict[str, Any] = {"kind": "reset", "episode_id": self.episode_id, "instance_id": self.instance_id,
                                     "system": "", "issue": observation.get("issue") or "",
                                     "tools": observation.get("tools") or [], "observation": observation,
                                     "context": reset_params.get("context"), "profile": reset_params.get("profile")}
        self.steps: list[dict[str, Any]] = []
        self._logprobs: dict[int, list[float]] = {}

    def add_step(self, action: dict[str, Any], observation: dict[str, Any],
                 logprobs: list[float] | None = None) -> None:
        t = (observation.get("metadata") or {}).get("step")
        t = t if isinstance(t, int) else len(self.steps) + 1
        if logprobs is not None:
            self._logprobs[len(self.steps)] = logprobs
        self.steps.append({"kind": "step", "t": t, "action": action, "observation": observation})

    @property
    def done(self) -> bool:
        return bool(self.steps and self.steps[-1]["observation"].get("done"))

    def record(self) -> RolloutRecord:
        """The episode so far as a RolloutRecord (`recorded_by="client"`)."""
        messages, tools, turn_ids = render_context(self.head, self.steps)
        if not self.head.get("context") and messages and messages[0].role == "system" and not messages[0].content:
            messages = messages[1:]  # the server's default system prompt is not known here
        logprobs = [self._logprobs.get(i) for i in _policy_groups(self.steps)]
        final = self.steps[-1]["observation"] if self.steps else self.head["observation"]
        return _build(episode_id=self.episode_id, instance_id=self.instance_id, messages=messages, tools=tools,
                      turn_token_ids=turn_ids, observations={s["t"]: s["observation"] for s in self.steps},
                      final=final, n_steps=len(self.steps), recorded_by="client",
                      logprobs=logprobs if any(lp is not None for lp in logprobs) else None)


# ------------------------------------------------------------------ files


def write_jsonl(records: Iterable[RolloutRecord], path: str | Path, append: bool = False) -> int:
    """Write records as JSONL (one per line); returns how many were written."""
    n = 0
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a" if append else "w", encoding="utf-8") as fh:
        for record in records:
            fh.write(record.model_dump_json() + "\n")
            n += 1
    return n


def read_jsonl(path: str | Path) -> list[RolloutRecord]:
    """Every record of a JSONL file written by `write_jsonl`."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [RolloutRecord.model_validate_json(line) for line in lines if line.strip()]


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError("Parquet export needs pyarrow, which is not installed: "
                                     "pip install pyarrow (JSONL export needs nothing)") from exc
    return pyarrow


def _schema(pa: Any) -> Any:
    message = pa.struct([("role", pa.string()), ("content", pa.string()), ("name", pa.string()),
                         ("tool_call_id", pa.string()), ("tool_calls", pa.string())])
    turn = pa.struct([("index", pa.int64()), ("message_index", pa.int64()), ("steps", pa.list_(pa.int64())),
                      ("tool_names", pa.list_(pa.string())), ("token_ids", pa.list_(pa.int64())),
                      ("logprobs", pa.list_(pa.float64())), ("error_kind", pa.string()),
                      ("hint_template_key", pa.string()), ("error_source", pa.string())])
    return pa.schema([("format", pa.string()), ("episode_id", pa.string()), ("instance_id", pa.string()),
                      ("task_source", pa.string()), ("recorded_by", pa.string()),
                      ("messages", pa.list_(message)), ("tools", pa.string()), ("turns", pa.list_(turn)),
                      ("reward", pa.float64()), ("done", pa.bool_()), ("resolved", pa.bool_()),
                      ("n_steps", pa.int64()), ("metadata", pa.string())])


def _row(record: RolloutRecord) -> dict[str, Any]:
    row = record.model_dump()
    row["messages"] = [{**{k: m.get(k) for k in ("role", "content", "name", "tool_call_id")},
                        "tool_calls": json.dumps(m["tool_calls"]) if m.get("tool_calls") is not None else None}
                       for m in row["messages"]]
    row["tools"] = json.dumps(row["tools"])
    row["metadata"] = json.dumps(row["metadata"])
    return row


def _unrow(row: dict[str, Any]) -> RolloutRecord:
    row = dict(row)
    messages = []
    for m in row["messages"]:
        m = {k: v for k, v in m.items() if v is not None}
        if "tool_calls" in m:
            m["tool_calls"] = json.loads(m["tool_calls"])
        messages.append(m)
    row.update(messages=messages, tools=json.loads(row["tools"]), metadata=json.loads(row["metadata"]))
    return RolloutRecord.model_validate(row)


def write_parquet(records: Iterable[RolloutRecord], path: str | Path) -> int:
    """Write records as one Parquet file (needs pyarrow: `MissingDependencyError` otherwise).

    A fixed schema: messages and turns are typed columns (`tool_calls` a JSON string); `tools`
    and `metadata` are JSON strings (their shapes vary). `read_parquet` gives the records back.
    """
    pa = _pyarrow()
    rows = [_row(r) for r in records]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pa.parquet.write_table(pa.Table.from_pylist(rows, schema=_schema(pa)), str(path))
    return len(rows)


def read_parquet(path: str | Path) -> list[RolloutRecord]:
    """Every record of a Parquet file written by `write_parquet`."""
    pa = _pyarrow()
    return [_unrow(row) for row in pa.parquet.read_table(str(path)).to_pylist()]


# ------------------------------------------------------------------ offline pipelines


def sft_examples(records: Iterable[RolloutRecord], min_reward: float = 1.0) -> list[dict[str, Any]]:
    """`{"messages", "tools"}` of every episode with reward >= `min_reward` (SFT on successes)."""
    return [{"messages": r.messages, "tools": r.tools} for r in records
            if r.reward is not None and r.reward >= min_reward]


def preference_pairs(records: Iterable[RolloutRecord]) -> list[dict[str, Any]]:
    """DPO pairs in the conversational prompt/chosen/rejected shape: per instance, its best
    episode against each lower-rewarded one sharing the same prompt (the messages before the
    first assistant turn)."""
    by_prompt: dict[tuple[str, str], list[RolloutRecord]] = defaultdict(list)
    for r in records:
        if r.reward is None or not r.turns:
            continue
        prompt = r.messages[: r.turns[0].message_index]
        by_prompt[(r.instance_id, json.dumps(prompt, sort_keys=True))].append(r)
    pairs = []
    for (instance_id, _), group in by_prompt.items():
        best = max(group, key=lambda r: r.reward or 0.0)
        cut = best.turns[0].message_index
        for other in group:
            if other is not best and (other.reward or 0.0) < (best.reward or 0.0):
                pairs.append({"instance_id": instance_id, "prompt": best.messages[:cut], "tools": best.tools,
                              "chosen": best.messages[cut:], "rejected": other.messages[cut:],
                              "chosen_episode_id": best.episode_id, "rejected_episode_id": other.episode_id,
                              "chosen_reward": best.reward, "rejected_reward": other.reward})
    return pairs
