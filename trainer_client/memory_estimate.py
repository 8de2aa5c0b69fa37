"""Per-device GPU memory estimate of a training config (`trainer-client train --dry-run`).

Pure arithmetic, no torch: every term below is a product of config facts, printed with its
formula so it can be checked by hand. Units: GB = 10^9 bytes (an "80 GB" H100 exposes
~79.2 GiB = 85.0 GB to torch, so comparing against 80 GB is on the safe side).

Notation: P = the model's parameters, T = trainable parameters (P for a full fine-tune, the
LoRA A/B matrices under PEFT), F = frozen parameters (P under PEFT, else 0), N = devices the training state is
sharded over (FSDP / DeepSpeed ZeRO-3: N = number of trainer processes; no sharding: 1),
L layers, h hidden size, I MLP intermediate size, kv = key/value heads x head dim,
V vocabulary, b = per_device_train_batch_size, s = prompt_tokens + max_completion_length.

Per device, in bytes:

    frozen weights           F x 2 / N                 bf16
    trainable weights        T x 2 / N                 bf16 working copy
    fp32 master weights      T x 4 / N                 mixed precision keeps an fp32 copy
    gradients                T x 4 / N                 fp32
    AdamW states             T x 8 / N                 exp_avg + exp_avg_sq, fp32
      (T x 18 B in all: the transformers "model memory anatomy" rule for mixed-precision AdamW;
       pure-bf16 runs need less, so this is an upper bound)
    activation checkpoints   L x b x s x h x 2         gradient checkpointing keeps each layer's
                                                       bf16 input (Korthikanti et al. 2205.05198,
                                                       full recomputation); without checkpointing
                                                       every layer keeps its working set (next row)
    recompute working set    b x s x (8h + 2kv + 4I) x 2
                                                       one layer's saved tensors during backward:
                                                       norm in/out (fp32 upcast counted as 2h),
                                                       q + k + v (h + 2kv), attention out (h), MLP
                                                       gate/up/act/product (4I); flash/SDPA
                                                       attention keeps no s x s scores
    log-prob tile            1024 x V x 4 x 2          TRL 1.16's fused LM head projects completion
                                                       positions tile by tile (fp32 logits + grad);
                                                       1,024 tokens is an allowance, not a measurement
    loss channels 2/3        b x s x (8h+2kv+4I) x 2 + chunk x V x 4 x 4
                                                       hint-teacher forward (no grad, one layer live)
                                                       + chunked divergence logits (student, teacher,
                                                       their softmaxes); 0 with no `loss` section
    sharding gather buffers  2 x (P / L) x 2           FSDP / ZeRO-3 all-gather one layer ahead
                                                       (bf16); 0 without sharding
    HF generate KV cache     g x s x L x 2 x kv x 2    only without vLLM; g = b x steps_per_generation
    vLLM (colocated)         u x device memory         vllm_gpu_memory_utilization u: vLLM reserves
                                                       that share of the device (weights + KV cache);
                                                       0 on trainer devices in server mode
    weight-sync gather       P x 2 (PEFT + ZeRO-3)     TRL gathers the whole model to merge LoRA
                             V x h x 4 (FSDP)          (trl/generation/vllm_generation.py
                             0 (no sharding)           _iter_named_params); FSDP streams one
                                                       full tensor at a time (largest: embedding)
    runtime reserve          3 GB                      CUDA context, NCCL buffers, allocator slack

Phases (the peak is their maximum):

    train     = weights + master + gradients + AdamW + activations + log-prob tile + channels
                + gather buffers + reserve (+ the vLLM share when colocated without sleep mode:
                `vllm_enable_sleep_mode` releases it during the optimizer phase)
    generate  = weights + master + AdamW + reserve + vLLM share (or the HF generate KV cache)
                (gradients are freed: the Trainer zeroes them with set_to_none)
    sync      = weights + master + AdamW + reserve + weight-sync gather + vLLM share (colocated)

Not counted: CPU offload, fragmentation beyond the reserve, activation memory of very long
tool outputs beyond max_completion_length (TRL truncates there), and anything a GPU would
reveal that arithmetic cannot. The numbers are an estimate to catch configs that cannot fit,
not a guarantee that one does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

__all__ = [
    "KNOWN_MODELS",
    "MemoryEstimate",
    "ModelFacts",
    "Row",
    "estimate_for_config",
    "estimate_memory",
    "lora_trainable_params",
    "model_facts",
]

GB = 1e9
RUNTIME_RESERVE_GB = 3.0
LOGPROB_TILE_TOKENS = 1024
ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class ModelFacts:
    """The shape facts of a dense decoder (Qwen2 / Llama family), as in its config.json."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    tie_word_embeddings: bool = False
    attention_bias: bool = True  # Qwen2: q/k/v have biases
    head_dim: int | None = None
    source: str = "config"

    @property
    def head(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def kv_dim(self) -> int:
        return self.num_key_value_heads * self.head

    @property
    def q_dim(self) -> int:
        return self.num_attention_heads * self.head

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each linear module of one layer, by its PEFT target name."""
        h, i = self.hidden_size, self.intermediate_size
        return {"q_proj": (h, self.q_dim), "k_proj": (h, self.kv_dim), "v_proj": (h, self.kv_dim),
                "o_proj": (self.q_dim, h), "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}

    @property
    def layer_params(self) -> int:
        shapes = self.linear_shapes()
        weights = sum(a * b for a, b in shapes.values())
        biases = (self.q_dim + 2 * self.kv_dim) if self.attention_bias else 0
        return weights + biases + 2 * self.hidden_size  # + the two RMSNorm weights

    @property
    def num_params(self) -> int:
        """P = L x layer + embedding (+ untied LM head) + final norm."""
        embed = self.vocab_size * self.hidden_size
        head = 0 if self.tie_word_embeddings else embed
        return self.num_hidden_layers * self.layer_params + embed + head + self.hidden_size


#: config.json facts of the models the shipped configs name (P follows from them: 7,615,616,512
#: for the 7B and 32,763,876,352 for the 32B, the published sizes)
_QWEN25_7B = dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                  num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False)
_QWEN25_32B = dict(hidden_size=5120, intermediate_size=27648, num_hidden_layers=64, num_attention_heads=40,
                   num_key_value_heads=8, vocab_size=152064, tie_word_embeddings=False)
KNOWN_MODELS: dict[str, dict[str, Any]] = {
    "Qwen/Qwen2.5-Coder-7B-Instruct": _QWEN25_7B,
    "Qwen/Qwen2.5-Coder-7B": _QWEN25_7B,
    "Qwen/Qwen2.5-7B-Instruct": _QWEN25_7B,
    "Qwen/Qwen2.5-Coder-32B-Instruct": _QWEN25_32B,
    "Qwen/Qwen2.5-Coder-32B": _QWEN25_32B,
    "Qwen/Qwen2.5-32B-Instruct": _QWEN25_32B,
}


def model_facts(name_or_path: str) -> ModelFacts:
    """Facts from a local config.json, the tiny smoke model's spec, or the table of known models."""
    from trainer_client.config import TINY_MODEL

    if name_or_path == TINY_MODEL:
        from trainer_client.tiny_qwen import TinyQwenSpec

        spec = TinyQwenSpec()
        return ModelFacts(spec.hidden_size, spec.intermediate_size, spec.num_hidden_layers, spec.num_attention_heads,
                          spec.num_key_value_heads, vocab_size=151665, tie_word_embeddings=True, source="tiny-qwen spec")
    config_json = Path(name_or_path) / "config.json"
    if config_json.is_file():
        raw = json.loads(config_json.read_text())
        raw = raw.get("text_config", raw)
        return ModelFacts(
            raw["hidden_size"], raw["intermediate_size"], raw["num_hidden_layers"], raw["num_attention_heads"],
            raw.get("num_key_value_heads") or raw["num_attention_heads"], raw["vocab_size"],
            bool(raw.get("tie_word_embeddings", False)), bool(raw.get("attention_bias", raw.get("model_type") == "qwen2")),
            raw.get("head_dim"), source=str(config_json),
        )
    if name_or_path in KNOWN_MODELS:
        return ModelFacts(**KNOWN_MODELS[name_or_path], source="known-model table (config.json facts)")
    raise ValueError(f"no shape facts for model {name_or_path!r}: give a local directory with a config.json "
                     f"or one of {sorted(KNOWN_MODELS)}")


def lora_trainable_params(facts: ModelFacts, r: int, target_modules: str | Iterable[str]) -> int:
    """LoRA adds A (r x in) and B (out x r) per targeted linear: r x (in + out) per module and layer."""
    targets = ALL_LINEAR if target_modules in ("all-linear", None) else tuple(target_modules)
    shapes = facts.linear_shapes()
    unknown = [t for t in targets if t not in shapes]
    if unknown:
        raise ValueError(f"LoRA target(s) {unknown} are not linear modules of this model ({sorted(shapes)})")
    return facts.num_hidden_layers * sum(r * (shapes[t][0] + shapes[t][1]) for t in targets)


@dataclass
class Row:
    name: str
    formula: str
    bytes: float
    phases: tuple[str, ...] = ("train", "generate", "sync")

    @property
    def gb(self) -> float:
        return self.bytes / GB


@dataclass
class MemoryEstimate:
    model: str
    facts: ModelFacts
    trainable: int
    num_devices: int
    sharding: str
    device_memory_gb: float | None
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def phase_gb(self, phase: str) -> float:
        return sum(r.bytes for r in self.rows if phase in r.phases) / GB

    @property
    def peak_gb(self) -> float:
        return max(self.phase_gb(p) for p in ("train", "generate", "sync"))

    @property
    def fits(self) -> bool:
        """False when the peak exceeds the device memory or a check failed; True without a device size."""
        if self.problems:
            return False
        return self.device_memory_gb is None or self.peak_gb <= self.device_memory_gb

    def table(self) -> str:
        P, T = self.facts.num_params, self.trainable
        dev = f"{self.device_memory_gb:g} GB" if self.device_memory_gb is not None else "? GB (not given)"
        lines = [
            f"memory estimate per device (GB = 1e9 bytes) for {self.model}: P = {P:,} params "
            f"({self.facts.source}), T = {T:,} trainable ({100 * T / P:.2f}%)",
            f"devices: {self.num_devices} x {dev}, sharding: {self.sharding} (N = "
            f"{self.num_devices if self.sharding != 'none' else 1})",
            f"  {'item':<28} {'formula':<52} {'GB':>8}  phases",
        ]
        for r in self.rows:
            lines.append(f"  {r.name:<28} {r.formula:<52} {r.gb:>8.2f}  {','.join(r.phases)}")
        for phase in ("train", "generate", "sync"):
            lines.append(f"  {'= ' + phase + ' phase':<28} {'':<52} {self.phase_gb(phase):>8.2f}")
        lines.append(f"  {'= peak':<28} {'max of the phases':<52} {self.peak_gb:>8.2f}")
        lines += [f"  note: {n}" for n in self.notes]
        lines += [f"  PROBLEM: {p}" for p in self.problems]
        if self.device_memory_gb is None:
            lines.append("verdict: no device memory given (hardware.device_memory_gb or --device-memory-gb): not checked")
        elif self.fits:
            lines.append(f"verdict: fits: peak {self.peak_gb:.2f} GB <= {self.device_memory_gb:g} GB per device "
                         f"({self.device_memory_gb - self.peak_gb:.2f} GB headroom)")
        else:
            over = f"peak {self.peak_gb:.2f} GB > {self.device_memory_gb:g} GB per device" \
                if self.peak_gb > self.device_memory_gb else f"peak {self.peak_gb:.2f} GB"
            lines.append(f"verdict: DOES NOT FIT: {over}" + ("; " + "; ".join(self.problems) if self.problems else ""))
        return "\n".join(lines)


def _g(x: float) -> str:
    """A count in engineering shorthand for formulas (7.62e9)."""
    return f"{x:.3g}" if x >= 1e4 else str(int(x))


def estimate_memory(
    facts: ModelFacts,
    *,
    model: str = "model",
    trainable: int | None = None,
    num_devices: int = 1,
    sharding: str = "none",
    device_memory_gb: float | None = None,
    micro_batch: int = 1,
    prompt_tokens: int = 2048,
    completion_tokens: int = 1024,
    gradient_checkpointing: bool = True,
    steps_per_generation: int = 1,
    use_vllm: bool = False,
    vllm_mode: str = "colocate",
    vllm_gpu_memory_utilization: float = 0.3,
    vllm_sleep_mode: bool = False,
    vllm_tensor_parallel_size: int = 1,
    vllm_server_tp: int | None = None,
    peft: bool = False,
    loss_channels: bool = False,
    loss_chunk_tokens: int = 256,
    runtime_reserve_gb: float = RUNTIME_RESERVE_GB,
) -> MemoryEstimate:
    """The rows and phases described in the module docstring."""
    if sharding not in ("none", "fsdp", "zero3"):
        raise ValueError(f"sharding must be none, fsdp or zero3, not {sharding!r}")
    P = facts.num_params
    T = P if trainable is None else trainable
    F = P if peft else P - T  # LoRA adds its T parameters next to the frozen base; a full fine-tune freezes none
    n = num_devices if sharding != "none" else 1
    L, h, I, kv, V = (facts.num_hidden_layers, facts.hidden_size, facts.intermediate_size, facts.kv_dim,
                      facts.vocab_size)
    b, s = micro_batch, prompt_tokens + completion_tokens
    est = MemoryEstimate(model, facts, T, num_devices, sharding, device_memory_gb)
    rows = est.rows
    all_phases, no_grad = ("train", "generate", "sync"), ("train",)
    if F:
        rows.append(Row("frozen weights (bf16)", f"F {_g(F)} x 2 / {n}", F * 2 / n, all_phases))
    rows.append(Row("trainable weights (bf16)", f"T {_g(T)} x 2 / {n}", T * 2 / n, all_phases))
    rows.append(Row("fp32 master weights", f"T x 4 / {n}", T * 4 / n, all_phases))
    rows.append(Row("gradients (fp32)", f"T x 4 / {n}", T * 4 / n, no_grad))
    rows.append(Row("AdamW states (fp32 m, v)", f"T x 8 / {n}", T * 8 / n, all_phases))
    working = b * s * (8 * h + 2 * kv + 4 * I) * 2
    if gradient_checkpointing:
        rows.append(Row("activation checkpoints", f"L {L} x b {b} x s {s} x h {h} x 2", L * b * s * h * 2, no_grad))
        rows.append(Row("recompute working set", f"b x s x (8h + 2kv {kv} + 4I {I}) x 2", working, no_grad))
    else:
        rows.append(Row("activations (no ckpt)", "L x b x s x (8h + 2kv + 4I) x 2", L * working, no_grad))
        est.notes.append("gradient_checkpointing is off: every layer keeps its activations")
    rows.append(Row("log-prob tile", f"{LOGPROB_TILE_TOKENS} x V {V} x 4 x 2", LOGPROB_TILE_TOKENS * V * 4 * 2, no_grad))
    if loss_channels:
        rows.append(Row("loss channels 2/3", f"b x s x (8h+2kv+4I) x 2 + {loss_chunk_tokens} x V x 16",
                        working + loss_chunk_tokens * V * 16, no_grad))
    if n > 1:
        layer = P / L
        rows.append(Row("shard gather buffers", "2 x (P / L) x 2", 2 * layer * 2, all_phases))
    if use_vllm and vllm_mode == "colocate":
        share = vllm_gpu_memory_utilization * device_memory_gb if device_memory_gb is not None else 0.0
        phases = ("generate", "sync") if vllm_sleep_mode else all_phases
        rows.append(Row("vLLM colocated share", f"u {vllm_gpu_memory_utilization:g} x device "
                        f"{device_memory_gb if device_memory_gb is not None else '?'} GB", share * GB, phases))
        vllm_weights = P * 2 / vllm_tensor_parallel_size / GB
        if device_memory_gb is None:
            est.notes.append(f"vLLM share unknown without a device size (u = {vllm_gpu_memory_utilization:g})")
        elif vllm_weights >= share:
            est.problems.append(f"vLLM's share ({share:.2f} GB = {vllm_gpu_memory_utilization:g} x "
                                f"{device_memory_gb:g} GB) cannot hold its bf16 weights (P x 2 / tp "
                                f"{vllm_tensor_parallel_size} = {vllm_weights:.2f} GB)")
        else:
            est.notes.append(f"vLLM share {share:.2f} GB = weights {vllm_weights:.2f} GB (P x 2 / tp "
                             f"{vllm_tensor_parallel_size}) + {share - vllm_weights:.2f} GB KV cache")
        if vllm_sleep_mode:
            est.notes.append("vllm_enable_sleep_mode: the vLLM share is released during the train phase")
    elif use_vllm:
        est.notes.append("vLLM in server mode: its GPUs are separate, nothing of it on trainer devices")
        if vllm_server_tp:
            w = P * 2 / vllm_server_tp / GB
            est.notes.append(f"vLLM server: bf16 weights P x 2 / tp {vllm_server_tp} = {w:.2f} GB per server GPU")
            if device_memory_gb is not None and w >= 0.9 * device_memory_gb:
                est.problems.append(f"vLLM server weights {w:.2f} GB per GPU exceed 0.9 x {device_memory_gb:g} GB "
                                    f"(trl vllm-serve's --gpu-memory-utilization): raise its tensor parallel size")
    else:
        g = b * steps_per_generation
        rows.append(Row("HF generate KV cache", f"g {g} x s x L x 2 x kv x 2", g * s * L * 2 * kv * 2, ("generate",)))
    if peft and sharding == "zero3":
        rows.append(Row("weight-sync gather", "P x 2 (LoRA merge gathers all, ZeRO-3)", P * 2 - P * 2 / n, ("sync",)))
    elif sharding != "none" and use_vllm:
        rows.append(Row("weight-sync gather", "V x h x 4 (one full tensor at a time)", V * h * 4, ("sync",)))
    if peft and sharding == "fsdp":
        est.notes.append("PEFT + FSDP weight sync: TRL 1.16 merges LoRA on sharded params (marked TODO in "
                         "trl/generation/vllm_generation.py); prefer ZeRO-3 for LoRA on several GPUs")
    rows.append(Row("runtime reserve", "CUDA context, NCCL, allocator slack", runtime_reserve_gb * GB, all_phases))
    return est


# ----------------------------------------------------------------------------- from a RunConfig
def _accelerate_facts(path: str | None) -> tuple[int | None, str | None]:
    """(num_processes, sharding) of an accelerate config file."""
    if not path:
        return None, None
    import yaml

    raw = yaml.safe_load(Path(path).read_text()) or {}
    kind = str(raw.get("distributed_type", "NO")).upper()
    sharding = "none"
    if kind == "FSDP":
        strategy = str((raw.get("fsdp_config") or {}).get("fsdp_sharding_strategy", "FULL_SHARD")).upper()
        sharding = "fsdp" if strategy in ("FULL_SHARD", "1", "HYBRID_SHARD") else "none"
    elif kind == "DEEPSPEED" and int((raw.get("deepspeed_config") or {}).get("zero_stage", 0)) == 3:
        sharding = "zero3"
    return raw.get("num_processes"), sharding


def estimate_for_config(cfg: Any, *, device_memory_gb: float | None = None,
                        num_devices: int | None = None) -> MemoryEstimate:
    """The estimate for a RunConfig; arguments override the config's `hardware` section."""
    hw, g = cfg.hardware, cfg.grpo
    facts = model_facts(cfg.model.name_or_path)
    trainable = None
    if cfg.peft is not None:
        trainable = lora_trainable_params(facts, cfg.peft.r, cfg.peft.target_modules)
    procs, acc_sharding = _accelerate_facts(hw.accelerate_config)
    devices = num_devices or hw.num_devices or procs or 1
    sharding = hw.sharding or acc_sharding or "none"
    loss = cfg.loss
    loss_on = any(section.weight > 0 for _, section in loss.items())
    est = estimate_memory(
        facts,
        model=cfg.model.name_or_path,
        trainable=trainable,
        num_devices=devices,
        sharding=sharding,
        device_memory_gb=device_memory_gb if device_memory_gb is not None else hw.device_memory_gb,
        micro_batch=int(g.get("per_device_train_batch_size", 8)),
        prompt_tokens=hw.prompt_tokens,
        completion_tokens=int(g.get("max_completion_length", 256)),
        gradient_checkpointing=bool(g.get("activation_checkpointing", g.get("gradient_checkpointing", True))),
        steps_per_generation=int(g.get("steps_per_generation") or g.get("gradient_accumulation_steps", 1)),
        use_vllm=bool(g.get("use_vllm", False)),
        vllm_mode=str(g.get("vllm_mode", "colocate")),
        vllm_gpu_memory_utilization=float(g.get("vllm_gpu_memory_utilization", 0.3)),
        vllm_sleep_mode=bool(g.get("vllm_enable_sleep_mode", False)),
        vllm_tensor_parallel_size=int(g.get("vllm_tensor_parallel_size", 1)),
        vllm_server_tp=hw.vllm_server_tp,
        peft=cfg.peft is not None,
        loss_channels=loss_on,
        loss_chunk_tokens=loss.hints.chunk_size or 256,
        runtime_reserve_gb=hw.runtime_reserve_gb,
    )
    live_dpo = cfg.replay.enabled and cfg.peft is None and loss.pairs.weight > 0 and loss.pairs.loss == "dpo"
    if live_dpo:  # pairs that arrive mid-run are scored by the initial weights, loaded whole on every device
        P = facts.num_params
        est.rows.append(Row("DPO reference (live pairs)", f"P {_g(P)} x 2 (initial weights, unsharded)", P * 2,
                            ("train",)))
        est.notes.append("replay.enabled with DPO and no PEFT keeps a frozen copy of the initial weights for the "
                         "live pairs' references: use PEFT (adapters disabled = reference) or loss.pairs.loss=simpo")
    if procs is not None and num_devices is None and hw.num_devices and hw.num_devices != procs:
        est.problems.append(f"hardware.num_devices {hw.num_devices} != num_processes {procs} of {hw.accelerate_config}")
    return est
