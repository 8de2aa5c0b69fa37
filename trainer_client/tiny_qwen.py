"""A tiny randomly initialised Qwen2ForCausalLM for CPU smoke runs (no model hub).

Hidden 64, 2 layers, tied embeddings, vocab = the Qwen2 tokenizer's size (151,665), about
9.8M parameters. Saved (with the tokenizer) to a local directory so GRPOTrainer and the
config file can name it by path, like any hub checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainer_client.tokenizer import default_cache_dir, load_qwen_tokenizer

__all__ = ["TinyQwenSpec", "build_tiny_qwen", "tiny_qwen_dir"]


@dataclass(frozen=True)
class TinyQwenSpec:
    """Shape of the smoke model. `seed` makes the random init reproducible."""

    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 8192
    seed: int = 0

    @property
    def dirname(self) -> str:
        return (
            f"tiny-qwen2-h{self.hidden_size}-i{self.intermediate_size}-l{self.num_hidden_layers}"
            f"-a{self.num_attention_heads}-kv{self.num_key_value_heads}-s{self.seed}"
        )


def build_tiny_qwen(out_dir: str | Path, spec: TinyQwenSpec = TinyQwenSpec()) -> Path:
    """Create, save (safetensors) and return the directory of a random tiny Qwen2 model."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = load_qwen_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(spec.seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=[tokenizer.eos_token_id, tokenizer.pad_token_id],
        pad_token_id=tokenizer.pad_token_id,
    )
    out = Path(out_dir)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out


def tiny_qwen_dir(spec: TinyQwenSpec = TinyQwenSpec(), cache_dir: str | Path | None = None) -> Path:
    """Cached directory of the tiny model for `spec` (built on first use)."""
    import os
    import shutil
    import tempfile

    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = root / spec.dirname
    if (target / "config.json").exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{spec.dirname}-", dir=root))
    try:
        build_tiny_qwen(tmp, spec)
        try:
            os.replace(tmp, target)
        except OSError:  # a concurrent builder got there first
            if not (target / "config.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
