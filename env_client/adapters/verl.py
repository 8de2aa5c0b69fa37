"""The env as VeRL tools, and the design's advantage estimator for VeRL (recipe B; docs/frameworks/verl.md).

Tested with verl 0.9.1. Three parts:

- **Tools.** `SWEOpenEnvTool` is a `verl.tools.base_tool.BaseTool`: one object per env tool (the tool
  config file lists `bash`, `view`, `str_replace`, `create`, `submit`, or the `bash-only` profile's one
  `bash`, each with the schema the contract generates: `tool_config()`). The tool objects of a process
  share their episodes, each one session on a running env replica:

  - `create(instance_id=None, create_kwargs={"instance_id": TASK}, **kw)` opens the episode (reset with
    the task's instance id; `episode_id` and `profile` are taken too) and returns `(id, response)`, the
    response's text the task's issue. A `create` with an id whose episode is open joins it.
  - `execute(id, parameters)` runs one call of this tool; it returns `(response, step_reward, metrics)`:
    the text the policy reads (`contract.format_tool_output`), the hidden tests' reward on the call that
    submits (0.0 before), and the step's markers. `response.metadata` and `metrics` carry
    `episode_id`, `instance_id`, `step`, `tool_name` and, for a failed call, `error_kind`,
    `hint_template_key`, `error_source` (the grading summary once the episode is done).
  - `calc_reward(id)` submits (if not yet; origin `client`, left out of state(t)) and returns the
    hidden tests' reward; `release(id)` closes the session (an unsubmitted episode ends ungraded).

- **Agent loop.** VeRL 0.9.1's `ToolAgentLoop` calls `create` / `execute` / `release` around every
  single tool call and never calls `calc_reward`. `SWEOpenEnvAgentLoop` (registered as
  `swe_openenv_agent`; `agent_loop_config()`) is that loop with one episode per trajectory: it hands
  the tools a trajectory key (in each tool's `create_kwargs`), so every call of one trajectory steps
  the same episode, opened at its first call; when the trajectory ends it submits (unless the policy
  did, or `submit_on_truncation` is false), closes the session, and sets the trajectory's
  `reward_score` to the hidden tests' reward and `extra_fields["swe_openenv"]` to the episode's
  record (episode id, per-step markers with the assistant turn of each call, reward, resolved), which
  VeRL carries into the batch's `non_tensor_batch["swe_openenv"]`.

- **Advantage estimator** `swe_openenv` (`@register_adv_est`): GRPO's outcome advantage
  (`compute_grpo_outcome_advantage`, exactly, at weights 0) plus `alpha` times the hints channel's term
  and `beta` times the pairs channel's (`algorithm.swe_openenv.hints.weight` / `.pairs.weight`, as the
  trainer's `loss.hints.weight` / `loss.pairs.weight`): per response token,

      A = A_grpo + alpha * hint_mask * (hint_log_probs - old_log_probs) + beta * pair_scores

  (each term times `response_mask`). Channel 2 (hint-conditioned self-distillation,
  trainer_client/losses/hints_channel.py) counts the policy's own tokens from each rollout's first agent error
  site on, against the same model given the hint there: `hint_log_probs` are that teacher's
  log-probs of the sampled tokens, `hint_mask` marks the tokens after the first error (`error_site_mask`),
  and the term is the per-token reverse-KL signal on sampled tokens. Channel 3 (pair preference,
  trainer_client/losses/pairs_channel.py) prefers the teachers' action over the student's at the
  replayed states (`rejected` is the student's own action at step t): `pair_scores` are -1 on the
  tokens of the turn whose action a pair rejected (`pair_turn_scores`), the push-down half of DPO's
  gradient on the sampled action. The per-sample tensors come from the batch (`swe_hint_log_probs`,
  `swe_hint_mask`, `swe_pair_scores`, VeRL's own `old_log_probs`), as keyword arguments or in `batch=`.

Importing this module imports no framework unless verl is installed: `tool_config()`,
`agent_loop_config()`, `dataset_rows()` and the mask helpers work without it (the helpers import
torch); `SWEOpenEnvTool`, `SWEOpenEnvAgentLoop` and the estimator's registration need verl
(`MissingDependencyError` naming the install line otherwise). `python -m env_client.adapters.verl
{tool-config,agent-loop-config,dataset}` writes the files a VeRL run reads. Nothing here starts an
environment.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import SecretStr

from contract import DEFAULT_PROFILE, PROFILES, ToolProfile, format_tool_output, get_profile
from env_client.adapters import MARKER_KEYS, step_info, write_rows
from env_client.config import TOKEN_ENV, ClientConfig
from env_client.errors import EnvClientError, EnvSessionError, MissingDependencyError
from env_client.pool import ReplicaPool

__all__ = [
    "AGENT_LOOP", "ESTIMATOR", "HINT_LOG_PROBS", "HINT_MASK", "PAIR_SCORES", "RECORD_KEY", "TOOL_CLASS", "URLS_ENV",
    "VERL_VERSION", "SWEOpenEnvAgentLoop", "SWEOpenEnvTool", "SWEToolResponse", "agent_loop_config",
    "assistant_turn_index", "batch_fields", "close_pools", "compute_swe_openenv_advantage", "dataset_rows",
    "error_site_mask",
    "estimator_weights", "finish_trajectory", "first_error_turn", "open_episodes", "pair_turn_scores", "tool_config",
    "turn_scores_to_tokens", "write_yaml",
]

#: the verl release these interfaces are tested with (tests/frameworks/test_verl.py)
VERL_VERSION = "0.9.1"
#: comma-separated replica URLs, read when the tool config names none
URLS_ENV = "SWE_OPENENV_URLS"
#: `algorithm.adv_estimator` of a run that uses the estimator below
ESTIMATOR = "swe_openenv"
#: the agent loop's name (`actor_rollout_ref.rollout.agent.default_agent_loop`, or a dataset's `agent_name`)
AGENT_LOOP = "swe_openenv_agent"
_MODULE = "env_client.adapters.verl"  # this module's import name (also when run as `python -m`)
#: the tool config's `class_name`
TOOL_CLASS = f"{_MODULE}.SWEOpenEnvTool"
#: a trajectory's episode record: `extra_fields[RECORD_KEY]`, then `non_tensor_batch[RECORD_KEY]`
RECORD_KEY = "swe_openenv"
#: the batch's per-token inputs of the estimator's extra terms
HINT_LOG_PROBS, HINT_MASK, PAIR_SCORES = "swe_hint_log_probs", "swe_hint_mask", "swe_pair_scores"
#: error sources that make an error site (the policy's fault; env / infra failures do not), as the trainer
SCORED_ERROR_SOURCES = frozenset({"agent", None})
INSTALL_LINE = f'pip install -e ".[client]" "verl=={VERL_VERSION}"'
_FINAL_KEYS = ("resolved", "tests_passed", "tests_failed", "grade_error", "grade_error_source", "reward_hacking")
_VERL_PROPERTY_KEYS = ("type", "description", "enum")  # what verl's OpenAIFunctionPropertySchema keeps


# ---------------------------------------------------------------- the files a VeRL run reads (framework-free)


def _verl_schema(tool: dict[str, Any]) -> dict[str, Any]:
    """A contract policy schema in the fields verl's `OpenAIFunctionToolSchema` keeps (so the tool
    schema VeRL renders into the chat template is exactly this)."""
    fn = tool["function"]
    params = fn["parameters"]
    properties = {name: {k: prop[k] for k in _VERL_PROPERTY_KEYS if k in prop}
                  for name, prop in params.get("properties", {}).items()}
    parameters: dict[str, Any] = {"type": params.get("type", "object"), "properties": properties}
    if params.get("required"):
        parameters["required"] = list(params["required"])
    return {"type": "function", "function": {"name": fn["name"], "description": fn["description"],
                                             "parameters": parameters}}


def tool_config(profile: str | None = None, urls: Sequence[str] | str | None = None, token_var: str = TOKEN_ENV,
                max_output_chars: int | None = None, submit_on_truncation: bool = True) -> dict[str, Any]:
    """VeRL's tool config (`actor_rollout_ref.rollout.multi_turn.tool_config_path`) for the tools of
    `profile` (None: the default), generated from the contract: one `SWEOpenEnvTool` entry per tool,
    its schema the one a policy trained or evaluated here is shown (`ToolProfile.policy_tools`, in
    that order). `urls`: the replicas (None: $SWE_OPENENV_URLS when a session opens); the token is
    read from the variable `token_var` names, never written into the file."""
    chosen = get_profile(profile)
    config: dict[str, Any] = {"type": "native", "profile": chosen.name}
    if urls:
        config["urls"] = [u.strip() for u in urls.split(",") if u.strip()] if isinstance(urls, str) else list(urls)
    config["token_var"] = token_var
    if max_output_chars is not None:
        config["max_output_chars"] = int(max_output_chars)
    config["submit_on_truncation"] = bool(submit_on_truncation)
    return {"tools": [{"class_name": TOOL_CLASS, "config": dict(config), "tool_schema": _verl_schema(tool)}
                      for tool in chosen.policy_tools()]}


def agent_loop_config() -> list[dict[str, str]]:
    """VeRL's agent loop config (`actor_rollout_ref.rollout.agent.agent_loop_config_path`): the loop
    that keeps one episode per trajectory, by name."""
    return [{"name": AGENT_LOOP, "_target_": f"{_MODULE}.SWEOpenEnvAgentLoop"}]


def write_yaml(data: Any, out: str | Path, header: str = "") -> Path:
    """`data` as YAML at `out` (after `header`, a comment naming how the file was generated)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
    out.write_text((header + text) if header else text, encoding="utf-8")
    return out


def _task_records(tasks_path: str | Path) -> list[dict[str, Any]]:
    from env_client.adapters.skyrl_dataset import _records

    path = Path(tasks_path)
    records = []
    for where, record in _records(path, path.read_text(encoding="utf-8")):
        if not isinstance(record, dict) or not isinstance(record.get("instance_id"), str):
            raise ValueError(f"{where}: a task needs an instance_id")
        if not isinstance(record.get("problem_statement"), str):
            raise ValueError(f"{where}: a task needs a problem_statement (the issue VeRL's prompt carries)")
        records.append(record)
    return records


def dataset_rows(tasks_path: str | Path, instance_ids: Sequence[str] | None = None, profile: str | None = None,
                 data_source: str = RECORD_KEY, split: str = "train") -> list[dict[str, Any]]:
    """One VeRL row per task of the env's task file (`RLHFDataset`: `data_source`, `prompt`, `ability`,
    `reward_model`, `extra_info`, and `agent_name`): the prompt is the profile's user message followed
    by the issue (what `trainer-client train` and `evaluate` show; VeRL adds the tool schemas through
    the chat template), `extra_info.tools_kwargs` resets each trajectory's episode with the task's
    instance id, `agent_name` picks `swe_openenv_agent`. ValueError for an id the file lacks."""
    chosen = get_profile(profile)
    records = _task_records(tasks_path)
    if instance_ids:
        unknown = sorted(set(instance_ids) - {r["instance_id"] for r in records})
        if unknown:
            raise ValueError(f"not in {tasks_path}: {', '.join(unknown)}")
        records = [r for r in records if r["instance_id"] in set(instance_ids)]
    rows = []
    for index, record in enumerate(records):
        create = {"instance_id": record["instance_id"]}
        if chosen.name != DEFAULT_PROFILE:
            create["profile"] = chosen.name
        rows.append({
            "data_source": data_source,
            "prompt": [{"role": "user", "content": chosen.prompt + record["problem_statement"]}],
            "ability": "swe",
            "reward_model": {"style": "rule", "ground_truth": ""},  # graded by the env's hidden tests
            "extra_info": {"index": index, "split": split, "instance_id": record["instance_id"],
                           "tools_kwargs": {name: {"create_kwargs": dict(create)} for name in chosen.names}},
            "agent_name": AGENT_LOOP,
        })
    return rows


# ---------------------------------------------------------------- the estimator's inputs (torch, no verl)


def assistant_turn_index(response_mask: Any) -> Any:
    """(B, T) long tensor: the 0-based assistant turn of each response token (a turn is a run of
    `response_mask` 1s: VeRL's multi-turn mask is 1 on the model's tokens, 0 on tool outputs), -1 elsewhere."""
    import torch

    mask = torch.as_tensor(response_mask).bool()
    starts = mask.clone()
    starts[:, 1:] &= ~mask[:, :-1]
    turns = starts.long().cumsum(dim=-1) - 1
    return torch.where(mask, turns, torch.full_like(turns, -1))


def first_error_turn(record: Mapping[str, Any] | None) -> int | None:
    """The assistant turn of a record's first error site (a failed call whose `error_source` is the
    agent's), or None: channel 2 counts the tokens of the turns after it."""
    for step in (record or {}).get("steps") or []:
        if step.get("error_kind") and step.get("error_source") in SCORED_ERROR_SOURCES:
            turn = step.get("turn")
            return int(turn) if turn is not None else None
    return None


def error_site_mask(response_mask: Any, first_error_turns: Sequence[int | None]) -> Any:
    """(B, T) float mask of the tokens channel 2 counts: the model's tokens of the turns after each
    row's first error site (none for a row without one): the tokens after the failing tool output,
    where the trainer inserts the hint."""
    import torch

    turns = assistant_turn_index(response_mask)
    if len(first_error_turns) != turns.size(0):
        raise ValueError(f"{len(first_error_turns)} first-error turns for a batch of {turns.size(0)}")
    after = torch.tensor([-1 if t is None else int(t) for t in first_error_turns]).unsqueeze(-1)
    has = torch.tensor([t is not None for t in first_error_turns]).unsqueeze(-1)
    return ((turns > after) & has & (turns >= 0)).to(torch.float32)


def turn_scores_to_tokens(response_mask: Any,
                          turn_scores: Sequence[Sequence[float] | Mapping[int, float] | None]) -> Any:
    """(B, T) float tensor: each row's per-turn scores (a list by turn, or {turn: score}) spread over
    that turn's tokens; turns without a score get 0."""
    import torch

    turns = assistant_turn_index(response_mask)
    if len(turn_scores) != turns.size(0):
        raise ValueError(f"{len(turn_scores)} score rows for a batch of {turns.size(0)}")
    out = torch.zeros(turns.shape, dtype=torch.float32)
    for row, scores in enumerate(turn_scores):
        items = scores.items() if isinstance(scores, Mapping) else enumerate(scores or [])
        for turn, score in items:
            out[row][turns[row] == int(turn)] = float(score)
    return out


def pair_turn_scores(record: Mapping[str, Any] | None, pairs: Iterable[Mapping[str, Any]]) -> dict[int, float]:
    """{assistant turn: -1.0} for each step of this record's episode whose action a replayed pair
    rejected (a `PairRecord`: `provenance.episode_id`, `provenance.t`; its `rejected` is the student's
    action at step t, the t-th tool call, 0-based)."""
    if not record or not record.get("episode_id"):
        return {}
    steps = record.get("steps") or []
    out: dict[int, float] = {}
    for pair in pairs:
        provenance = pair.get("provenance") or {}
        if provenance.get("episode_id") != record["episode_id"]:
            continue
        t = int(provenance.get("t", -1))
        if 0 <= t < len(steps) and steps[t].get("turn") is not None:
            out[int(steps[t]["turn"])] = -1.0
    return out


def batch_fields(response_mask: Any, records: Sequence[Mapping[str, Any] | None],
                 pairs: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """`swe_hint_mask` and `swe_pair_scores` for a batch, from its episode records
    (`non_tensor_batch["swe_openenv"]`) and the pairs replay mined from those episodes. The hint
    channel's teacher log-probs (`swe_hint_log_probs`) need a forward of the model on the
    hint-conditioned context: the actor's job, not this function's."""
    pairs = list(pairs)
    return {HINT_MASK: error_site_mask(response_mask, [first_error_turn(r) for r in records]),
            PAIR_SCORES: turn_scores_to_tokens(response_mask, [pair_turn_scores(r, pairs) for r in records])}


def _get(node: Any, key: str, default: Any = None) -> Any:
    if node is None:
        return default
    if isinstance(node, Mapping):
        return node.get(key, default)
    getter = getattr(node, "get", None)  # omegaconf DictConfig, verl's BaseConfig
    if callable(getter):
        try:
            return getter(key, default)
        except Exception:  # a dataclass config without that key
            pass
    return getattr(node, key, default)


_MOVED = {"alpha": "hints.weight", "beta": "pairs.weight"}  # earlier keys: one line naming the new one


def estimator_weights(config: Any) -> tuple[float, float]:
    """The weights of the hints and pairs channels, `algorithm.swe_openenv.hints.weight` and
    `.pairs.weight` (as the trainer's `loss.hints.weight`, `loss.pairs.weight`), from a dict, an
    omegaconf node or verl's AlgoConfig; 0 when unset."""
    node = _get(config, ESTIMATOR) or {}
    for old, new in _MOVED.items():
        if _get(node, old) is not None:
            raise ValueError(f"algorithm.{ESTIMATOR}.{old}: moved to algorithm.{ESTIMATOR}.{new}")
    weights = []
    for channel in ("hints", "pairs"):
        weight = float(_get(_get(node, channel) or {}, "weight", 0.0) or 0.0)
        if weight < 0:
            raise ValueError(f"algorithm.{ESTIMATOR}.{channel}.weight must be >= 0 (got {weight})")
        weights.append(weight)
    return weights[0], weights[1]


def _field(name: str, given: Any, batch: Any) -> Any:
    if given is not None:
        return given
    if batch is None:
        return None
    try:
        return batch[name] if name in batch.keys() else None
    except (KeyError, AttributeError, TypeError):
        return None


def compute_swe_openenv_advantage(token_level_rewards: Any, response_mask: Any, index: Any, epsilon: float = 1e-6,
                                  norm_adv_by_std_in_grpo: bool | None = None, config: Any = None, *,
                                  old_log_probs: Any = None, hint_log_probs: Any = None, hint_mask: Any = None,
                                  pair_scores: Any = None, batch: Any = None, **_: Any) -> tuple[Any, Any]:
    """GRPO's outcome advantage plus `alpha` * the hints channel's term and `beta` * the pairs channel's
    (module docstring). Weights: `config.swe_openenv.hints.weight` and `.pairs.weight`
    (`algorithm.swe_openenv` in a VeRL run). The per-token inputs: keyword arguments, else `batch[...]` (`old_log_probs`,
    `swe_hint_log_probs`, `swe_hint_mask`, `swe_pair_scores`); a term whose weight is above 0 and
    whose inputs are missing is a ValueError, never silently left out. `norm_adv_by_std_in_grpo`:
    the argument, else the config's (VeRL passes only the config to a registered estimator), else True.
    Returns (advantages, returns), both the same tensor, as GRPO's."""
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    if norm_adv_by_std_in_grpo is None:
        norm_adv_by_std_in_grpo = bool(_get(config, "norm_adv_by_std_in_grpo", True))
    advantages, _returns = compute_grpo_outcome_advantage(
        token_level_rewards=token_level_rewards, response_mask=response_mask, index=index, epsilon=epsilon,
        norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo, config=config)
    alpha, beta = estimator_weights(config)
    mask = response_mask.to(advantages.dtype)
    if alpha > 0:
        teacher, student = _field(HINT_LOG_PROBS, hint_log_probs, batch), _field("old_log_probs", old_log_probs, batch)
        sites = _field(HINT_MASK, hint_mask, batch)
        needed = ((HINT_LOG_PROBS, teacher), ("old_log_probs", student), (HINT_MASK, sites))
        missing = [name for name, value in needed if value is None]
        if missing:
            raise ValueError(f"algorithm.{ESTIMATOR}.hints.weight={alpha} needs {', '.join(missing)} in the batch "
                             "(docs/frameworks/verl.md); set it to 0 to train without the hints channel")
        term = (teacher.to(advantages.dtype) - student.to(advantages.dtype)) * sites.to(advantages.dtype) * mask
        advantages = advantages + alpha * term
    if beta > 0:
        scores = _field(PAIR_SCORES, pair_scores, batch)
        if scores is None:
            raise ValueError(f"algorithm.{ESTIMATOR}.pairs.weight={beta} needs {PAIR_SCORES} in the batch "
                             "(docs/frameworks/verl.md); set it to 0 to train without the pairs channel")
        advantages = advantages + beta * scores.to(advantages.dtype) * mask
    return advantages, advantages


# ---------------------------------------------------------------- episodes shared by the tool objects


@dataclass
class _Settings:
    urls: tuple[str, ...]
    token_var: str
    max_output_chars: int | None
    profile: ToolProfile
    submit_on_truncation: bool

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> _Settings:
        urls = config.get("urls") or os.environ.get(URLS_ENV, "")
        urls = [u.strip() for u in urls.split(",")] if isinstance(urls, str) else [str(u).strip() for u in urls]
        submit = config.get("submit_on_truncation", True)
        if isinstance(submit, str):
            submit = submit.strip().lower() not in ("", "0", "false", "no", "off")
        limit = config.get("max_output_chars")
        return cls(urls=tuple(u for u in urls if u), token_var=str(config.get("token_var") or TOKEN_ENV),
                   max_output_chars=int(limit) if limit is not None else None,
                   profile=get_profile(config.get("profile")), submit_on_truncation=bool(submit))


@dataclass
class _Episode:
    key: str
    trajectory: bool  # keyed by an agent loop's trajectory (closed by finish_trajectory), else by instance ids
    pool: ReplicaPool
    profile: ToolProfile
    opening: asyncio.Future | None = None
    session: Any = None
    issue: str = ""
    handles: set[str] = field(default_factory=set)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return bool(self.record.get("done"))

    def snapshot(self) -> dict[str, Any]:
        return json.loads(json.dumps(self.record, default=str))


_POOLS: dict[tuple, ReplicaPool] = {}
_EPISODES: dict[str, _Episode] = {}
_HANDLES: dict[str, str] = {}  # tool-instance id -> episode key


def _pool(settings: _Settings) -> ReplicaPool:
    """One pool per (replicas, token, event loop): the /mux sockets are the loop's."""
    if not settings.urls:
        raise ValueError(f"no env replica: set urls in the tool config, or ${URLS_ENV}")
    token = os.environ.get(settings.token_var) or None
    key = (settings.urls, token, asyncio.get_running_loop())
    pool = _POOLS.get(key)
    if pool is None:
        pool = _POOLS[key] = ReplicaPool(list(settings.urls),
                                         ClientConfig(token=SecretStr(token) if token else None))
    return pool


def open_episodes() -> dict[str, dict[str, Any]]:
    """The episodes this process holds open, by key: their records (for tests and diagnostics)."""
    return {key: episode.snapshot() for key, episode in _EPISODES.items() if episode.session is not None}


async def _close(episode: _Episode) -> None:
    """Close the episode's session (an unsubmitted one ends ungraded); the trace stays on the server."""
    session, episode.session = episode.session, None
    if session is not None:
        try:
            await episode.pool.release(session)
        except EnvClientError:
            pass  # already gone on the server


async def _lost(episode: _Episode, what: str, exc: BaseException) -> EnvSessionError:
    """A session that failed mid-episode: released at once, one line saying what was lost and why."""
    await _close(episode)
    where = episode.record.get("episode_id") or episode.record.get("instance_id") or episode.key
    line = f"the env session of episode {where} was lost during {what} ({type(exc).__name__}: {exc}); it was released"
    line = " ".join(line.split())
    episode.record.update(done=True, lost=line, reward=episode.record.get("reward") or 0.0)
    return EnvSessionError("SESSION_ERROR", line)


def _finish(episode: _Episode, obs: Mapping[str, Any]) -> float:
    info = step_info(dict(obs))
    reward = float(obs.get("reward") or 0.0)
    episode.record.update({k: info[k] for k in _FINAL_KEYS if k in info}, done=True, submitted=True, reward=reward)
    return reward


async def _submit(episode: _Episode) -> None:
    """Submit an open, unsubmitted episode as the client (origin `client`: left out of state(t)); a
    profile that submits only by its sentinel line ends ungraded, reward 0.0."""
    if episode.done or episode.session is None:
        return
    submit = episode.profile.submit_tool
    if submit is None:
        episode.record.update(done=True, reward=0.0)
        return
    async with episode.lock:
        try:
            obs = await episode.session.call_tool(submit, {}, metadata={"origin": "client"})
        except EnvClientError as exc:
            raise await _lost(episode, "the client's submit", exc) from exc
        step = step_info(obs, submit)
        step["origin"] = "client"
        episode.record["steps"].append(step)
        _finish(episode, obs)
    await _close(episode)


async def finish_trajectory(key: str, submit: bool = True) -> dict[str, Any] | None:
    """End a trajectory's episode: submit it if it is open and unsubmitted (`submit`), close the session,
    forget it; its record (None when the trajectory never opened one). A session lost on the way ends
    the episode with reward 0.0 and `lost` in the record, not an exception."""
    episode = _EPISODES.pop(key, None)
    if episode is None:
        return None
    for handle in list(episode.handles):
        _HANDLES.pop(handle, None)
    if episode.opening is not None and not episode.opening.done():
        try:
            await episode.opening
        except BaseException:
            pass
    try:
        if submit:
            await _submit(episode)
    except EnvSessionError:
        pass  # lost during the client's submit: released, the record says so (`lost`), reward 0.0
    finally:
        await _close(episode)
        episode.record["done"] = True
        episode.record["reward"] = float(episode.record.get("reward") or 0.0)
    return episode.snapshot()


async def close_pools() -> None:
    """Close the replica sockets this event loop's tools opened (the end of a process's work with them)."""
    loop = asyncio.get_running_loop()
    for key in [k for k in _POOLS if k[2] is loop]:
        await _POOLS.pop(key).close()


def _trajectory_kwargs(tools_kwargs: Mapping[str, Any] | None, names: Iterable[str], key: str) -> dict[str, Any]:
    """`tools_kwargs` with every tool's `create_kwargs` holding the trajectory key (and the task's
    settings any tool's entry names: one entry in the dataset is enough)."""
    tools_kwargs = dict(tools_kwargs or {})
    merged: dict[str, Any] = {}
    for entry in tools_kwargs.values():
        merged.update((entry or {}).get("create_kwargs") or {})
    out = {}
    for name in [*tools_kwargs, *(n for n in names if n not in tools_kwargs)]:
        entry = dict(tools_kwargs.get(name) or {})
        entry["create_kwargs"] = {**merged, **(entry.get("create_kwargs") or {}), "trajectory": key}
        out[name] = entry
    return out


# ---------------------------------------------------------------- what needs verl

try:
    from verl.tools.base_tool import BaseTool
    from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
    from verl.trainer.ppo import core_algos as _core_algos
except ImportError as _exc:  # verl (or one of its imports) is not installed
    _VERL_MISSING: ImportError | None = _exc
else:
    _VERL_MISSING = None

    class SWEToolResponse(ToolResponse):
        """verl's ToolResponse with the step's markers (`metadata`: episode_id, instance_id, step,
        tool_name, error_kind, hint_template_key, error_source; the grading summary when done)."""

        metadata: dict[str, Any] = {}

    class SWEOpenEnvTool(BaseTool):
        """One env tool (the name of its `tool_schema`) for VeRL; see the module docstring.

        Tool config `config` keys: `type: native` (VeRL's), `profile` (default `default`), `urls`
        (else $SWE_OPENENV_URLS), `token_var` (the variable holding the replicas' bearer token,
        default ENV_SERVER_TOKEN), `max_output_chars` (tool output kept, head and tail),
        `submit_on_truncation` (default true: a trajectory that ends unsubmitted is submitted by
        `SWEOpenEnvAgentLoop`; false: it ends ungraded, reward 0.0). Without a `tool_schema`,
        `config["name"]` names the tool and the schema is the contract's.
        """

        def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None = None):
            config = dict(config or {})
            settings = _Settings.of(config)
            if tool_schema is None:
                name = config.get("name")
                tool = settings.profile.tool(str(name)) if name else None
                if tool is None:
                    raise ValueError(f"SWEOpenEnvTool without a tool_schema needs config.name, one of "
                                     f"{settings.profile.names} (profile {settings.profile.name!r})")
                tool_schema = OpenAIFunctionToolSchema.model_validate(_verl_schema(tool.policy_schema()))
            super().__init__(config, tool_schema)
            if settings.profile.tool(self.name) is None:
                raise ValueError(f"tool {self.name!r} is not in profile {settings.profile.name!r} "
                                 f"(its tools: {', '.join(settings.profile.names)})")
            self.settings = settings

        def _episode(self, instance_id: str) -> _Episode:
            episode = _EPISODES.get(_HANDLES.get(instance_id, instance_id))
            if episode is None:
                raise ValueError(f"no open episode for tool instance {instance_id!r}: call create() first "
                                 "(or it was released)")
            return episode

        async def create(self, instance_id: str | None = None, create_kwargs: dict | None = None,
                         **kwargs: Any) -> tuple[str, SWEToolResponse]:
            """Open the episode (or join the one open under this id / trajectory); the response's text
            is the task's issue. Settings (`kwargs`, then `create_kwargs`): `instance_id` (the task;
            else the server picks), `episode_id`, `profile`, `trajectory` (the agent loop's key)."""
            options = {**kwargs, **(create_kwargs or {})}
            trajectory = options.pop("trajectory", None)
            handle = instance_id or uuid.uuid4().hex
            key = str(trajectory) if trajectory else handle
            episode = _EPISODES.get(key)
            if episode is None:
                profile = get_profile(options.get("profile") or self.settings.profile.name)
                episode = _EPISODES[key] = _Episode(key=key, trajectory=bool(trajectory), pool=_pool(self.settings),
                                                    profile=profile)
                reset = {k: options[k] for k in ("instance_id", "episode_id") if options.get(k)}
                if profile.name != DEFAULT_PROFILE:
                    reset["profile"] = profile.name
                episode.record = {"episode_id": None, "instance_id": reset.get("instance_id"),
                                  "profile": profile.name, "steps": [], "done": False, "submitted": False,
                                  "reward": None}
                episode.opening = asyncio.ensure_future(episode.pool.open_session(**reset))
            try:
                session, obs = await asyncio.shield(episode.opening)
            except BaseException:
                if _EPISODES.get(key) is episode:
                    _EPISODES.pop(key, None)
                raise
            if episode.session is None and not episode.done:
                episode.session = session
                info = step_info(obs)
                episode.issue = str(obs.get("issue") or "")
                episode.record.update(episode_id=info.get("episode_id"), instance_id=info.get("instance_id"))
            episode.handles.add(handle)
            _HANDLES[handle] = key
            meta = {k: episode.record[k] for k in ("episode_id", "instance_id", "profile")}
            return handle, SWEToolResponse(text=episode.issue, metadata=meta)

        async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
                          ) -> tuple[SWEToolResponse, float, dict]:
            """Run this tool once in the episode; (response, the hidden tests' reward when this call
            submitted else 0.0, the step's markers). VeRL's agent loop passes `agent_data`: the call's
            assistant turn is recorded and the episode's record is put in its `extra_fields`."""
            episode = self._episode(instance_id)
            agent_data = kwargs.get("agent_data")
            if agent_data is not None and not episode.trajectory:
                raise ValueError(f"the SWE tools keep one env episode per trajectory: run them under the agent "
                                 f"loop {AGENT_LOOP!r} (actor_rollout_ref.rollout.agent.default_agent_loop="
                                 f"{AGENT_LOOP}, with agent_loop_config_path; docs/frameworks/verl.md)")
            if episode.done or episode.session is None:
                text = "error: the episode is over (submitted or closed); no further tool calls run"
                meta = {k: episode.record.get(k) for k in ("episode_id", "instance_id")}
                meta.update(tool_name=self.name, episode_done=True)
                return SWEToolResponse(text=text, metadata=meta), 0.0, dict(meta)
            arguments = {k: v for k, v in (parameters or {}).items() if v is not None}
            async with episode.lock:
                try:
                    obs = await episode.session.call_tool(self.name, arguments)
                except EnvClientError as exc:
                    raise await _lost(episode, f"a {self.name} call", exc) from exc
                info = step_info(obs, self.name)
                if agent_data is not None and getattr(agent_data, "assistant_turns", None):
                    info["turn"] = int(agent_data.assistant_turns) - 1
                episode.record["steps"].append(info)
                reward = _finish(episode, obs) if obs.get("done") else 0.0
            if episode.done:
                await _close(episode)  # free the replica's slot now; the record stays for calc_reward
            if agent_data is not None:
                agent_data.extra_fields[RECORD_KEY] = episode.snapshot()
            meta = {k: info[k] for k in ("tool_name", *MARKER_KEYS, *_FINAL_KEYS, "reward", "turn") if k in info}
            text = format_tool_output(obs, self.settings.max_output_chars, episode.profile.output_style)
            return SWEToolResponse(text=text, metadata=meta), reward, dict(meta)

        async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
            """The hidden tests' reward: the episode is submitted first if it is not yet (0.0 for an
            episode that ended unsubmitted, or whose profile submits only by its sentinel line)."""
            episode = self._episode(instance_id)
            await _submit(episode)
            return float(episode.record.get("reward") or 0.0)

        async def release(self, instance_id: str, **kwargs: Any) -> None:
            """Forget this tool instance; the last one of an instance-keyed episode closes its session
            (a trajectory's episode stays open for its next call: `finish_trajectory` closes it)."""
            key = _HANDLES.pop(instance_id, None)
            episode = _EPISODES.get(key) if key is not None else None
            if episode is None:
                return
            episode.handles.discard(instance_id)
            if not episode.trajectory and not episode.handles:
                _EPISODES.pop(key, None)
                await _close(episode)

        def record(self, instance_id: str) -> dict[str, Any]:
            """The episode's record (episode id, per-step markers, reward, resolved) of an open tool instance."""
            return self._episode(instance_id).snapshot()

    def _register_estimator() -> None:
        registry = _core_algos.ADV_ESTIMATOR_REGISTRY
        current = registry.get(ESTIMATOR)
        if current is not None and getattr(current, "__qualname__", None) != compute_swe_openenv_advantage.__qualname__:
            raise ValueError(f"advantage estimator {ESTIMATOR!r} is already registered by {current!r}")
        registry.pop(ESTIMATOR, None)  # this module run again (a tool registry's fresh import): the new function
        _core_algos.register_adv_est(ESTIMATOR)(compute_swe_openenv_advantage)

    if __name__ == _MODULE:  # not when run as a script (python -m writes files only)
        _register_estimator()

try:
    from verl.experimental.agent_loop.agent_loop import register as _register_agent_loop
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
except ImportError as _exc:
    _LOOP_MISSING: ImportError | None = _exc
else:
    _LOOP_MISSING = None

    class SWEOpenEnvAgentLoop(ToolAgentLoop):
        """VeRL's `ToolAgentLoop` with one env episode per trajectory (module docstring): the reward is
        the hidden tests' (`reward_score`), the episode's record is `extra_fields["swe_openenv"]`."""

        def _swe_settings(self) -> _Settings | None:
            return next((t.settings for t in self.tools.values() if isinstance(t, SWEOpenEnvTool)), None)

        async def run(self, sampling_params: dict[str, Any], **kwargs: Any):
            key = f"verl-{uuid.uuid4().hex}"
            names = [name for name, tool in self.tools.items() if isinstance(tool, SWEOpenEnvTool)]
            kwargs["tools_kwargs"] = _trajectory_kwargs(kwargs.get("tools_kwargs"), names, key)
            settings = self._swe_settings()
            try:
                output = await super().run(sampling_params, **kwargs)
            except BaseException:
                await finish_trajectory(key, submit=False)
                raise
            record = await finish_trajectory(key, submit=settings.submit_on_truncation if settings else True)
            if record is None:  # no tool call: no episode was opened, nothing was submitted
                record = {"episode_id": None, "instance_id": None,
                          "profile": settings.profile.name if settings else DEFAULT_PROFILE, "steps": [],
                          "done": True, "submitted": False, "reward": 0.0}
            output.reward_score = float(record.get("reward") or 0.0)
            output.extra_fields[RECORD_KEY] = record
            return output

    if __name__ == _MODULE:
        _register_agent_loop(AGENT_LOOP)(SWEOpenEnvAgentLoop)


def __getattr__(name: str) -> Any:
    """The names that need verl, when it is missing: one line naming the install."""
    if name in ("SWEOpenEnvTool", "SWEToolResponse") and _VERL_MISSING is not None:
        raise MissingDependencyError(f"env_client.adapters.verl.{name} needs verl {VERL_VERSION}: {INSTALL_LINE} "
                                     f"(import failed: {_VERL_MISSING})")
    if name == "SWEOpenEnvAgentLoop" and _LOOP_MISSING is not None:
        raise MissingDependencyError(f"env_client.adapters.verl.{name} needs verl {VERL_VERSION}'s agent loop: "
                                     f"{INSTALL_LINE} (import failed: {_LOOP_MISSING})")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---------------------------------------------------------------- python -m env_client.adapters.verl


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m env_client.adapters.verl",
                                     description="Write the files a VeRL run reads: the tool config, the agent "
                                                 "loop config, the dataset (docs/frameworks/verl.md).")
    sub = parser.add_subparsers(dest="command", required=True)
    tools = sub.add_parser("tool-config", help="the tool config (multi_turn.tool_config_path)")
    tools.add_argument("--out", required=True, metavar="FILE")
    tools.add_argument("--profile", default=DEFAULT_PROFILE, choices=sorted(PROFILES))
    tools.add_argument("--urls", metavar="URL,URL", help=f"the replicas (default: ${URLS_ENV} when a session opens)")
    tools.add_argument("--token-var", default=TOKEN_ENV, help="the variable holding the replicas' token")
    tools.add_argument("--max-output-chars", type=int)
    tools.add_argument("--no-submit-on-truncation", action="store_true",
                       help="a trajectory that ends unsubmitted ends ungraded (reward 0.0)")
    loops = sub.add_parser("agent-loop-config", help="the agent loop config (agent.agent_loop_config_path)")
    loops.add_argument("--out", required=True, metavar="FILE")
    data = sub.add_parser("dataset", help="a dataset from the env's task file (data.train_files)")
    data.add_argument("--tasks", required=True, metavar="FILE", help="the env's task file (JSONL or a JSON array)")
    data.add_argument("--out", required=True, metavar="FILE", help="train.parquet, or .jsonl / .json")
    data.add_argument("--instance-ids", metavar="A,B", help="only these tasks (default: all)")
    data.add_argument("--profile", default=DEFAULT_PROFILE, choices=sorted(PROFILES))
    data.add_argument("--split", default="train")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    header = f"# generated by: python -m env_client.adapters.verl {args.command} (verl {VERL_VERSION})\n"
    try:
        if args.command == "tool-config":
            data = tool_config(args.profile, args.urls, args.token_var, args.max_output_chars,
                               not args.no_submit_on_truncation)
            print(f"wrote {len(data['tools'])} tools to {write_yaml(data, args.out, header)}")
        elif args.command == "agent-loop-config":
            print(f"wrote agent loop {AGENT_LOOP!r} to {write_yaml(agent_loop_config(), args.out, header)}")
        else:
            ids = [i.strip() for i in (args.instance_ids or "").split(",") if i.strip()]
            rows = dataset_rows(args.tasks, ids or None, args.profile, split=args.split)
            print(f"wrote {write_rows(rows, args.out, 'VeRL (data.train_files)')} rows to {args.out}")
    except (OSError, ValueError, MissingDependencyError) as exc:
        print(f"verl: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
