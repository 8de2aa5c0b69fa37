"""`--logprobs`: the token ids and log-probs the endpoint returned are kept per turn in the
rollout records, exactly as returned, and the env server's state(t) carries the same token ids
(`turn_token_ids`), so a trainer can re-tokenize the evaluated context exactly."""

from __future__ import annotations

import asyncio
from pathlib import Path

from eval_support import result_lines, server_states, trainer_client
from support.policy_double import PolicyDouble

from env_client import read_jsonl


def test_logprobs_reach_the_rollouts_and_the_server(env_url: str, gold_tasks_file: Path, gold_rows, tmp_path: Path):
    out = tmp_path / "out"
    with PolicyDouble(gold_tasks_file, "gold", tmp_path, logprobs=True) as double:
        proc = trainer_client("evaluate", "--model", double.base_url, "--env-url", env_url, "--tasks", gold_tasks_file,
                              "--logprobs", "--out", out, "--quiet")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert all(r["status"] == "resolved" for r in result_lines(out))

    records = read_jsonl(out / "rollouts.jsonl")
    assert len(records) == len(gold_rows)
    for record in records:
        assert len(record.turns) == 2
        for k, turn in enumerate(record.turns):
            assert turn.token_ids is not None and turn.logprobs is not None
            assert len(turn.token_ids) == len(turn.logprobs) > 0
            # what the double sampled for its k-th assistant message, kept as returned (not re-tokenized)
            assert turn.token_ids == [1000 + (7 * j + k) % 500 for j in range(len(turn.token_ids))]
            assert turn.logprobs == [-0.01 * (j + 1) for j in range(len(turn.logprobs))]
        last = record.n_steps
        state = asyncio.run(server_states(env_url, record.episode_id, [last]))[last]
        assert state["turn_token_ids"] == [turn.token_ids for turn in record.turns], \
            "the server's state(t) holds the token ids of each assistant message"
    completion = sum(r["completion_tokens"] for r in result_lines(out))
    assert completion == sum(len(t.token_ids) for r in records for t in r.turns), "usage agrees with the tokens"
