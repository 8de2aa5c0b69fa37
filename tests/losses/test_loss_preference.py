"""Channel-3 math against the formulas and TRL (DPOTrainer's sigmoid loss, CPOTrainer's SimPO)."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
from trl.experimental.cpo import CPOTrainer

from trainer_client.losses import dpo_sigmoid_loss, response_logps, simpo_loss


def test_dpo_matches_formula():
    c, r = torch.tensor([-10.0, -3.0, -7.5]), torch.tensor([-9.0, -6.0, -7.0])
    rc, rr = torch.tensor([-11.0, -4.0, -7.0]), torch.tensor([-8.0, -5.0, -7.5])
    beta = 0.1
    expected = torch.tensor(
        [-torch.log(torch.sigmoid(torch.tensor(beta * ((ci - rci) - (ri - rri))))) for ci, ri, rci, rri in zip(c.tolist(), r.tolist(), rc.tolist(), rr.tolist())]
    )
    torch.testing.assert_close(dpo_sigmoid_loss(c, r, rc, rr, beta), expected)


@pytest.mark.parametrize("gamma", [0.0, 0.5, 1.4])
def test_simpo_matches_trl_cpo(gamma):
    trainer = SimpleNamespace(  # the attributes CPOTrainer.cpo_loss reads
        alpha=0.0, beta=2.0, simpo_gamma=gamma, loss_type="simpo", label_smoothing=0.0,
        accelerator=SimpleNamespace(device="cpu"),
    )
    avg_c, avg_r = torch.tensor([-1.2, -0.4, -2.0]), torch.tensor([-1.0, -1.5, -2.1])
    ref, _, _ = CPOTrainer.cpo_loss(trainer, avg_c, avg_r)
    torch.testing.assert_close(simpo_loss(avg_c, avg_r, beta=2.0, gamma=gamma), ref)


def test_response_logps_match_full_logits(small_model):
    ids = torch.randint(0, 512, (3, 12), generator=torch.Generator().manual_seed(0))
    attn = torch.ones_like(ids)
    attn[2, 9:] = 0
    resp = torch.zeros_like(ids)
    resp[:, 6:] = 1
    resp[2, 9:] = 0
    sums, counts = response_logps(small_model, ids, attn, resp, chunk_size=4)
    logits = small_model(input_ids=ids, attention_mask=attn).logits[:, :-1]
    tok = logits.log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    expected = (tok * resp[:, 1:]).sum(-1)
    torch.testing.assert_close(sums, expected, atol=1e-5, rtol=1e-5)
    assert counts.tolist() == [6, 6, 3]


def test_dpo_matches_trl_dpo_trainer(tokenizer, tmp_path):
    """Our logps + DPO loss equal TRL's DPOTrainer._compute_loss on the same batch."""
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    from .conftest import QWEN_VOCAB, tiny_qwen

    model = tiny_qwen(QWEN_VOCAB)
    args = DPOConfig(output_dir=str(tmp_path), report_to=[], beta=0.3, use_cpu=True, bf16=False)
    ds = Dataset.from_list([{"prompt": "a", "chosen": " b", "rejected": " c"}])
    trainer = DPOTrainer(model=model, ref_model=copy.deepcopy(model), args=args, train_dataset=ds, processing_class=tokenizer)
    trainer.precompute_ref_logps = True  # feed the cached reference values, as we do
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 5000, (4, 10), generator=g)  # rows: chosen0, chosen1, rejected0, rejected1
    attn = torch.ones_like(ids)
    comp = torch.zeros_like(ids)
    comp[:, 6:] = 1
    ref_c, ref_r = torch.tensor([-40.0, -52.0]), torch.tensor([-47.0, -45.0])
    inputs = {"input_ids": ids, "attention_mask": attn, "completion_mask": comp, "ref_chosen_logps": ref_c, "ref_rejected_logps": ref_r}
    expected = trainer._compute_loss(model, inputs, False)
    sums, _ = response_logps(model, ids, attn, comp)
    ours = dpo_sigmoid_loss(sums[:2], sums[2:], ref_c, ref_r, beta=0.3).mean()
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=1e-5)
