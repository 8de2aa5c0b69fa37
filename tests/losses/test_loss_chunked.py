"""Chunked divergence from hidden states equals the full-logits computation (values and grads)."""

from __future__ import annotations

import pytest
import torch

from trainer_client.losses import HintsSettings
from trainer_client.losses.chunked import divergence_from_hidden, per_token_divergence_from_hidden


def _inputs(n: int, h: int, v: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    hs = torch.randn(n, h, generator=g)
    ht = hs + 0.5 * torch.randn(n, h, generator=g)
    w = torch.randn(v, h, generator=g) * 0.3
    return hs, ht, w


def _value_and_grads(config: HintsSettings, hs, ht, w):
    hs = hs.clone().requires_grad_(True)
    w = w.clone().requires_grad_(True)
    loss = divergence_from_hidden(hs, ht, w, config)
    loss.backward()
    return loss.detach(), hs.grad, w.grad


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(divergence="jsd", jsd_beta=0.5),
        dict(divergence="jsd", jsd_beta=0.0, temperature=2.0),
        dict(divergence="jsd", jsd_beta=1.0, token_clip=0.3, teacher_top_k=64),
        dict(divergence="taid", taid_t=0.4),
        dict(divergence="eaopd"),
    ],
)
def test_native_chunked_equals_unchunked(kwargs):
    hs, ht, w = _inputs(n=50, h=32, v=3000)
    full = _value_and_grads(HintsSettings(chunk_size=0, chunk_backend="native", **kwargs), hs, ht, w)
    chunked = _value_and_grads(HintsSettings(chunk_size=16, chunk_backend="native", **kwargs), hs, ht, w)
    for a, b in zip(chunked, full):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_trl_backend_equals_native(beta):
    hs, ht, w = _inputs(n=40, h=32, v=3000, seed=1)
    native = _value_and_grads(HintsSettings(jsd_beta=beta, chunk_size=0, chunk_backend="native"), hs, ht, w)
    trl = _value_and_grads(HintsSettings(jsd_beta=beta, chunk_size=16, chunk_backend="trl"), hs, ht, w)
    for a, b in zip(trl, native):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_full_qwen_vocab_chunked_equals_unchunked():
    hs, ht, w = _inputs(n=24, h=64, v=151936, seed=2)
    cfg = dict(divergence="jsd", chunk_backend="native")
    full = per_token_divergence_from_hidden(hs, ht, w, HintsSettings(chunk_size=0, **cfg))
    chunked = per_token_divergence_from_hidden(hs, ht, w, HintsSettings(chunk_size=8, **cfg))
    torch.testing.assert_close(chunked, full, atol=1e-5, rtol=1e-5)


def test_teacher_hidden_gets_no_gradient():
    hs, ht, w = _inputs(n=20, h=16, v=500)
    ht.requires_grad_(True)
    hs.requires_grad_(True)
    divergence_from_hidden(hs, ht, w, HintsSettings(chunk_size=4, chunk_backend="native")).backward()
    assert ht.grad is None and hs.grad is not None


def test_empty_selection_is_zero_and_differentiable():
    hs, ht, w = _inputs(n=0, h=16, v=500)
    w.requires_grad_(True)
    loss = divergence_from_hidden(hs, ht, w, HintsSettings())
    loss.backward()
    assert float(loss.detach()) == 0.0 and w.grad is not None
