"""Channel state across a checkpoint and a growing pair buffer (trainer_client/losses/mixin.py)."""

from __future__ import annotations

import copy

import pytest

from trainer_client.losses import LossConfig
from trainer_client.losses.mixin import ChannelState

from .pairs_data import pair_records


def _config(**kw) -> LossConfig:
    return LossConfig(beta=0.5, pairs_per_step=2, divergence="taid", taid_adaptive=True, taid_total_steps=10, **kw)


def test_a_growing_buffer_gets_references_from_the_initial_policy_not_the_trained_one(tokenizer, qwen_model):
    initial = copy.deepcopy(qwen_model)
    state = ChannelState(_config(), tokenizer, reference_loader=lambda: initial)
    assert state.next_pairs() == []  # nothing yet: channel 3 idles instead of failing
    for p in qwen_model.parameters():  # "training" moved the policy away from its start
        p.data.add_(0.05)
    assert state.add_pairs(pair_records(2), qwen_model) == 2
    from trainer_client.losses.pair_preference import ReferenceLogps

    by_initial, by_policy = ReferenceLogps(), ReferenceLogps()
    by_initial.compute(initial, state.pairs)
    by_policy.compute(qwen_model, state.pairs)
    flat = lambda ref: [v for pair in sorted(ref.state_dict().items()) for v in pair[1]]  # noqa: E731
    assert flat(state.reference) == pytest.approx(flat(by_initial))
    assert flat(state.reference) != pytest.approx(flat(by_policy))
    assert state.add_pairs([{"state_id": "bad"}], qwen_model) == 0 and state.pairs_refused == 1
    assert len(state.next_pairs()) == 2


def test_state_dict_restores_buffer_sampler_references_and_taid_exactly(tokenizer, qwen_model):
    state = ChannelState(_config(), tokenizer, reference_loader=lambda: qwen_model)
    state.add_pairs(pair_records(3), qwen_model)
    for step, loss in enumerate((1.0, 0.8, 0.7)):
        state.taid.update(loss, step)
    state.next_pairs()
    saved = copy.deepcopy(state.state_dict())
    expected = [[p.index for p in state.next_pairs()] for _ in range(5)]  # what the run would draw next

    restored = ChannelState(_config(), tokenizer)  # no loader: a restored reference is never recomputed
    restored.load_state_dict(saved)
    assert restored.records == saved["records"] and restored.reference.state_dict() == saved["reference"]
    assert restored.taid.t == saved["taid"]["t"] > 0.4 and restored.taid.state_dict() == saved["taid"]
    assert [[p.index for p in restored.next_pairs()] for _ in range(5)] == expected
    fresh = ChannelState(_config(), tokenizer)  # without the sampler state it draws from the epoch start
    fresh.load_state_dict({**saved, "sampler": None})
    assert [[p.index for p in fresh.next_pairs()] for _ in range(5)] != expected
