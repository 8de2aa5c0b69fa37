"""VeRL's interfaces driven with the real package (run with the verl venv's python).

    python verl_episode.py tools BASE_URL TASKS_PATH INSTANCE_ID PATCH_FILE WORKDIR
    python verl_episode.py estimator [DOC_KEYS_JSON]

tools: VeRL's own loader (`initialize_tools_from_config`) reads the tool config `tool_config()`
generated; the loaded `SWEOpenEnvTool`s are driven through their `BaseTool` methods against the real
server: fix (a command that does not exist, a view of a missing file, the gold patch applied with the
bash tool, `calc_reward` on another tool object, everything after done), control (`ls`, `calc_reward`),
abandoned (the gold edit, `release` without `calc_reward`), lost (the session's socket fails under
a call). Between scenarios the server's `envserver_sessions_active` (its /metrics) is read. Then
the agent loop: `SWEOpenEnvAgentLoop.run` around a scripted stand-in for `ToolAgentLoop.run` (no
model, no tokenizer) that makes its tool calls through VeRL's own `ToolAgentLoop._call_tool` (create /
execute / release per call) with a real `AgentData`: two trajectories at once (one submits, one is
submitted by the loop at its end), one with `submit_on_truncation: false`, and the same tools under
VeRL's plain `ToolAgentLoop` (refused with the fix named).

estimator: the registered `swe_openenv` estimator against `compute_grpo_outcome_advantage` (weights 0,
both std modes, called the way VeRL's `compute_advantage` calls a registered estimator), with weights
(keyword inputs, a `TensorDict` batch), its errors, and the mask helpers; and which of the config keys
docs/frameworks/verl.md sets are missing from verl's own trainer config.

Prints one JSON line. Imports only what the venv installed (verl and this project's client).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
import uuid
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx

URLS_ENV = "SWE_OPENENV_URLS"
DOC_KEYS: list[str] = []  # estimator mode: the config keys the docs set (argv[2], a JSON list)
FIX = {"path": "six.py", "old": 'return s.encode("utf-8")', "new": 'return s.encode("latin-1")'}


def dump(result: Any) -> dict:
    """(ToolResponse, step reward, metrics) as JSON."""
    response, reward, metrics = result
    return {"type": type(response).__name__, "text": response.text, "metadata": getattr(response, "metadata", None),
            "reward": reward, "metrics": metrics}


def sessions_active(url: str, token: str, expect: int, timeout_s: float = 10.0) -> int:
    """The server's live sessions (its /metrics gauge), polled until it is `expect` or `timeout_s` passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=10).text
        value = int(float(re.search(r"^envserver_sessions_active (\S+)$", text, re.M).group(1)))
        if value == expect or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


async def tools_mode(url: str, tasks_path: str, instance_id: str, patch: str, workdir: Path, token: str) -> dict:
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput, _agent_loop_registry
    from verl.experimental.agent_loop.tool_agent_loop import AgentData, ToolAgentLoop
    from verl.experimental.agent_loop.tool_parser import FunctionCall
    from verl.tools.base_tool import BaseTool
    from verl.tools.schemas import ToolResponse
    from verl.tools.tool_registry import initialize_tools_from_config

    import env_client.adapters.verl as adapter
    from env_client.errors import EnvConnectionError

    out: dict[str, Any] = {"version": metadata.version("verl")}
    # VeRL's own loader reads the generated config (urls in the file; the token from $ENV_SERVER_TOKEN)
    path = adapter.write_yaml(adapter.tool_config(urls=[url]), workdir / "tools.yaml")
    tools = {t.name: t for t in initialize_tools_from_config(str(path))}
    out["loaded"] = {name: {"class": f"{type(t).__module__}.{type(t).__name__}", "base_tool": isinstance(t, BaseTool),
                            "schema": t.tool_schema.model_dump(exclude_unset=True, exclude_none=True),
                            "profile": t.settings.profile.name} for name, t in tools.items()}
    out["generated"] = {e["tool_schema"]["function"]["name"]: e["tool_schema"] for e in adapter.tool_config()["tools"]}
    bash_only = adapter.write_yaml(adapter.tool_config("bash-only", urls=[url]), workdir / "bash_only.yaml")
    out["bash_only"] = {t.name: t.settings.profile.name for t in initialize_tools_from_config(str(bash_only))}
    out["agent_loop_registered"] = _agent_loop_registry.get(adapter.AGENT_LOOP)
    out["sessions_before"] = sessions_active(url, token, 0)
    bash, view = tools["bash"], tools["view"]

    # fix: every tool object created with the trajectory's id (VeRL's older rollouts do that) shares one episode
    iid, created = await bash.create(create_kwargs={"instance_id": instance_id})
    joined = [await tools[name].create(iid, create_kwargs={"instance_id": instance_id})
              for name in ("view", "str_replace", "create", "submit")]
    fix: dict[str, Any] = {"instance_id": iid, "created": {"type": type(created).__name__, "text": created.text,
                                                           "metadata": created.metadata},
                           "joined_ids": [j[0] for j in joined], "open": len(adapter.open_episodes()),
                           "sessions_open": sessions_active(url, token, 1)}
    fix["failed"] = dump(await bash.execute(iid, {"command": "no-such-tool --version"}))
    fix["view_missing"] = dump(await view.execute(iid, {"path": "no/such/file.py"}))
    heredoc = f"git apply <<'SWE_PATCH'\n{patch if patch.endswith(chr(10)) else patch + chr(10)}SWE_PATCH"
    fix["applied"] = dump(await bash.execute(iid, {"command": heredoc}))
    fix["diff"] = dump(await bash.execute(iid, {"command": "git diff --stat"}))
    fix["reward"] = await view.calc_reward(iid)  # another tool object of the same episode submits it
    fix["reward_again"] = await bash.calc_reward(iid)
    fix["after_done"] = dump(await bash.execute(iid, {"command": "ls"}))
    fix["record"] = bash.record(iid)
    fix["sessions_after_submit"] = sessions_active(url, token, 0)  # the slot is freed at submit
    for tool in tools.values():
        await tool.release(iid)
    fix["open_after_release"] = adapter.open_episodes()
    out["fix"] = fix

    # control: no change, then calc_reward (the client's submit)
    cid, _ = await bash.create(create_kwargs={"instance_id": instance_id})
    control = {"ls": dump(await bash.execute(cid, {"command": "ls"})), "sessions_open": sessions_active(url, token, 1)}
    control["reward"] = await bash.calc_reward(cid)
    control["record"] = bash.record(cid)
    await bash.release(cid)
    control["sessions_after_release"] = sessions_active(url, token, 0)
    out["control"] = control

    # abandoned: the gold edit, then release without calc_reward: closed on the server, never graded
    aid, _ = await view.create(create_kwargs={"instance_id": instance_id})
    abandoned = {"edit": dump(await tools["str_replace"].execute(aid, FIX)), "record": view.record(aid),
                 "sessions_open": sessions_active(url, token, 1)}
    await view.release(aid)
    abandoned["sessions_after_release"] = sessions_active(url, token, 0)
    abandoned["open_after_release"] = adapter.open_episodes()
    try:
        await bash.execute(aid, {"command": "ls"})
    except ValueError as exc:
        abandoned["after_release"] = str(exc)
    out["abandoned"] = abandoned

    # lost: the socket fails under a call; the tool says so in one line and releases the session
    lid, _ = await bash.create(create_kwargs={"instance_id": instance_id})
    lost: dict[str, Any] = {"sessions_open": sessions_active(url, token, 1)}
    session = adapter._EPISODES[adapter._HANDLES[lid]].session

    async def broken(*args: Any, **kwargs: Any) -> dict:  # the socket dropped: the server still holds the session
        raise EnvConnectionError("connection to the replica lost (simulated)")

    session.call_tool = broken
    try:
        await bash.execute(lid, {"command": "ls"})
    except Exception as exc:  # noqa: BLE001 - the test reads what was raised
        lost["error"] = {"type": type(exc).__name__, "message": str(exc)}
    lost["record"] = bash.record(lid)
    lost["open"] = adapter.open_episodes()
    lost["sessions_after"] = sessions_active(url, token, 0)
    await bash.release(lid)
    out["lost"] = lost

    # the agent loop: SWEOpenEnvAgentLoop.run around a scripted ToolAgentLoop.run that makes the model's
    # calls through VeRL's own _call_tool (create / execute / release per call), with a real AgentData
    async def scripted_run(self: Any, sampling_params: dict, **kwargs: Any) -> Any:
        agent_data = AgentData(messages=[], image_data=None, video_data=None, audio_data=None,
                               mm_processor_kwargs=None, metrics={}, request_id=uuid.uuid4().hex,
                               tools_kwargs=kwargs.get("tools_kwargs", {}))
        texts = []
        for name, arguments in kwargs["script"]:
            agent_data.assistant_turns += 1
            call = FunctionCall(name=name, arguments=json.dumps(arguments))
            response, reward, _ = await self._call_tool(call, agent_data.tools_kwargs, agent_data)
            assert type(response) is ToolResponse, type(response)  # what VeRL hands the model: text only
            texts.append(response.text)
            if reward is not None:
                agent_data.tool_rewards.append(reward)
            await asyncio.sleep(0)
        agent_data.extra_fields.update(tool_texts=texts, tool_rewards=agent_data.tool_rewards,
                                       tools_kwargs=agent_data.tools_kwargs)
        return AgentLoopOutput(prompt_ids=[1], response_ids=[2], response_mask=[1], metrics=AgentLoopMetrics(),
                               extra_fields=agent_data.extra_fields, num_turns=2 * len(kwargs["script"]) + 1)

    ToolAgentLoop.run = scripted_run

    def make_loop(cls: type, loop_tools: dict) -> Any:
        loop = cls.__new__(cls)  # what _call_tool reads of a loop built by VeRL's worker
        loop.tools, loop.max_tool_response_length, loop.tool_response_truncate_side = loop_tools, 100_000, "middle"
        return loop

    def loop_out(output: Any) -> dict:
        return {"reward_score": output.reward_score, "record": output.extra_fields.get(adapter.RECORD_KEY),
                "tool_texts": output.extra_fields.get("tool_texts"),
                "tool_rewards": output.extra_fields.get("tool_rewards"),
                "tools_kwargs": output.extra_fields.get("tools_kwargs")}

    row_kwargs = {"bash": {"create_kwargs": {"instance_id": instance_id}}}  # one entry is enough (the loop spreads it)
    submits = [("bash", {"command": "no-such-tool --version"}), ("str_replace", FIX),
               ("bash", {"command": "grep -c latin-1 six.py"}), ("submit", {})]
    truncated = [("str_replace", FIX), ("bash", {"command": "ls"})]
    loop = make_loop(adapter.SWEOpenEnvAgentLoop, tools)
    first, second = await asyncio.gather(loop.run({}, tools_kwargs=row_kwargs, script=submits),
                                         make_loop(adapter.SWEOpenEnvAgentLoop, tools).run(
                                             {}, tools_kwargs=row_kwargs, script=truncated))
    agent: dict[str, Any] = {"submits": loop_out(first), "truncated": loop_out(second),
                             "open_after": adapter.open_episodes(), "sessions_after": sessions_active(url, token, 0)}
    no_submit = adapter.write_yaml(adapter.tool_config(urls=[url], submit_on_truncation=False), workdir / "ns.yaml")
    ns_tools = {t.name: t for t in initialize_tools_from_config(str(no_submit))}
    agent["no_submit"] = loop_out(await make_loop(adapter.SWEOpenEnvAgentLoop, ns_tools).run(
        {}, tools_kwargs=row_kwargs, script=truncated))
    agent["no_calls"] = loop_out(await make_loop(adapter.SWEOpenEnvAgentLoop, tools).run(
        {}, tools_kwargs=row_kwargs, script=[]))
    agent["plain_loop"] = loop_out(await make_loop(ToolAgentLoop, tools).run(
        {}, tools_kwargs=row_kwargs, script=[("bash", {"command": "ls"})]))
    agent["plain_open_after"] = adapter.open_episodes()
    agent["sessions_end"] = sessions_active(url, token, 0)
    out["agent_loop"] = agent
    await adapter.close_pools()
    return out


def estimator_mode() -> dict:
    import numpy as np
    import torch
    from omegaconf import OmegaConf
    from tensordict import TensorDict
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo import core_algos

    import env_client.adapters.verl as adapter

    out: dict[str, Any] = {"version": metadata.version("verl")}
    fn = core_algos.get_adv_estimator_fn(adapter.ESTIMATOR)
    out["registered"] = fn is adapter.compute_swe_openenv_advantage
    rewards = torch.zeros(3, 4)
    rewards[0, 3], rewards[1, 2], rewards[2, 3] = 1.0, 0.0, 0.5  # outcome reward on each response's last token
    mask = torch.tensor([[1, 1, 0, 1], [1, 1, 1, 0], [1, 0, 1, 1]])
    index = np.array(["a", "a", "b"], dtype=object)
    old = torch.tensor([[-1.0, -2.0, -9.0, -0.5], [-0.2, -0.4, -0.6, -9.0], [-1.5, -9.0, -0.1, -0.3]])
    hint = torch.tensor([[-0.5, -1.0, -9.0, -0.5], [-0.3, -0.1, -0.2, -9.0], [-1.0, -9.0, -0.4, -0.1]])
    hint_mask = torch.tensor([[0.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    pairs = torch.tensor([[0.0, 0.0, 0.0, -1.0], [-1.0, -1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])

    def grpo(norm: bool) -> torch.Tensor:
        return core_algos.compute_grpo_outcome_advantage(rewards.clone(), mask, index, norm_adv_by_std_in_grpo=norm)[0]

    equal = {}
    for norm in (True, False):
        zero = OmegaConf.create({"adv_estimator": adapter.ESTIMATOR, "norm_adv_by_std_in_grpo": norm,
                                 "swe_openenv": {"hints": {"weight": 0.0}, "pairs": {"weight": 0.0}}})
        # as VeRL's compute_advantage calls a registered estimator: rewards, mask, config, index
        adv, ret = fn(token_level_rewards=rewards.clone(), response_mask=mask, config=zero, index=index)
        equal[str(norm)] = bool(torch.equal(adv, grpo(norm)) and torch.equal(ret, adv))
    unset = fn(token_level_rewards=rewards.clone(), response_mask=mask, config=AlgoConfig(), index=index)[0]
    equal["algo_config"] = bool(torch.equal(unset, grpo(True)))  # verl's AlgoConfig: no swe_openenv node, weights 0
    # weights 0 ignore the extra inputs entirely
    with_inputs = fn(token_level_rewards=rewards.clone(), response_mask=mask, index=index,
                     config={"swe_openenv": {"hints": {"weight": 0}, "pairs": {"weight": 0}}}, old_log_probs=old, hint_log_probs=hint,
                     hint_mask=hint_mask, pair_scores=pairs)[0]
    equal["inputs_ignored"] = bool(torch.equal(with_inputs, grpo(True)))
    out["equal_to_grpo"] = equal
    out["grpo"] = grpo(True).tolist()

    weights = {"norm_adv_by_std_in_grpo": True, "swe_openenv": {"hints": {"weight": 0.1}, "pairs": {"weight": 0.05}}}
    out["keywords"] = fn(token_level_rewards=rewards.clone(), response_mask=mask, index=index, config=weights,
                         old_log_probs=old, hint_log_probs=hint, hint_mask=hint_mask, pair_scores=pairs)[0].tolist()
    batch = TensorDict({"old_log_probs": old, adapter.HINT_LOG_PROBS: hint, adapter.HINT_MASK: hint_mask,
                        adapter.PAIR_SCORES: pairs}, batch_size=[3])
    out["batch"] = fn(token_level_rewards=rewards.clone(), response_mask=mask, index=index,
                      config=OmegaConf.create(weights), batch=batch)[0].tolist()
    out["alpha_only"] = fn(token_level_rewards=rewards.clone(), response_mask=mask, index=index,
                           config={"swe_openenv": {"hints": {"weight": 0.5}}}, batch=batch)[0].tolist()
    out["beta_only_unnormalized"] = fn(token_level_rewards=rewards.clone(), response_mask=mask, index=index,
                                       config={"norm_adv_by_std_in_grpo": False, "swe_openenv": {"pairs": {"weight": 1.0}}},
                                       batch=batch)[0].tolist()
    errors = {}
    for name, config in (("alpha", {"swe_openenv": {"hints": {"weight": 0.1}}}),
                         ("beta", {"swe_openenv": {"pairs": {"weight": 0.1}}}),
                         ("negative", {"swe_openenv": {"hints": {"weight": -0.1}}}),
                         ("moved", {"swe_openenv": {"alpha": 0.1}})):
        try:
            fn(token_level_rewards=rewards.clone(), response_mask=mask, index=index, config=config)
        except ValueError as exc:
            errors[name] = str(exc)
    out["errors"] = errors

    # the helpers: turns of a multi-turn response mask, the tokens after the first error, pair scores by turn
    multi = torch.tensor([[1, 1, 0, 0, 1, 0, 1, 1], [0, 1, 1, 0, 1, 1, 0, 0]])
    records = [
        {"episode_id": "ep-1", "steps": [
            {"tool_name": "bash", "step": 1, "turn": 0},
            {"tool_name": "bash", "step": 2, "turn": 1, "error_kind": "command_not_found", "error_source": "agent"},
            {"tool_name": "submit", "step": 3, "turn": 2}]},
        {"episode_id": "ep-2", "steps": [
            {"tool_name": "bash", "step": 1, "turn": 0, "error_kind": "sandbox_error", "error_source": "infra"},
            {"tool_name": "view", "step": 2, "turn": 1}]},
    ]
    pair_records = [{"provenance": {"episode_id": "ep-1", "t": 0}}, {"provenance": {"episode_id": "ep-2", "t": 1}},
                    {"provenance": {"episode_id": "other", "t": 0}}]
    fields = adapter.batch_fields(multi, records, pair_records)
    out["helpers"] = {
        "turns": adapter.assistant_turn_index(multi).tolist(),
        "first_error": [adapter.first_error_turn(r) for r in records],
        "hint_mask": fields[adapter.HINT_MASK].tolist(),
        "pair_scores": fields[adapter.PAIR_SCORES].tolist(),
        "pair_turns": [adapter.pair_turn_scores(r, pair_records) for r in records],
    }
    # the config keys docs/frameworks/verl.md sets exist in verl's own trainer config
    config = OmegaConf.load(Path(core_algos.__file__).parents[1] / "config" / "_generated_ppo_trainer.yaml")
    def present(key: str) -> bool:  # a key whose value may be mandatory-missing (`???`, e.g. rollout.name)
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(config, parent) if parent else config
        return node is not None and leaf in node.keys()

    out["doc_keys_missing"] = [k for k in DOC_KEYS if not present(k)]
    return out


def main() -> None:
    import os

    mode = sys.argv[1]
    if mode == "tools":
        url, tasks_path, instance_id, patch_file, workdir = sys.argv[2:7]
        out = asyncio.run(tools_mode(url, tasks_path, instance_id, Path(patch_file).read_text(), Path(workdir),
                                     os.environ["ENV_SERVER_TOKEN"]))
    else:
        DOC_KEYS.extend(json.loads(sys.argv[2]) if len(sys.argv) > 2 else [])
        out = estimator_mode()
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
