"""The server's warm pool (`warm_pool`, `prefetch_ahead`): resets claim pre-started jails on the
real server, real bwrap sandbox and demo task; each episode gets its own jail, as fresh as a cold
one; forks claim from the pool too; the pool is gone with the server."""

from __future__ import annotations

import asyncio
import time

import websockets
from envlib import call, requires_sandbox, run, tool

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
    with make_server(warm_pool=3, warm_per_task=3, prefetch_ahead=1) as srv:
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
