"""A verdict that depends on a random draw is never reused, and one that changes is tampering.

Each grading draws its canaries (values, names, which member is which) and its test order afresh,
so a blind guess at the canaries is right by chance only. Over the real server: the same diff,
submitted again in a new episode, is graded again (a new grading id, never ``cached``), so a lucky
draw is not paid twice; a diff whose verdict changes between draws (here a PASS_TO_PASS test it
breaks on a coin toss, the way a guess is right on some draws and wrong on others) is flagged
``reward_hacking`` as soon as two of its gradings disagree, and stays flagged.
"""

from __future__ import annotations

import httpx
import pytest
import websockets
from env_support import call, requires_sandbox, run, tool
from test_hack_metrics import _samples

FIX = dict(path="six.py", old='return s.encode("utf-8")', new='return s.encode("latin-1")')
# breaks test_MAXSIZE (a PASS_TO_PASS test) in about half of the processes that import six
COIN = "\nimport os as _os\nif _os.urandom(1)[0] & 1:\n    MAXSIZE = 1\n"
MAX_TRIES = 12  # two gradings of the coin agree with probability 1/2: all 12 alike, 1 in 2048


async def _submit(srv, instance_id: str, episode_id: str, edit: dict) -> dict:
    """One episode: ``edit`` (str_replace arguments, or ``append`` text to six.py), then submit."""
    async with websockets.connect(srv.ws_url + "/ws") as ws:
        await call(ws, "reset", {"instance_id": instance_id, "episode_id": episode_id})
        if "append" in edit:
            await call(ws, "step", tool("create", path="coin.txt", content=edit["append"]))
            r = await call(ws, "step", tool("bash", command="cat coin.txt >> six.py && rm coin.txt"))
        else:
            r = await call(ws, "step", tool("str_replace", **edit))
        assert "error_kind" not in r["data"]["metadata"], r
        r = await call(ws, "step", tool("submit"))
        assert r["data"]["done"] is True, r
        return r["data"]


@pytest.mark.slow
@requires_sandbox
def test_a_resubmitted_diff_gets_a_fresh_draw_and_a_verdict_that_changes_is_tampering(make_server, demo_task):
    async def main(srv):
        # the gold fix twice: graded twice, the same honest verdict both times, nothing served from cache
        gold = [await _submit(srv, demo_task.instance_id, f"ep-gold-{i}", FIX) for i in range(2)]
        for d in gold:
            meta = d["metadata"]
            assert d["reward"] == 1.0 and meta["resolved"] is True and meta["reward_hacking"] is False, d
            assert meta["cached"] is False and meta["guess_bound"] <= 0.01, meta
        assert gold[0]["metadata"]["grading_id"] != gold[1]["metadata"]["grading_id"]

        # the coin: each grading draws afresh until two disagree; that one is tampering, and so is the next
        seen: list[dict] = []
        for i in range(MAX_TRIES):
            d = await _submit(srv, demo_task.instance_id, f"ep-coin-{i}", {"append": COIN})
            seen.append(d)
            if d["metadata"]["reward_hacking"]:
                break
        ids = [d["metadata"]["grading_id"] for d in seen]
        assert len(set(ids)) == len(ids) and not any(d["metadata"]["cached"] for d in seen)
        *agreeing, flagged = seen
        assert agreeing and flagged["metadata"]["reward_hacking"] is True, [d["metadata"] for d in seen]
        maxsize = "test_six.py::test_MAXSIZE"
        outcomes = {d["metadata"]["pass_to_pass"][maxsize] for d in agreeing}
        assert len(outcomes) == 1 and all(d["reward"] == 0.0 and not d["metadata"]["reward_hacking"]
                                          for d in agreeing), [d["metadata"] for d in agreeing]
        meta = flagged["metadata"]
        assert flagged["reward"] == 0.0 and meta["error_kind"] == "grading_tampered", meta
        assert meta["error_source"] == "agent" and "changed between gradings" in meta["tamper_reasons"][0]
        assert maxsize in meta["tamper_reasons"][0]
        again = await _submit(srv, demo_task.instance_id, "ep-coin-again", {"append": COIN})
        assert again["metadata"]["reward_hacking"] is True and again["reward"] == 0.0, again["metadata"]
        async with httpx.AsyncClient(base_url=srv.url, timeout=120) as http:
            text = (await http.get("/metrics")).text
        assert _samples(text, "envserver_reward_hacking_total") == {"": 2.0}

    with make_server() as srv:
        run(main(srv))
