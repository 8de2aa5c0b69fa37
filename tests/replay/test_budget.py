import asyncio

import pytest

from trainer_client.replay.budget import Budget, estimate_prompt_tokens, worst_case_cost

from .replay_support import bash, state, teachers


def test_reserve_waits_for_in_flight_calls_then_refuses_only_what_cannot_fit():
    async def go():
        b = Budget(max_total_usd=1.0)
        r1 = await b.reserve(0.6)
        waiter = asyncio.create_task(b.reserve(0.6))      # fits only once r1 settles cheaply
        await asyncio.sleep(0.01)
        assert not waiter.done() and b.reserved == pytest.approx(0.6)
        await b.settle(r1, 0.1)
        r2 = await asyncio.wait_for(waiter, 1)
        assert r2 is not None and b.spent + b.reserved == pytest.approx(0.7)
        await b.settle(r2, 0.5)
        assert await b.reserve(0.5) is None and b.refused == 1   # 0.6 spent: 0.5 never fits
        assert b.peak_committed <= 1.0
    asyncio.run(go())


def test_overrun_is_charged_and_counted():
    async def go():
        b = Budget(max_total_usd=1.0)
        await b.settle(await b.reserve(0.1), 0.3)
        return b
    b = asyncio.run(go())
    assert b.spent == pytest.approx(0.3) and b.overruns == 1


def test_prompt_bound_covers_the_utf8_bytes_and_worst_case_uses_max_tokens():
    s = state(3, bash("ls"))
    n = estimate_prompt_tokens(s.messages, s.tools)
    import json
    assert n >= len(json.dumps([s.messages, s.tools], ensure_ascii=False).encode()) * 0.9
    cfg = teachers("http://x", price_in=1e-6, price_out=2e-6, max_tokens=100).teachers[0]
    assert worst_case_cost(cfg, n) == pytest.approx(n * 1e-6 + 100 * 2e-6)
