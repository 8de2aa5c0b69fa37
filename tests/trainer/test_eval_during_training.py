"""Held-out evaluation during `trainer-client train` (trainer_client/eval_during_training.py), and the
tool schemas an evaluation shows a model being exactly the ones training shows it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from . import toolcaller_support as tc

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_policy_tools_are_what_trl_shows_the_policy():
    """contract.policy_tools() (torch-free, what `trainer-client evaluate` sends) equals transformers'
    get_json_schema of the trainer's tool methods, in TRL's order: evaluation and training show one thing."""
    from transformers.utils import get_json_schema

    from contract import PROFILES, policy_tools
    from trainer_client.environment import environment_class

    for profile in PROFILES:
        env_class = environment_class(profile)
        trained = [get_json_schema(getattr(env_class, name)) for name in env_class.tool_methods()]
        assert policy_tools(profile) == trained, profile
    assert policy_tools(None) == policy_tools("default")
    assert [t["function"]["name"] for t in policy_tools()] == ["bash", "create", "str_replace", "submit", "view"]
    assert [t["function"]["name"] for t in policy_tools("bash-only")] == ["bash"]


def test_train_evaluates_held_out_tasks_with_the_training_model(toolcaller, small_pack_file, real_env_url, tmp_path):
    """eval.tasks set: the model being trained is evaluated as an agent (its own generate + TRL's parser)
    before the first step, every eval.every_steps steps and after the last (once at a step that is
    both); eval/* land in metrics.jsonl beside that step's training metrics, each evaluation's report
    in OUT/eval/step-N/. The tool-calling tiny model's evaluated episodes are real tool calls graded by the
    hidden tests (a policy that emitted no parsable call would end every episode with no_tool_call)."""
    from trainer_client.cli import main

    model_dir, episodes = toolcaller
    rows = [json.loads(x) for x in Path(small_pack_file).read_text().splitlines() if x.strip()]
    held_out = tmp_path / "held_out.jsonl"
    held_out.write_text("".join(json.dumps(r) + "\n" for r in rows if r["instance_id"] == tc.FIX_INSTANCE))
    out = tmp_path / "run"
    rc = main(["train", "--config", str(ROOT / "trainer_client/configs/cpu_smoke.yaml"), "--env-url", real_env_url,
               "--tasks", str(small_pack_file), "--output-dir", str(out), "--max-steps", "2",
               "--set", f"model.name_or_path={model_dir}", "--set", f"data.prompt={json.dumps(tc.FIX_PROMPT)}",
               "--set", f"data.instance_ids=[{tc.FIX_INSTANCE}]", "--set", "data.repeat=1",
               "--set", "grpo.max_completion_length=96", "--set", "grpo.save_strategy=\"no\"",
               "--set", f"eval.tasks={held_out}", "--set", "eval.every_steps=1", "--set", "eval.samples=2", "--set", "eval.temperature=1.0",
               "--set", "eval.max_turns=3", "--set", "eval.max_new_tokens=96"])
    assert rc == 0
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if "eval/resolved_rate" in r]
    # the baseline, step 1 (every_steps), step 2 (every_steps and the last: evaluated once)
    assert [r["step"] for r in evals] == [0, 1, 2], evals
    step_1 = next(r for r in records if r.get("step") == 1 and "loss" in r)
    assert "eval/resolved_rate" in step_1  # beside the training metrics of its step, not a record of its own
    for step in (0, 1, 2):
        report = json.loads((out / "eval" / f"step-{step}" / "report.json").read_text())
        o = report["summary"]["overall"]
        assert o["scored"] == 2 and o["lost"] == 0
        assert evals[step]["eval/resolved_rate"] == pytest.approx(o["resolved_rate"])
        assert evals[step]["eval/scored"] == 2
        results = [json.loads(x) for x in (out / "eval" / f"step-{step}" / "results.jsonl").read_text().splitlines()]
        for r in results:  # the taught scripts: str_replace then submit, or submit at once
            assert r["end_reason"] == "submitted" and r["turns"] >= 1, r
            assert r["status"] == ("resolved" if r["reward"] == 1.0 else "unresolved")
            assert (r["model_patch"] or "").count(tc.GOLD_EDIT["new"]) == (r["status"] == "resolved")
        rollouts = [json.loads(x) for x in (out / "eval" / f"step-{step}" / "rollouts.jsonl").read_text().splitlines()]
        assert len(rollouts) == 2
        for rec in rollouts:  # the prompt the run trains with, and the policy's own generated ids per turn
            assert rec["messages"][0]["content"].startswith(tc.FIX_PROMPT)
            assert all(t["token_ids"] for t in rec["turns"])
