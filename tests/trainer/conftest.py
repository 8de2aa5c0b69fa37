"""Shared fixtures for the trainer-client tests: real tokenizer, real tiny model."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest


@pytest.fixture(scope="session", autouse=True)
def _few_threads():
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def qwen_tokenizer():
    from trainer_client.tokenizer import load_qwen_tokenizer

    return load_qwen_tokenizer()
