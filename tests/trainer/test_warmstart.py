"""trainer_client.warmstart: gold-patch edits, demonstrations recorded through the real env
server (rewarded by its hidden tests), and the SFT'd model the demo's GRPO run starts from."""

from __future__ import annotations

import json

import pytest

from trainer_client.warmstart import Turn, edits_from_patch

PATCH = """diff --git a/pkg/mod.py b/pkg/mod.py
index 1111111..2222222 100644
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -1,7 +1,7 @@
 def a(x):
     return x
 
 def b(x):
-    return x
+    return -x
 
 def c():
@@ -20,3 +20,4 @@ def z():
     pass
 
 END = 1
+EXTRA = 2
diff --git a/other.py b/other.py
--- a/other.py
+++ b/other.py
@@ -1,1 +1,1 @@
-flag = True
+flag = False
"""

FILES = {
    "pkg/mod.py": "def a(x):\n    return x\n\ndef b(x):\n    return x\n\ndef c():\n" + "\n" * 12 + "def z():\n    pass\n\nEND = 1\n",
    "other.py": "flag = True\n",
}


def _count(path: str, text: str) -> int:
    return FILES[path].count(text)


def test_edits_widen_the_changed_lines_until_they_are_unique_in_the_file():
    turns = edits_from_patch(PATCH, _count)
    assert [t.tool for t in turns] == ["str_replace"] * 3
    first, insertion, other = (t.arguments for t in turns)
    # "    return x" occurs twice: one line of context each side makes it unique
    assert first == {"path": "pkg/mod.py", "old": "def b(x):\n    return x\n", "new": "def b(x):\n    return -x\n"}
    assert _count("pkg/mod.py", first["old"]) == 1
    # a pure insertion has no removed line: it is anchored on its context
    assert insertion["old"] == "END = 1" and insertion["new"] == "END = 1\nEXTRA = 2"
    assert other == {"path": "other.py", "old": "flag = True", "new": "flag = False"}
    applied = FILES["pkg/mod.py"].replace(first["old"], first["new"]).replace(insertion["old"], insertion["new"])
    assert "return -x" in applied and applied.endswith("END = 1\nEXTRA = 2\n")


def test_edits_refuse_patches_they_cannot_express():
    with pytest.raises(ValueError, match="no file"):
        edits_from_patch("", _count)
    with pytest.raises(ValueError, match="unique anchor"):
        edits_from_patch(PATCH, lambda path, text: 2)  # never unique
    deleted = "diff --git a/x.py b/x.py\ndeleted file mode 100644\n--- a/x.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x = 1\n"
    with pytest.raises(ValueError, match="deleted file"):
        edits_from_patch(deleted, _count)


def test_turn_text_is_a_qwen_tool_call():
    assert Turn("submit").message_text() == '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'
    assert Turn(text="Done.").message_text() == "Done."


@pytest.mark.slow
def test_warmstart_records_rewarded_demos_and_saves_a_model(real_env_url, small_pack_file, tmp_path):
    """Through the real env server: every gold demonstration is rewarded 1.0 by the hidden tests,
    every lazy one 0.0; the SFT'd model is saved with its record."""
    from pathlib import Path

    from transformers import AutoModelForCausalLM

    import trainer_client
    from trainer_client.config import load_config
    from trainer_client.warmstart import warmstart

    cfg = load_config(Path(trainer_client.__file__).parent / "configs" / "cpu_smoke.yaml",
                      [f'env.urls=["{real_env_url}"]', f"data.tasks={small_pack_file}"])
    lines: list[str] = []
    out = warmstart(cfg, tmp_path / "warm", steps=3, lr=1e-3, log=lines.append, teachers=(1, 2))
    record = json.loads((out / "warmstart.json").read_text())
    ids = cfg.instance_ids()
    rewards = {d["name"]: d["reward"] for d in record["demos"]}
    assert rewards == {**{f"{i}:gold": 1.0 for i in ids}, **{f"{i}:lazy": 0.0 for i in ids}}, lines
    assert all(d["completion_tokens"] > 0 for d in record["demos"])
    # one recording, one SFT run: the teachers (gold only) at steps 1 and 2, then the policy 3 steps more
    assert any(line.startswith("[sft teachers 2/2]") for line in lines), lines
    assert any(line.startswith("[sft policy 3/3]") for line in lines), lines
    assert record["vocabulary"] == "demos" and sorted(record["teachers"]) == ["1", "2"]
    for path in (out, out / "teacher-1", out / "teacher-2"):
        model = AutoModelForCausalLM.from_pretrained(str(path))
        assert model.config.model_type == "qwen2"


def _demo(name: str, prompt: list[int], turns: list[list[int]], outputs: list[list[int]]):
    from trainer_client.warmstart import Demo

    return Demo(name, prompt, turns, outputs, ["" for _ in outputs], 1.0)


def _demos():
    """Two demos sharing a prompt that diverge at their first generated token, and one of another prompt
    (made-up ids of the real vocabulary; `9` ends each turn as <|im_end|> would)."""
    return [_demo("a:gold", [11, 12, 13, 14], [[21, 22, 23, 9], [24, 9]], [[31, 32]]),
            _demo("a:lazy", [11, 12, 13, 14], [[25, 9]], []),
            _demo("b:gold", [15, 16, 13], [[26, 27, 9]], [])]


def _saved_with_exact_loss(run, demos, tmp_path):
    """The run's model, saved and loaded back, after checking that the run's loss terms sum to the
    exact full-vocabulary cross-entropy of that model on ``demos``."""
    import torch
    from transformers import AutoModelForCausalLM

    terms, _ = run._loss_terms(demos)
    with torch.no_grad():
        loss = float(sum(term() for term in terms))
    saved = AutoModelForCausalLM.from_pretrained(str(run.save(tmp_path / "m")), dtype=torch.float32)
    with torch.no_grad():
        exact = _full_vocabulary_nll(saved, demos)
    assert abs(loss - exact) <= 1e-4 * exact, (loss, exact)
    return saved


def _full_vocabulary_nll(model, demos) -> float:
    """The exact cross-entropy over all 151,665 logits, summed over the demos' target tokens."""
    from trainer_client.warmstart import target_logprobs

    return float(sum(-target_logprobs(model, d.prompt_ids + d.completion_ids(),
                                      [0] * len(d.prompt_ids) + d.completion_tool_mask()).sum() for d in demos))


def test_sft_over_the_demos_vocabulary_is_the_full_vocabulary_cross_entropy(tmp_path):
    """vocabulary="demos": only the demos' rows of the (tied) LM head train, every other row is zero, and
    the loss it optimises equals the exact full-vocabulary cross-entropy of the saved model."""
    from trainer_client.tiny_qwen import tiny_qwen_dir
    from trainer_client.warmstart import SFTRun

    demos = _demos()
    run = SFTRun(demos, tiny_qwen_dir(), lr=1e-2, vocabulary="demos")
    assert run.vocabulary_size == len({i for d in demos for i in d.prompt_ids + d.completion_ids()}) == 16
    run.run(demos, 3)
    terms, n_targets = run._loss_terms(demos)
    assert len(terms) == 1 and n_targets == 11  # one pass over the prompts' tree; generated tokens only
    saved = _saved_with_exact_loss(run, demos, tmp_path)
    head = saved.get_output_embeddings().weight
    assert head.data_ptr() == saved.get_input_embeddings().weight.data_ptr()  # still tied
    rows = head.abs().sum(-1) != 0
    assert rows.sum() == 16 and bool(rows[[9, 11, 21, 31]].all())  # only the demos' tokens have a row


def test_sft_shares_the_prompts_prefix_and_batches_completions_by_length(tmp_path):
    """The prompts' common prefix goes through the model once for every group, the rest of a prompt once
    for its members, and members of unlike length in separate batches: the loss is still the exact
    full-vocabulary cross-entropy (here: three groups, prefix [11, 12], a short and two long members)."""
    from trainer_client.tiny_qwen import tiny_qwen_dir
    from trainer_client.warmstart import SFTRun, _similar_lengths

    demos = [_demo("a:gold", [11, 12, 13, 14], [[21, 22, 23, 24, 25, 9], [26, 9]], [[31, 32]]),
             _demo("a:stumble", [11, 12, 13, 14], [[27, 22, 23, 24, 9], [26, 9]], [[33]]),
             _demo("a:lazy", [11, 12, 13, 14], [[28, 9]], []),
             _demo("b:gold", [11, 12, 15], [[29, 27, 9]], []),
             _demo("c:gold", [11, 12], [[30, 9]], [])]  # all of it the prefix but its last token
    batches = _similar_lengths([(d.completion_ids(), d.completion_tool_mask()) for d in demos[:3]])
    assert [len(b) for b in batches] == [2, 1]  # the lazy submit is not padded to the fixes
    run = SFTRun(demos, tiny_qwen_dir(), lr=1e-2, vocabulary="demos")
    run.run(demos, 2)
    _saved_with_exact_loss(run, demos, tmp_path)


def test_one_sft_run_saves_teachers_then_trains_the_policy(tmp_path):
    """Phases of one SFTRun: snapshots at the asked steps; the later phase continues from the earlier one
    and the fit is real (every target token greedy over the full vocabulary after enough steps)."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from trainer_client.tiny_qwen import tiny_qwen_dir
    from trainer_client.warmstart import SFTRun

    demos = _demos()
    gold = [d for d in demos if d.name.endswith(":gold")]
    run = SFTRun(demos, tiny_qwen_dir(), lr=1e-2, vocabulary="demos")
    lines: list[str] = []
    run.run(gold, 40, "sft teachers", lines.append, {20: tmp_path / "t20", 40: tmp_path / "t40"})
    assert run.steps_done == 40 and lines[-1].startswith("[sft teachers 40/40] loss=")
    assert "ETA" in lines[0] and "ETA" not in lines[-1]
    weights = [load_file(str(tmp_path / t / "model.safetensors")) for t in ("t20", "t40")]
    assert any(not torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "t40"), dtype=torch.float32)
    with torch.no_grad():
        for d in gold:
            ids = d.prompt_ids + d.completion_ids()
            mask = torch.tensor(([0] * len(d.prompt_ids) + d.completion_tool_mask())[1:], dtype=torch.bool)
            logits = model(input_ids=torch.tensor([ids])).logits[0, :-1][mask]
            assert logits.argmax(-1).tolist() == torch.tensor(ids[1:])[mask].tolist(), d.name
    run.run(demos, 2, "sft policy")
    assert run.steps_done == 42


def test_heartbeat_says_what_is_under_way_when_nothing_else_speaks():
    """A Heartbeat log passes lines on; after `every_s` without one it logs its status (with how long it
    has run when timed), and a fresh line or status restarts the wait."""
    import time

    from trainer_client.warmstart import Heartbeat

    lines: list[str] = []
    beat = Heartbeat(lines.append, every_s=0.3)
    try:
        beat("[warmstart] first")
        time.sleep(0.5)
        assert lines == ["[warmstart] first"]  # nothing under way: nothing to say
        beat.status("[warmstart] 1/2 t: the gold demonstration")
        deadline = time.monotonic() + 5
        while len(lines) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lines[1] == "[warmstart] 1/2 t: the gold demonstration (0 s)", lines
        beat.status("[sft 3/10] loss=1.0000  2 s, ETA 5 s", timed=False)
        while len(lines) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lines[2] == "[sft 3/10] loss=1.0000  2 s, ETA 5 s", lines
    finally:
        beat.close()
