"""The four ablation arms (baseline, +hints, +pairs, full) on SweGRPOTrainer's loss path.

Each arm takes two optimizer steps through the trainer's `_compute_loss` on a real rendered
GRPO batch with error sites (rollouts come from the rollout side; here they are fixed), and
must log every component.
"""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from trl import GRPOConfig


from .channels_support import loss_settings
from .conftest import QWEN_VOCAB, tiny_qwen
from support.pairs import write_pairs
from .rollouts_support import make_grpo_batch

ARMS = {"baseline": (0.0, 0.0), "+hints": (0.1, 0.0), "+pairs": (0.0, 0.05), "full": (0.1, 0.05)}


@pytest.mark.slow
def test_four_arms_complete_and_log_all_components(tokenizer, tmp_path):
    from trainer_client import trainer as trainer_mod

    pairs = write_pairs(tmp_path / "pairs.jsonl", 4)
    batch = make_grpo_batch(tokenizer, 2)
    logged = {}
    for arm, (alpha, beta) in ARMS.items():
        model = tiny_qwen(QWEN_VOCAB, seed=5)
        args = GRPOConfig(output_dir=str(tmp_path / arm), report_to=[], use_cpu=True, bf16=False, beta=0.0,
                          per_device_train_batch_size=2, num_generations=2, max_completion_length=64)
        trainer = trainer_mod.SweGRPOTrainer(
            model=model, reward_funcs=lambda completions, **k: [0.0] * len(completions), args=args,
            train_dataset=Dataset.from_list([{"prompt": [{"role": "user", "content": "hi"}]}] * 2),
            processing_class=tokenizer,
            loss_settings=loss_settings({"weight": alpha}, {"weight": beta, "path": str(pairs), "per_step": 2}),
        )
        trainer.current_gradient_accumulation_steps = 1
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for _ in range(2):
            loss = trainer._compute_loss(model, batch)
            loss.backward()
            opt.step()
            opt.zero_grad()
            trainer.state.global_step += 1
        logged[arm] = {k: v for k, v in trainer._metrics["train"].items() if k.startswith("channels/")}
    for arm, m in logged.items():
        for key in ("grpo", "hints", "pairs", "total", "hints/sites", "pairs/used"):
            assert len(m[f"channels/{key}"]) == 2, (arm, key)
    assert max(logged["baseline"]["channels/hints"] + logged["baseline"]["channels/pairs"]) == 0.0
    assert min(logged["+hints"]["channels/hints"]) > 0 and max(logged["+hints"]["channels/pairs"]) == 0
    assert min(logged["+pairs"]["channels/pairs"]) > 0 and max(logged["+pairs"]["channels/hints"]) == 0
    assert min(logged["full"]["channels/hints"]) > 0 and min(logged["full"]["channels/pairs"]) > 0
    assert logged["full"]["channels/pairs/used"] == [2.0, 2.0] and logged["full"]["channels/hints/sites"] == [2.0, 2.0]
