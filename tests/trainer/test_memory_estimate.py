"""The memory estimator's arithmetic against hand-computed numbers, and `train --dry-run` refusing."""

from __future__ import annotations

from pathlib import Path

import pytest

import trainer_client
from trainer_client.cli import main
from trainer_client.config import load_config
from trainer_client.memory_estimate import (GB, ModelFacts, estimate_for_config, estimate_memory, lora_trainable_params,
                                            model_facts)

CONFIGS = Path(trainer_client.__file__).parent / "configs"
Q7 = model_facts("Qwen/Qwen2.5-Coder-7B-Instruct")
Q32 = model_facts("Qwen/Qwen2.5-Coder-32B-Instruct")


def _row(est, name):
    return next(r for r in est.rows if r.name == name).bytes


def test_parameter_counts_are_the_published_sizes():
    # by hand, 7B: layer = q (3584*3584 + 3584) + k, v (3584*512 + 512 each) + o 3584*3584
    #   + MLP 3*3584*18944 + 2 norms 2*3584 = 233,057,792; x 28 + 2 x 152064*3584 + 3584
    assert Q7.layer_params == 233_057_792
    assert Q7.num_params == 28 * 233_057_792 + 2 * 152064 * 3584 + 3584 == 7_615_616_512
    assert Q32.num_params == 32_763_876_352


def test_lora_trainable_params_by_hand():
    # r x (in + out) per module and layer: q 16*(3584+3584), k/v 16*(3584+512), o like q, 3 MLP 16*(3584+18944)
    per_layer = 16 * (7168 + 4096 + 4096 + 7168 + 3 * 22528)
    assert lora_trainable_params(Q7, 16, "all-linear") == 28 * per_layer == 40_370_176
    assert lora_trainable_params(Q7, 8, ["q_proj", "v_proj"]) == 28 * 8 * (7168 + 4096)
    with pytest.raises(ValueError, match="not linear modules"):
        lora_trainable_params(Q7, 8, ["lm_head"])


def test_7b_full_finetune_on_one_80gb_gpu_is_refused():
    est = estimate_memory(Q7, num_devices=1, device_memory_gb=80, micro_batch=1, prompt_tokens=1024,
                          completion_tokens=1024)
    P = 7_615_616_512
    # the model states alone: 2 + 4 + 4 + 8 = 18 bytes per parameter = 137.08 GB
    states = sum(_row(est, n) for n in ("trainable weights (bf16)", "fp32 master weights", "gradients (fp32)",
                                         "AdamW states (fp32 m, v)"))
    assert states == P * 18
    assert _row(est, "AdamW states (fp32 m, v)") / GB == pytest.approx(60.92, abs=0.01)  # > 80 GB with the rest
    assert not est.fits and est.peak_gb > 137
    assert "DOES NOT FIT" in est.table()


def test_7b_lora_fits_one_80gb_gpu_with_colocated_vllm():
    T = 40_370_176
    est = estimate_memory(Q7, trainable=T, peft=True, num_devices=1, device_memory_gb=80, micro_batch=2,
                          prompt_tokens=2048, completion_tokens=16384, use_vllm=True, vllm_mode="colocate",
                          vllm_gpu_memory_utilization=0.35)
    assert _row(est, "frozen weights (bf16)") == 7_615_616_512 * 2
    assert _row(est, "activation checkpoints") == 28 * 2 * 18432 * 3584 * 2  # L b s h 2 = 7.40 GB
    assert _row(est, "recompute working set") == 2 * 18432 * (8 * 3584 + 2 * 512 + 4 * 18944) * 2
    assert _row(est, "vLLM colocated share") == 0.35 * 80 * GB
    train = (7_615_616_512 * 2 + T * 18 + 28 * 2 * 18432 * 3584 * 2 + 2 * 18432 * 105472 * 2
             + 1024 * 152064 * 8 + 28 * GB + 3 * GB)
    assert est.phase_gb("train") == pytest.approx(train / GB)
    assert est.peak_gb == pytest.approx(63.38, abs=0.01) and est.fits


def test_fsdp_shards_model_states_not_activations():
    one = estimate_memory(Q7, num_devices=8, sharding="none", device_memory_gb=80)
    eight = estimate_memory(Q7, num_devices=8, sharding="fsdp", device_memory_gb=80)
    assert _row(eight, "AdamW states (fp32 m, v)") * 8 == _row(one, "AdamW states (fp32 m, v)")
    assert _row(eight, "activation checkpoints") == _row(one, "activation checkpoints")
    assert _row(eight, "shard gather buffers") == 2 * (Q7.num_params / 28) * 2


def test_zero3_lora_sync_gathers_the_whole_model():
    T = lora_trainable_params(Q32, 16, "all-linear")
    est = estimate_memory(Q32, trainable=T, peft=True, num_devices=4, sharding="zero3", device_memory_gb=80,
                          use_vllm=True, vllm_mode="server")
    assert _row(est, "weight-sync gather") == Q32.num_params * 2 * 3 / 4
    assert est.peak_gb == est.phase_gb("sync")


def test_vllm_share_that_cannot_hold_the_weights_is_a_problem():
    est = estimate_memory(Q32, trainable=1, peft=True, device_memory_gb=80, use_vllm=True,
                          vllm_gpu_memory_utilization=0.3)  # 24 GB < 65.5 GB of bf16 weights
    assert not est.fits and "cannot hold its bf16 weights" in est.problems[0]


def test_local_config_json_is_read(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128, '
                                          '"num_hidden_layers": 2, "num_attention_heads": 4, '
                                          '"num_key_value_heads": 2, "vocab_size": 1000, "tie_word_embeddings": true}')
    facts = model_facts(str(tmp_path))
    assert facts.kv_dim == 32 and facts.num_params == 2 * facts.layer_params + 1000 * 64 + 64
    assert facts == ModelFacts(64, 128, 2, 4, 2, 1000, True, True, None, source=str(tmp_path / "config.json"))
    with pytest.raises(ValueError, match="no shape facts"):
        model_facts("someone/unknown-model")


@pytest.mark.parametrize("name, devices, sharding", [("gpu_qwen.yaml", 1, "none"), ("gpu_7b_fsdp8.yaml", 8, "fsdp"),
                                                     ("gpu_32b_lora8.yaml", 4, "zero3")])
def test_shipped_gpu_configs_fit_their_devices(name, devices, sharding):
    est = estimate_for_config(load_config(CONFIGS / name))
    assert (est.num_devices, est.sharding, est.device_memory_gb) == (devices, sharding, 80)
    assert est.fits and est.peak_gb <= 80, est.table()


def test_dry_run_refuses_a_config_that_does_not_fit(capsys):
    base = ["train", "--config", str(CONFIGS / "gpu_qwen.yaml"), "--dry-run", "--set", "data.instance_ids=[t]"]
    assert main(base) == 0
    out = capsys.readouterr().out
    assert "verdict: fits" in out and "frozen weights (bf16)" in out and "vLLM colocated share" in out
    assert main(base + ["--set", "peft=null"]) == 1  # the old gpu_qwen: 7B full fine-tune on one GPU
    captured = capsys.readouterr()
    assert "DOES NOT FIT: peak 192.90 GB > 80 GB" in captured.out and "does not fit" in captured.err
    assert main(base + ["--device-memory-gb", "40"]) == 1  # LoRA on a 40 GB card: vLLM's 14 GB cannot hold 15.2 GB
    assert "cannot hold its bf16 weights" in capsys.readouterr().out
    fsdp = ["train", "--config", str(CONFIGS / "gpu_7b_fsdp8.yaml"), "--dry-run", "--set", "data.instance_ids=[t]"]
    assert main(fsdp + ["--num-devices", "2"]) == 1  # the same full fine-tune sharded over 2 GPUs only
    assert "devices: 2 x 80 GB, sharding: fsdp" in capsys.readouterr().out


def test_live_replay_with_dpo_counts_the_initial_weights_unless_peft_or_simpo():
    cfgs = Path(trainer_client.__file__).parent / "configs"
    base = estimate_for_config(load_config(cfgs / "gpu_7b_fsdp8.yaml"))
    live = ["replay.enabled=true", "replay.teachers=teachers.yaml"]
    with_ref = estimate_for_config(load_config(cfgs / "gpu_7b_fsdp8.yaml", live))
    assert with_ref.phase_gb("train") - base.phase_gb("train") == pytest.approx(with_ref.facts.num_params * 2 / GB)
    simpo = estimate_for_config(load_config(cfgs / "gpu_7b_fsdp8.yaml", [*live, "loss.pairs.loss=simpo"]))
    lora = estimate_for_config(load_config(cfgs / "gpu_qwen.yaml", live))
    assert not any("DPO reference" in r.name for r in simpo.rows + lora.rows)
