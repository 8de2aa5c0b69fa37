"""`trainer-client evaluate --model CHECKPOINT_DIR`: a real fine-tuned model, served by the command
itself, evaluated as an agent through a real env server on the small pack of real tasks. No test
double anywhere.

The model: the random tiny Qwen2 (trainer_client/tiny_qwen.py) fine-tuned the way the local
teachers are (tests/replay/local_teachers_support.py `build_teachers`: full-batch SFT until every
target token is the greedy choice by a logit margin; cached on disk, a minute or two on one CPU
thread the first time) on one real episode of the pack's toolz task that the evaluator itself
recorded with a scripted policy: `bash ls`, the gold edit (tests/trainer/toolcaller_support.py), submit.
It learns to answer each state(t) of that episode, tokenized the way `transformers serve`
tokenizes the evaluator's request, with the script's next call. The command then serves the
checkpoint with `transformers serve` on the CPU (trainer_client/cli.py `_serve_checkpoint`, the
local teachers' machinery) and runs it on every pack task through the trainer tests' real env
server (bwrap sandbox): on toolz the model's own calls fix the bug and the hidden tests pass; on
the others it does what it does, and each episode is still scored, never lost.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support.requirements import missing

from .toolcaller_support import FIX_INSTANCE, GOLD_EDIT

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
END_REASONS = {"submitted", "step_limit", "no_tool_call", "turn_limit", "time_limit", "context_limit"}
AUTO_SUBMIT = {"no_tool_call", "turn_limit", "time_limit", "context_limit"}  # docs/evaluation.md: graded after
FIX = [("bash", {"command": "ls"}), ("str_replace", dict(GOLD_EDIT)), ("submit", {})]
RECIPE = "evaluate-fixer-v1"


class Script:
    """A policy that answers FIX, one call per turn, as an endpoint would (arguments as JSON text)."""

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        from evaluation import PolicyReply

        n = sum(m["role"] == "assistant" for m in messages)
        name, args = FIX[n]
        return PolicyReply(tool_calls=[{"id": f"call_{n}", "type": "function",
                                        "function": {"name": name, "arguments": json.dumps(args)}}])


async def _record(url: str) -> list[Any]:
    """FIX through the evaluator's harness on the server at `url`; the episode's state(t) records."""
    from env_client import ReplicaPool
    from evaluation import TaskRef, run_episode
    from trainer_client.replay.traces import env_client as http_client
    from trainer_client.replay.traces import fetch_trace

    pool = ReplicaPool([url])
    try:
        await pool.connect()
        result, _ = await run_episode(pool, Script(), TaskRef(instance_id=FIX_INSTANCE), 0)
    finally:
        await pool.close()
    assert (result.status, result.end_reason, result.turns) == ("resolved", "submitted", 3), result
    async with http_client() as http:
        return await fetch_trace(http, url, result.episode_id)


def fixer_checkpoint(states: list[Any]) -> Path:
    """The tiny model SFT'd to answer each state(t) with FIX[t] (trained once, then cached)."""
    from replay import local_teachers_support as ltm

    from trainer_client.tiny_qwen import tiny_qwen_dir
    from trainer_client.tokenizer import load_qwen_tokenizer
    from trainer_client.warmstart import Turn, default_turn_ids

    assert [s.t for s in states] == list(range(len(FIX))), [s.t for s in states]
    tok, base = load_qwen_tokenizer(), tiny_qwen_dir()
    examples = []
    for state, (name, args) in zip(states, FIX):
        prompt, gen = ltm.served_prompt_ids(tok, state), default_turn_ids(tok, Turn(name, dict(args)))
        examples.append((prompt + gen, [0] * len(prompt) + [1] * len(gen)))
    digest = hashlib.sha256(f"{RECIPE}:{ltm._digest(examples, base)}".encode()).hexdigest()[:16]
    # "early": greedy on every target token by the margin
    return ltm.cached_teachers(f"{RECIPE}-{digest}", base, examples) / "early"


@pytest.fixture(scope="module")
def fixer(real_env_url):
    """The fixer model's checkpoint, trained on an episode recorded on the session's env server."""
    from transformers.utils.import_utils import is_serve_available

    if not is_serve_available():
        missing("transformers-serve", "transformers serve needs fastapi, uvicorn and openai (transformers[serving])")
    return fixer_checkpoint(asyncio.run(_record(real_env_url)))


@pytest.mark.timeout(900)  # a first run also fine-tunes the model (a few minutes); later ones reuse it
def test_evaluate_serves_a_checkpoint_and_scores_its_episodes(fixer, real_env_url, small_pack_file, tmp_path):
    out = tmp_path / "eval"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1", TOKENIZERS_PARALLELISM="false")
    argv = [sys.executable, "-m", "trainer_client.cli", "evaluate", "--model", str(fixer), "--env-url", real_env_url,
            "--tasks", str(small_pack_file), "--samples", "1", "--concurrency", "1", "--max-turns", "4",
            "--max-tokens", "128", "--out", str(out)]
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    wall = time.monotonic() - t0
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    ids = [json.loads(line)["instance_id"] for line in small_pack_file.read_text().splitlines() if line.strip()]

    report = json.loads((out / "report.json").read_text())
    assert (out / "report.md").read_text().startswith("# Evaluation: ")
    assert report["describe"]["model"] == f"{fixer} (served: transformers)"
    o = report["summary"]["overall"]
    assert (o["tasks"], o["scored"], o["lost"]) == (len(ids), len(ids), 0), o
    results = {r["instance_id"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert sorted(results) == sorted(ids)
    for r in results.values():
        assert r["status"] in ("resolved", "unresolved") and r["attempts"] == 1 and r["lost_reasons"] == [], r
        assert r["end_reason"] in END_REASONS and 1 <= r["turns"] <= 4, r
        assert r["prompt_tokens"] > 0 and r["completion_tokens"] > 0, r  # usage as transformers serve counted it
        assert r["policy_s"] > 0 and r["env_s"] > 0, r
    # on the task it was taught, the model's own calls fix the bug: the hidden tests resolve it
    fixed = results[FIX_INSTANCE]
    assert (fixed["status"], fixed["end_reason"], fixed["turns"], fixed["reward"]) == \
        ("resolved", "submitted", 3, 1.0), (fixed, proc.stderr[-3000:])
    assert GOLD_EDIT["new"] in fixed["model_patch"]

    # the rollouts: the model's own assistant messages (tool calls as the endpoint returned them,
    # rendered by the contract) and the env's tool outputs, under the evaluator's prompt
    rollouts = {r["instance_id"]: r for r in map(json.loads, (out / "rollouts.jsonl").read_text().splitlines())}
    assert sorted(rollouts) == sorted(ids)
    for iid, rollout in rollouts.items():
        r = results[iid]
        assert rollout["episode_id"] == r["episode_id"] and rollout["done"] and rollout["n_steps"] == r["steps"]
        messages = rollout["messages"]
        assert messages[0]["role"] == "user" and messages[0]["content"].startswith("You are working in"), messages[0]
        assistants = [m for m in messages if m["role"] == "assistant"]
        # each turn with a tool call is one assistant message; a last answer without one is not sent
        assert len(assistants) == r["turns"] - (r["end_reason"] == "no_tool_call"), (r, messages)
        for m in assistants:
            for call in m["tool_calls"]:
                assert isinstance(json.loads(call["function"]["arguments"]), dict), call
        tools = [m for m in messages if m["role"] == "tool"]
        assert len(tools) == r["steps"] - (r["end_reason"] in AUTO_SUBMIT), (r, messages)  # its own submit apart
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
             for m in rollouts[FIX_INSTANCE]["messages"] if m["role"] == "assistant" for c in m["tool_calls"]]
    assert calls == FIX, calls
    assert len(rollouts[FIX_INSTANCE]["turns"]) == 3
    # a rerun with nothing left to run rewrites the report without serving the checkpoint; one with
    # other settings is refused before anything is served (both were 25 s of `transformers serve` first)
    again = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert again.returncode == 0 and "served as" not in again.stderr, again.stderr[-3000:]
    assert again.stdout.strip().splitlines()[-1].startswith(f"resolved {o['resolved']}/{o['scored']}"), again.stdout
    assert json.loads((out / "report.json").read_text())["summary"]["overall"] == o
    other = subprocess.run([*argv[:argv.index("--max-turns") + 1], "5", *argv[argv.index("--max-turns") + 2:]],
                           capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert other.returncode == 1 and "served as" not in other.stderr, other.stderr[-3000:]
    assert "holds an evaluation with other settings (limits)" in other.stderr, other.stderr[-3000:]
    assert "Traceback" not in other.stderr
    print(f"\nevaluate --model {fixer.parent.name}: {wall:.1f}s; "
          + "; ".join(f"{iid}: {r['status']} ({r['end_reason']}, {r['turns']} turns)" for iid, r in results.items()))
