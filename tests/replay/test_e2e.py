"""End to end: rollouts on the real env server -> replay (fake teachers) -> pairs -> a channel-3 step.

Real parts: the env server app under uvicorn with the bwrap sandbox, the trainer's /mux
client, the replay CLI, the channel-3 loss on a tiny Qwen2 with the real tokenizer. The
only double is the teacher endpoint (support/teacher_double.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
from collections import Counter

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import httpx  # noqa: E402
import uvicorn  # noqa: E402
from support.servers import free_port, serve_in_thread  # noqa: E402

import env_client  # noqa: E402
from env_server import app as app_mod  # noqa: E402
from env_server.config import ServerConfig  # noqa: E402
from trainer_client import losses  # noqa: E402
from trainer_client.replay.cli import add_subcommands  # noqa: E402

from support.teacher_double import FakeTeacherServer, Reply  # noqa: E402
from .replay_support import make_task  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("bwrap")]  # bwrap: skips without it, fails in CI

STUDENT = [("bash", {"command": "ls"}), ("bash", {"command": "cat nope.txt"}),
           ("view", {"path": "calc.py"}), ("bash", {"command": "echo done"})]


def teacher_script(model: str, body: dict, n: int) -> Reply:
    t = sum(1 for m in body["messages"] if m["role"] == "tool")
    if t == 0:                                   # all agree with the student (canonically) -> no pair
        return Reply.call("bash", command="  ls ")
    if t == 1:                                   # unanimous, student differs -> pair
        return Reply.call("view", path="/workspace/calc.py")
    if t == 2:                                   # 2 of 3 agree -> pair
        return Reply.call("bash", command="cat calc.py") if model != "t-c" else Reply.call("view", path="x.py")
    return Reply.call("bash", command={"t-a": "pwd", "t-b": "ls -la", "t-c": "git status"}[model])


@pytest.fixture
def env_url(tmp_path):
    app = app_mod.create_app(ServerConfig(tasks_path=make_task(tmp_path), data_dir=tmp_path / "data"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with serve_in_thread(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"), url, timeout_s=30):
        yield url


async def rollout(url: str, instance_id: str = "calc-1", actions=STUDENT) -> str:
    """One scripted episode (`actions`: (tool, arguments) pairs); its episode id."""
    pool = env_client.ReplicaPool([url])
    try:
        session, obs = await pool.open_session(instance_id=instance_id)
        for tool, args in actions:
            await session.call_tool(tool, args)
        await pool.release(session)
        return obs["metadata"]["episode_id"]
    finally:
        await pool.close()


def canon(x) -> str:
    return json.dumps(x, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def test_rollouts_replay_pairs_then_a_channel3_step(env_url, tmp_path, capsys):
    episodes = [asyncio.run(rollout(env_url)) for _ in range(2)]
    parser = argparse.ArgumentParser(prog="trainer-client")
    add_subcommands(parser.add_subparsers(dest="command"))
    pairs_path = tmp_path / "pairs.jsonl"
    with FakeTeacherServer(teacher_script) as fake:
        cfg = tmp_path / "teachers.yaml"
        cfg.write_text(json.dumps({"teachers": [
            {"name": n, "model": n, "base_url": fake.base_url, "price_in": 1e-6, "price_out": 2e-6}
            for n in ("t-a", "t-b", "t-c")]}))
        argv = ["replay", "--env-url", env_url, "--teachers", str(cfg), "--out", str(pairs_path),
                "--max-usd", "1", "--no-progress", "--raw-out", str(tmp_path / "raw.jsonl")]
        for ep in episodes:
            argv += ["--episode", ep]
        args = parser.parse_args(argv)
        assert args.func(args) == 0
        bodies = fake.bodies()
    assert len(bodies) == 2 * 4 * 3
    # every teacher got exactly the env's state(t): messages and tools, canonical JSON
    with httpx.Client(base_url=env_url, timeout=120) as http:
        states = {(ep, t): http.get(f"/episodes/{ep}/state/{t}").json() for ep in episodes for t in range(4)}
    by_messages = {canon(s["messages"]): s for s in states.values()}
    for body in bodies:
        s = by_messages[canon(body["messages"])]
        assert canon(body["tools"]) == canon(s["tools"])
    # both rollouts took the same actions, so their states coincide: 4 contexts, 6 requests each
    assert len(by_messages) == 4
    assert Counter(canon(b["messages"]) for b in bodies) == {k: 6 for k in by_messages}

    raw = [json.loads(x) for x in (tmp_path / "raw.jsonl").read_text().splitlines()]
    assert sorted((r["provenance"]["episode_id"], r["provenance"]["t"]) for r in raw) == \
        sorted((ep, t) for ep in episodes for t in (1, 2))
    kept = [json.loads(x) for x in pairs_path.read_text().splitlines()]
    assert sorted(r["provenance"]["t"] for r in kept) == [1, 2]      # the second rollout's twins are deduped
    by_t = {r["provenance"]["t"]: r for r in kept}
    assert by_t[1]["chosen"] == {"tool_name": "view", "arguments": {"path": "/workspace/calc.py"}}
    assert by_t[1]["rejected"] == {"tool_name": "bash", "arguments": {"command": "cat nope.txt"}}
    assert by_t[2]["n_teachers_agreeing"] == 2 and by_t[2]["provenance"]["agreeing"] == ["t-a", "t-b"]
    s2 = states[(by_t[2]["provenance"]["episode_id"], 2)]
    assert s2["observation"]["metadata"]["error_kind"] == "nonzero_exit"
    assert "pairs: 4 mined, 2 kept" in capsys.readouterr().out

    # channel 3 consumes the file: DPO at the reference is log 2, one step raises the margin
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from trainer_client.tokenizer import load_qwen_tokenizer

    torch.manual_seed(0)
    torch.set_num_threads(1)
    tok = load_qwen_tokenizer()
    model = Qwen2ForCausalLM(Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, vocab_size=151936,
                                         tie_word_embeddings=True, max_position_embeddings=4096)).float()
    pairs = [losses.encode_pair(tok, p, i, max_length=384) for i, p in enumerate(losses.load_pairs(pairs_path))]
    ref = losses.ReferenceLogps()
    ref.compute(model, pairs, pad_token_id=tok.pad_token_id)
    cfg3 = losses.PairsSettings(loss="dpo")
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    out = losses.pairs_loss(model, pairs, cfg3, reference=ref, pad_token_id=tok.pad_token_id)
    assert out.n_pairs == 2 and math.isclose(out.loss.item(), math.log(2), abs_tol=1e-4)
    out.loss.backward()
    opt.step()
    after = losses.pairs_loss(model, pairs, cfg3, reference=ref, pad_token_id=tok.pad_token_id)
    assert after.margin.item() > 0 and after.loss.item() < out.loss.item()
