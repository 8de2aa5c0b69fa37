"""Shared fixtures for the loss tests: a tiny random Qwen2 and the real Qwen2 tokenizer."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
torch.set_num_threads(1)

QWEN_VOCAB = 151936


def tiny_qwen(vocab_size: int = 512, seed: int = 0):
    """Qwen2ForCausalLM, hidden 64, 2 layers, tied embeddings, random init with a fixed seed."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=vocab_size,
        tie_word_embeddings=True,
        max_position_embeddings=4096,
    )
    return Qwen2ForCausalLM(cfg).float()


@pytest.fixture
def small_model():
    return tiny_qwen()


@pytest.fixture(scope="session")
def tokenizer():
    from trainer_client.tokenizer import load_qwen_tokenizer

    return load_qwen_tokenizer()


@pytest.fixture(scope="session")
def qwen_model():
    """Full Qwen2 vocabulary (works with the real tokenizer's ids)."""
    return tiny_qwen(QWEN_VOCAB)
