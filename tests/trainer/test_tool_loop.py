"""The concurrent tool phase: same ids/masks as trl 1.16.0's serial loop, concurrent, error sites."""

from __future__ import annotations

import hashlib
import time

import pytest

from trainer_client.trainer import trl_tool_loop_source

from .trainer_support import SleepEnvDouble, build_trainer, scripted_first_turn

# sha256 of inspect.getsource(GRPOTrainer._tool_call_loop) in trl 1.16.0: the override mirrors it.
TRL_1_16_0_TOOL_LOOP_SHA = "1c501f7f3b469f7e493cb90e2a85aef99ef66052cfd8927d1c200977ac559388"


def test_pinned_trl_tool_loop():
    import trl

    assert trl.__version__ == "1.16.0"
    digest = hashlib.sha256(trl_tool_loop_source().encode()).hexdigest()
    assert digest == TRL_1_16_0_TOOL_LOOP_SHA, "TRL's tool loop changed: re-check ConcurrentToolsMixin"


@pytest.fixture(scope="module")
def trainers(tmp_path_factory):
    from trl import GRPOTrainer

    out = tmp_path_factory.mktemp("tl")
    ours = build_trainer(out / "ours", SleepEnvDouble, trainer_cls=None)
    stock = build_trainer(out / "stock", SleepEnvDouble, trainer_cls=GRPOTrainer)
    return ours, stock


def _run_loop(trainer, n, delay, fail_every=0):
    import torch

    trainer.environments = [SleepEnvDouble() for _ in range(n)]
    for env in trainer.environments:
        env.delay = delay
    trainer._sync_tool_dicts = [{"sleep": e.sleep, "fail": e.fail} for e in trainer.environments]
    trainer._async_tool_dicts = [{} for _ in range(n)]
    trainer._batch_environments = [None] * n
    prompts, prompt_ids, completion_ids, completions = scripted_first_turn(trainer, n, fail_every=fail_every)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    out = trainer._tool_call_loop(prompts, prompt_ids, completion_ids, completions, None, None, {})
    return out, time.perf_counter() - t0, prompt_ids


def test_same_tokens_as_stock_and_concurrent(trainers):
    ours, stock = trainers
    (mask_a, comp_a, ids_a, _, calls_a, fails_a, _), _, _ = _run_loop(ours, 4, 0.5)
    (mask_b, comp_b, ids_b, _, calls_b, fails_b, _), _, _ = _run_loop(stock, 4, 0.5)
    assert ids_a == ids_b and mask_a == mask_b and comp_a == comp_b
    assert (calls_a, fails_a) == (calls_b, fails_b) == (4, 0)
    starts_ours = [t for e in ours.environments for t in e.started]
    starts_stock = [t for e in stock.environments for t in e.started]
    assert max(starts_stock) - min(starts_stock) >= 1.5  # stock: one rollout after another
    assert max(starts_ours) - min(starts_ours) < 0.25  # ours: all four at once
    # and whatever the machine's load: ours' four calls all ran at the same time (every one started
    # before the first ended), stock's never did (each started after the one before had ended)
    ends_ours = [t for e in ours.environments for t in e.ended]
    assert max(starts_ours) < min(ends_ours)
    spans_stock = sorted(zip(starts_stock, [t for e in stock.environments for t in e.ended]))
    assert all(start >= prev_end for (_, prev_end), (start, _) in zip(spans_stock, spans_stock[1:]))


def test_error_sites_point_at_next_assistant_turn(trainers):
    ours, _ = trainers
    (mask, completions, ids, *_), _, prompt_ids = _run_loop(ours, 4, 0.0, fail_every=2)
    sites = ours._last_error_sites
    assert [len(s) for s in sites] == [1, 0, 1, 0]
    tok = ours.processing_class
    for i in (0, 2):
        site = sites[i][0]
        assert site["error_kind"] == "nonzero_exit" and site["hint_template_key"] == "shell.nonzero_exit"
        assert site["turn"] == 0
        start = site["token_start"]
        # tokens before token_start end with the templated tool output + "<|im_start|>assistant\n"
        assert tok.decode(ids[i][:start]).endswith("</tool_response><|im_end|>\n<|im_start|>assistant\n")
        assert mask[i][start - 1] == 0 and mask[i][start] == 1  # first generated token of the next turn
