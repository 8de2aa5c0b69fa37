"""The server's warm pool (`warm_pool`, `prefetch_ahead`): resets claim pre-started jails on the
real server, real bwrap sandbox and demo task; each episode gets its own jail, as fresh as a cold
one; forks claim from the pool too; a GRPO group's burst of resets is served warm, each of its
steps at once; the pool is gone with the server."""

from __future__ import annotations

import asyncio
import time

import websockets
from env_support import call, requires_sandbox, run, tool

pytestmark = requires_sandbox

PLANT = ("echo planted > /tmp/left-over; echo planted > left-over.txt; export LEFT_OVER=1; "
         "(setsid nohup sleep 778899 >/dev/null 2>&1 &); echo planted")
PROBE = ("ls /tmp/left-over left-over.txt 2>&1 | grep -c 'No such'; echo env=${LEFT_OVER:-none}; "
         "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '[7]78899'")


def _wait_idle(service, n: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while service.pool.stats()["idle"] < n:
        assert time.monotonic() < deadline, service.pool.stats()
        time.sleep(0.05)


def test_resets_claim_warm_jails_each_fresh_and_forks_use_the_pool(make_server):
    with make_server(warm_pool=3, warm_per_task=3, prefetch_ahead=1, group_size=3) as srv:
        service = srv.service
        _wait_idle(service, 3)  # primed at start-up by the look-ahead over the queue

        async def main():
            async with websockets.connect(srv.ws_url + "/ws") as ws:
                seen = []
                first = await call(ws, "reset", {})
                assert first["type"] == "observation", first
                seen.append(next(iter(service.sessions.values())).episode.sandbox)
                planted = await call(ws, "step", tool("bash", command=PLANT))
                assert planted["data"]["observation"]["output"].strip().endswith("planted"), planted
                episode_id = first["data"]["observation"]["metadata"]["episode_id"]
                for _ in range(4):
                    await asyncio.sleep(0.3)
                    again = await call(ws, "reset", {})
                    assert again["type"] == "observation", again
                    seen.append(next(iter(service.sessions.values())).episode.sandbox)
                    probe = await call(ws, "step", tool("bash", command=PROBE))
                    lines = probe["data"]["observation"]["output"].split()
                    assert lines == ["2", "env=none", "0"], probe  # no file, no variable, no process
                fork = await call(ws, "reset", {"fork_of": episode_id, "t": 1})
                assert fork["type"] == "observation", fork
                forked = await call(ws, "step", tool("bash", command="cat left-over.txt"))
                assert forked["data"]["observation"]["output"].strip() == "planted", forked  # the workspace at t=1
                return seen

        boxes = run(main())
        assert len({id(b) for b in boxes}) == len(boxes) and len({b.id for b in boxes}) == len(boxes)
        stats = service.pool.stats()
        assert stats["claims_warm"] >= 5 and stats["idle"] + stats["starting"] <= 3, stats
        pool = service.pool
    assert pool.stats()["idle"] == 0 and pool.stats()["starting"] == 0  # closed with the server


def test_a_grpo_group_burst_is_served_warm(make_server):
    """group_size 4: the round robin hands a task to four resets in a row, and the look-ahead keeps
    four jails ready for the next group; three bursts of four resets at once, a second apart, are
    all warm claims, each jail distinct, each first step answered."""
    with make_server(warm_pool=8, warm_per_task=4, prefetch_ahead=1, group_size=4) as srv:
        service = srv.service
        _wait_idle(service, 4)

        async def main():
            conns = [await websockets.connect(srv.ws_url + "/ws") for _ in range(4)]
            try:
                for group in range(3):
                    deadline = time.monotonic() + 30
                    while service.pool.stats()["idle"] < 4:
                        assert time.monotonic() < deadline, service.pool.stats()
                        await asyncio.sleep(0.05)
                    before = service.pool.stats()
                    replies = await asyncio.gather(*(call(ws, "reset", {}) for ws in conns))
                    assert all(r["type"] == "observation" for r in replies), replies
                    after = service.pool.stats()
                    assert after["claims_warm"] - before["claims_warm"] == 4, (group, before, after)
                    assert after["claims_cold"] == before["claims_cold"], (group, before, after)
                    steps = await asyncio.gather(*(call(ws, "step", tool("bash", command="echo ok")) for ws in conns))
                    assert [s["data"]["observation"]["output"].strip() for s in steps] == ["ok"] * 4, steps
                    boxes = [s.episode.sandbox for s in service.sessions.values()]
                    assert len({b.id for b in boxes}) == 4
                    await asyncio.sleep(1.0)
            finally:
                await asyncio.gather(*(ws.close() for ws in conns))

        run(main())
        assert service.pool.typical_burst() == 4
