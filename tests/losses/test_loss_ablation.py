"""The four ablation arms (baseline, +SDPO, +replay, full) on SweGRPOTrainer's loss path.

Each arm takes two optimizer steps through the trainer's `_compute_loss` on a real rendered
GRPO batch with error sites (rollouts come from the rollout side; here they are fixed), and
must log every component.
"""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from trl import GRPOConfig

from trainer_client.losses import LossConfig

from .conftest import QWEN_VOCAB, tiny_qwen
from .pairs_data import write_pairs
from .rollouts import make_grpo_batch

ARMS = {"baseline": (0.0, 0.0), "+sdpo": (0.1, 0.0), "+replay": (0.0, 0.05), "full": (0.1, 0.05)}


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
            loss_config=LossConfig(alpha=alpha, beta=beta, pairs_path=str(pairs), pairs_per_step=2),
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
        for key in ("grpo", "sdpo", "replay", "total", "error_sites", "pairs"):
            assert len(m[f"channels/{key}"]) == 2, (arm, key)
    assert max(logged["baseline"]["channels/sdpo"] + logged["baseline"]["channels/replay"]) == 0.0
    assert min(logged["+sdpo"]["channels/sdpo"]) > 0 and max(logged["+sdpo"]["channels/replay"]) == 0
    assert min(logged["+replay"]["channels/replay"]) > 0 and max(logged["+replay"]["channels/sdpo"]) == 0
    assert min(logged["full"]["channels/sdpo"]) > 0 and min(logged["full"]["channels/replay"]) > 0
    assert logged["full"]["channels/pairs"] == [2.0, 2.0] and logged["full"]["channels/error_sites"] == [2.0, 2.0]
