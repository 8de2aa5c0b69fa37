"""Real multi-turn GRPO rollouts on the CPU: real TRL, a tiny model that calls tools (SFT'd, see
toolcaller_support.py), the real env server with the bwrap sandbox and real tasks on loopback.

Covers: token ids preserved across turns (no re-tokenization drift) with
tool_mask zeroing exactly the tool-output tokens; error-site markers in the per-turn record
and in `inputs["error_sites"]`; a hidden-test reward flowing into GRPO advantages; and a
learning signal (the rewarded behaviour's probability rises within six GRPO steps).
"""

from __future__ import annotations

import pytest

from . import toolcaller_support as tc
from .trainer_support import grpo_config

pytestmark = pytest.mark.slow

# The FIX group: 6 samples of the taught 50/50 branch under a fixed seed (deterministic; any seed
# has both behaviours with probability 31/32; a seed giving 6 of a kind fails the test, never skips it).
FIX_GROUP = 6
FIX_GROUP_SEED = 0


def _trainer_cls():
    from trainer_client.trainer import SweGRPOTrainer

    class RecordingTrainer(SweGRPOTrainer):
        """SweGRPOTrainer plus a pass-through spy on each generate call and on the rewards."""

        def __init__(self, *args, **kwargs):
            self.generate_calls: list[tuple[list[list[int]], list[list[int]]]] = []
            self.rewards = []
            super().__init__(*args, **kwargs)

        def _generate_single_turn(self, prompt_ids, *args, **kwargs):
            completion_ids, logprobs = super()._generate_single_turn(prompt_ids, *args, **kwargs)
            self.generate_calls.append(([list(p) for p in prompt_ids], [list(c) for c in completion_ids]))
            return completion_ids, logprobs

        def _calculate_rewards(self, *args, **kwargs):
            rewards = super()._calculate_rewards(*args, **kwargs)
            self.rewards.append(rewards.detach().clone())
            return rewards

    return RecordingTrainer


def _build(out, model_dir, env_cls, kind: str, n: int, **overrides):
    from datasets import Dataset

    from trainer_client.losses import LossSettings
    from trainer_client.tokenizer import load_qwen_tokenizer

    cfg = dict(per_device_train_batch_size=n, num_generations=n, max_completion_length=320, temperature=0.5)
    cfg.update(overrides)
    return _trainer_cls()(
        model=str(model_dir),
        processing_class=load_qwen_tokenizer(),
        args=grpo_config(out, **cfg),
        train_dataset=Dataset.from_list([tc.row(kind)] * n),
        environment_factory=env_cls,
        loss_settings=LossSettings.model_validate({"hints": {"weight": 0}, "pairs": {"weight": 0}}),  # GRPO only
    )


def _rollout(trainer, kind: str, n: int) -> dict:
    """One batch through the trainer's real rollout + scoring (`_generate_and_score_completions`)."""
    trainer.model.train()
    return trainer._generate_and_score_completions([dict(tc.row(kind)) for _ in range(n)])


def _unpadded(output, i: int) -> tuple[list[int], list[int]]:
    n = int(output["completion_mask"][i].sum())
    return output["completion_ids"][i][:n].tolist(), output["tool_mask"][i][:n].tolist()


def _tool_suffix_text(output_text: str) -> str:
    """Qwen2.5's rendering of one tool message after an assistant turn, plus the next generation prompt."""
    return f"\n<|im_start|>user\n<tool_response>\n{output_text}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"


# ---------------------------------------------------------------------------------------------- the SFT'd policy
def test_toolcaller_learnt_the_scripts(toolcaller):
    from transformers import AutoModelForCausalLM

    model_dir, episodes = toolcaller
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    report = tc.branch_report(model, episodes)
    assert report["min_target_logprob"] > -0.05, report  # every scripted token is (nearly) certain ...
    assert 0.2 < report["p_fix_first_turn"] < 0.8 and 0.2 < report["p_nofix_first_turn"] < 0.8, report  # ... but the fix


# ---------------------------------------------------------------------------------------------- PROBE rollout
@pytest.fixture(scope="module")
def probe(toolcaller, real_env_cls, tmp_path_factory):
    model_dir, episodes = toolcaller
    trainer = _build(tmp_path_factory.mktemp("probe"), model_dir, real_env_cls, "probe", 2)
    output = _rollout(trainer, "probe", 2)
    return trainer, output, episodes["probe"]


def test_token_ids_preserved_across_turns(probe):
    trainer, output, episode = probe
    tok = trainer.processing_class
    calls = trainer.generate_calls
    assert len(calls) == 3, "PROBE is three assistant turns: two tool rounds, then the answer"
    for i in range(2):
        turns = [calls[k][1][i] for k in range(3)]
        texts = [tok.decode(t) for t in turns]
        assert turns == episode.generated, f"rollout {i} left the script: {texts}"
        # the first turn's ids are a non-canonical tokenization: re-tokenizing its text would change them
        assert tok(texts[0], add_special_tokens=False).input_ids != turns[0]
        for k in (1, 2):
            prev_prompt, prev_gen = calls[k - 1][0][i], calls[k - 1][1][i]
            nxt = calls[k][0][i]
            # next-turn input = previous input + the generated ids verbatim + the templated tool output
            assert nxt[: len(prev_prompt) + len(prev_gen)] == prev_prompt + prev_gen
            suffix = nxt[len(prev_prompt) + len(prev_gen):]
            expected = tok(_tool_suffix_text(episode.outputs[k - 1]), add_special_tokens=False).input_ids
            assert suffix == expected, tok.decode(suffix)
        assert calls[0][0][i] == episode.prompt_ids
        assert "test_inflection.py" in tok.decode(calls[1][0][i][len(calls[0][0][i]):])  # the sandbox's real `ls`

        # the trainer's completion is exactly generated + suffix + generated + suffix + generated ...
        completion, tool_mask = _unpadded(output, i)
        s1 = calls[1][0][i][len(calls[0][0][i]) + len(turns[0]):]
        s2 = calls[2][0][i][len(calls[1][0][i]) + len(turns[1]):]
        assert completion == turns[0] + s1 + turns[1] + s2 + turns[2]
        assert completion == episode.completion_ids()
        # ... and tool_mask is 0 on exactly the tool-output tokens
        assert tool_mask == [1] * len(turns[0]) + [0] * len(s1) + [1] * len(turns[1]) + [0] * len(s2) + [1] * len(turns[2])
        prompt_len = int(output["prompt_mask"][i].sum())
        assert output["prompt_ids"][i][-prompt_len:].tolist() == calls[0][0][i]  # left-padded prompt


def test_state_t_is_exactly_the_policys_context(probe, real_env_url):
    """RFC 007: the tokenized state(t) equals the ids the policy was conditioned on at turn t
    (the first turn's ids are a non-canonical tokenization: only the recorded ids reproduce them)."""
    import httpx

    from trainer_client.context import context_ids

    trainer, _, episode = probe
    tok = trainer.processing_class
    calls = trainer.generate_calls
    for i in range(2):
        env = trainer.environments[i]
        assert env.episode_id
        for t in range(3):
            reply = httpx.get(f"{real_env_url}/episodes/{env.episode_id}/state/{t}", timeout=30)
            assert reply.status_code == 200, reply.text
            state = reply.json()
            assert context_ids(tok, state) == calls[t][0][i], (t, tok.decode(context_ids(tok, state)))
            if t:  # re-rendering the assistant turns instead of the recorded ids would not be exact here
                assert context_ids(tok, {**state, "turn_token_ids": None}) != calls[t][0][i]
            if t:
                tool_msgs = [m for m in state["messages"] if m["role"] == "tool"]
                assert [m["content"] for m in tool_msgs] == episode.outputs[:t]  # the policy's formatting
                assert state["tools"] == env.tool_schemas() and state["messages"][0]["role"] == "user"


def test_error_sites_in_turn_record_and_inputs(probe):
    trainer, output, episode = probe
    tok = trainer.processing_class
    for i in range(2):
        env = trainer.environments[i]
        assert [(t["turn"], t["tool_name"], t["error_kind"]) for t in env.turns] == [
            (0, "bash", None), (1, "bash", "command_not_found")]
        assert env.turns[1]["hint_template_key"] == "shell.command_not_found"
        assert env.turns[1]["error_source"] == "agent"

        sites = output["error_sites"][i]
        gens = episode.generated
        start = len(gens[0]) + len(episode.suffixes[0]) + len(gens[1]) + len(episode.suffixes[1])
        assert sites == [{"turn": 1, "tool_name": "bash", "error_kind": "command_not_found",
                          "hint_template_key": "shell.command_not_found", "token_start": start}]
        completion, tool_mask = _unpadded(output, i)
        before = tok.decode(completion[:start])
        assert before.endswith(f"[command not found: {tc.BAD_COMMAND}]\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
        assert completion[start:] == gens[2]  # token_start = first token of the next assistant turn
        assert tool_mask[start - 1] == 0 and tool_mask[start] == 1
    assert trainer._metrics["train"]["env/errors/command_not_found"] == [1.0]
    assert trainer._metrics["train"]["env/error_sites_per_rollout"] == [1.0]


# ---------------------------------------------------------------------------------------------- reward -> advantage
def test_hidden_test_reward_flows_into_advantages(toolcaller, real_env_cls, tmp_path):
    model_dir, episodes = toolcaller
    n = FIX_GROUP
    trainer = _build(tmp_path, model_dir, real_env_cls, "fix", n, seed=FIX_GROUP_SEED)
    output = _rollout(trainer, "fix", n)
    tok = trainer.processing_class
    completions = [_unpadded(output, i)[0] for i in range(n)]
    fixed = [c == episodes["fix"].completion_ids() for c in completions]
    unfixed = [c == episodes["nofix"].completion_ids() for c in completions]
    assert all(a or b for a, b in zip(fixed, unfixed)), [tok.decode(c) for c in completions]
    assert any(fixed) and any(unfixed), f"seed {FIX_GROUP_SEED}: the group sampled one behaviour only: {fixed}"

    (rewards,) = trainer.rewards  # one reward function: the environment's get_reward (hidden tests)
    assert rewards.shape == (n, 1)
    assert rewards[:, 0].tolist() == [1.0 if f else 0.0 for f in fixed]
    assert [trainer.environments[i].reward for i in range(n)] == [1.0 if f else 0.0 for f in fixed]
    for i, f in enumerate(fixed):  # the grade came from the hidden tests run in the sandbox
        want = "Hidden tests: 47 passed, 0 failed" if f else "Hidden tests: 42 passed, 5 failed"
        assert want in tok.decode(completions[i])

    adv = output["advantages"]
    assert adv.shape == (n,)
    for i, f in enumerate(fixed):
        assert (adv[i] > 0.1) if f else (adv[i] < -0.1), adv
    assert abs(float(adv.sum())) < 1e-4  # centred on the group mean


# ---------------------------------------------------------------------------------------------- learning signal
# CPU cost: ~2 s of scoring + the rollout per step, since the trainer scores only completion positions on
# the CPU (compact_fused_lm_head; stock TRL 1.16 projects all ~1,100 prompt+completion positions, ~22 s/step).
# Plain SGD moves the weights along the GRPO gradient only (Adam's per-parameter normalisation moves every
# one of the 9.8M weights by ~lr and wrecks the tiny memorising model within one step).
# The rate sits in the middle of a measured stable range: 0.02, 0.03 and 0.04 all pass with margin (log p(FIX)
# -0.71 -> -0.10 at 0.03); 0.05 did too until the task's statement (part of the prompt) grew a reproducer, then
# one step threw the policy into answers without a tool call, where every reward is 0 and no gradient returns.
# Steps: the log-probabilities after each step, measured (seed 1, alone on 2 cores, ~9 s a step):
#   step      1      2      3      4      5      6      8     10     12     15
#   FIX   -0.74  -0.44  -0.31  -0.20  -0.15  -0.15  -0.13  -0.11  -0.11  -0.12
#   NOFIX -0.70  -1.13  -1.47  -2.01  -2.42  -2.42  -2.73  -3.18  -3.18  -3.39
# and under seeds 0, 2 and 3 (8 steps each, ~20 s a step on the busy shared machine):
#   seed 0 FIX   -0.47  -0.27  -0.17  -0.13  -0.11  -0.11   NOFIX -1.08  -1.62  -2.18  -2.61  -3.24  -3.24
#   seed 2 FIX   -0.47  -0.33  -0.21  -0.21  -0.14  -0.14   NOFIX -1.08  -1.40  -1.94  -1.94  -2.53  -2.53
#   seed 3 FIX   -0.47  -0.47  -0.27  -0.20  -0.20  -0.15   NOFIX -1.08  -1.08  -1.62  -2.01  -2.01  -2.42
# (a step whose four rewards agree moves nothing). Every assertion below holds from step 4 on under each of
# the four seeds; at step 6 with margins (seed 1: FIX > -0.5 by 0.35, the preference flipped by 2.3 against
# 1.0; the worst seed, 3, at its step 4: by 0.31 and 1.8). Steps 7-10 (the earlier setting, and 30 before
# it) added nothing but gradings.
LEARN_STEPS = 6
LEARN_LR = 0.03


# 24 rollouts, each graded afresh (an identical diff is never served a cached, draw-decided verdict:
# docs/grading.md, guarantee 2), and every resolved one checked as a plain script (guarantee 8)
@pytest.mark.timeout(900)  # measured ~90 s alone at 10 steps (~200 s on the busy machine); 458 s at 30 steps in the suite
def test_rewarded_behaviour_becomes_more_likely(toolcaller, real_env_cls, tmp_path):
    """GRPO on the FIX prompt: the env's hidden tests reward only the gold edit, so the probability
    of the FIX first turn (the rewarded action) rises and that of NOFIX falls.

    max_completion_length=64: the FIX edit's tool output overflows the budget and is dropped
    (TRL's rule) after the sandbox applied it; get_reward then grades the edited repo (auto-submit).
    So each rollout's scored tokens are its first action (+ NOFIX's short submit round)."""
    import torch

    model_dir, episodes = toolcaller
    fix, nofix = episodes["fix"], episodes["nofix"]
    trainer = _build(tmp_path, model_dir, real_env_cls, "fix", 4, seed=1, temperature=1.0, max_completion_length=64,
                     max_steps=LEARN_STEPS, learning_rate=LEARN_LR, optim="sgd", lr_scheduler_type="constant")

    def logps():
        trainer.model.eval()
        return (tc.sequence_logprob(trainer.model, fix.prompt_ids, fix.generated[0]),
                tc.sequence_logprob(trainer.model, nofix.prompt_ids, nofix.generated[0]))

    fix_before, nofix_before = logps()
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        trainer.train()
    finally:
        torch.set_num_threads(threads)
    fix_after, nofix_after = logps()
    rewards = [r[:, 0].tolist() for r in trainer.rewards]
    msg = (f"log p(FIX) {fix_before:.3f} -> {fix_after:.3f}; log p(NOFIX) {nofix_before:.3f} -> {nofix_after:.3f}; "
           f"rewards {rewards}")
    print(msg)
    assert len(rewards) == LEARN_STEPS, msg
    assert any(0.0 < sum(r) < len(r) for r in rewards), msg  # at least one group carried a signal
    assert fix_after - fix_before > 0.3, msg
    assert nofix_after < nofix_before - 0.3, msg
    assert fix_after > -0.5, msg  # the rewarded action is now the likely one (p > 0.6) ...
    assert fix_after > nofix_after + 1.0, msg  # ... and the preference between the two branches flipped
