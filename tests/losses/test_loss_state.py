"""Channel state across a checkpoint and a growing pair buffer (the pairs and hints channels, and the
mixin's channels.pt layout)."""

from __future__ import annotations

import copy

import pytest

from trainer_client.losses import ReferenceLogps
from trainer_client.losses.mixin import _current_layout

from .channels_support import make_channels
from support.pairs import pair_records

HINTS = {"weight": 0.1, "divergence": "taid", "taid_adaptive": True, "taid_total_steps": 10}
PAIRS = {"weight": 0.5, "per_step": 2}


def test_a_growing_buffer_gets_references_from_the_initial_policy_not_the_trained_one(tokenizer, qwen_model):
    initial = copy.deepcopy(qwen_model)
    pairs = make_channels(tokenizer, HINTS, PAIRS, reference_loader=lambda: initial)["pairs"]
    assert pairs.next_pairs() == [] and not pairs.has_inputs({})  # nothing yet: the channel idles instead of failing
    for p in qwen_model.parameters():  # "training" moved the policy away from its start
        p.data.add_(0.05)
    assert pairs.add(pair_records(2), qwen_model) == 2
    by_initial, by_policy = ReferenceLogps(), ReferenceLogps()
    by_initial.compute(initial, pairs.pairs)
    by_policy.compute(qwen_model, pairs.pairs)
    flat = lambda ref: [v for pair in sorted(ref.state_dict().items()) for v in pair[1]]  # noqa: E731
    assert flat(pairs.reference) == pytest.approx(flat(by_initial))
    assert flat(pairs.reference) != pytest.approx(flat(by_policy))
    assert pairs.add([{"state_id": "bad"}], qwen_model) == 0 and pairs.refused == 1
    assert len(pairs.next_pairs()) == 2


def test_state_dict_restores_buffer_sampler_references_and_taid_exactly(tokenizer, qwen_model):
    channels = make_channels(tokenizer, HINTS, PAIRS, reference_loader=lambda: qwen_model)
    pairs, hints = channels["pairs"], channels["hints"]
    pairs.add(pair_records(3), qwen_model)
    for step, loss in enumerate((1.0, 0.8, 0.7)):
        hints.taid.update(loss, step)
    pairs.next_pairs()
    saved = copy.deepcopy({n: c.state_dict() for n, c in channels.items()})
    expected = [[p.index for p in pairs.next_pairs()] for _ in range(5)]  # what the run would draw next

    restored = make_channels(tokenizer, HINTS, PAIRS)  # no loader: a restored reference is never recomputed
    for name, channel in restored.items():
        channel.load_state_dict(saved[name])
    assert [r.model_dump(mode="json") for r in restored["pairs"].records] == saved["pairs"]["records"]
    assert restored["pairs"].reference.state_dict() == saved["pairs"]["reference"]
    assert restored["hints"].taid.t == saved["hints"]["taid"]["t"] > 0.4
    assert restored["hints"].taid.state_dict() == saved["hints"]["taid"]
    assert [[p.index for p in restored["pairs"].next_pairs()] for _ in range(5)] == expected
    fresh = make_channels(tokenizer, HINTS, PAIRS)["pairs"]  # without the sampler state it draws from the epoch start
    fresh.load_state_dict({**saved["pairs"], "sampler": None})
    assert [[p.index for p in fresh.next_pairs()] for _ in range(5)] != expected


def test_a_checkpoint_from_before_channel_plug_ins_restores_into_the_channels(tokenizer, qwen_model):
    """channels.pt written when the loss state was one flat dict (records, reference, sampler, taid)."""
    channels = make_channels(tokenizer, HINTS, PAIRS, reference_loader=lambda: qwen_model)
    channels["pairs"].add(pair_records(3), qwen_model)
    channels["hints"].taid.update(1.0, 0)
    channels["hints"].taid.update(0.5, 1)
    now = {n: c.state_dict() for n, c in channels.items()}
    old = {"records": now["pairs"]["records"], "reference": now["pairs"]["reference"],
           "sampler": now["pairs"]["sampler"], "taid": now["hints"]["taid"], "pairs_refused": 1}
    restored = make_channels(tokenizer, HINTS, PAIRS)
    layout = _current_layout(old)
    for name, channel in restored.items():
        channel.load_state_dict(layout[name])
    assert restored["pairs"].reference.state_dict() == now["pairs"]["reference"] and restored["pairs"].refused == 1
    assert restored["hints"].taid.state_dict() == now["hints"]["taid"]
    assert _current_layout(now) is now
