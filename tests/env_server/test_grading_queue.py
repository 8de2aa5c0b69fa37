"""The grading queue (`max_gradings`, `max_waiting_gradings`): a GRPO group's submits on a real server.

With one slot and one place in the queue, three submits at once: one grades, one waits for it, the
third is refused with GRADER_BUSY and `retry_after_s` before anything happens (its episode goes on,
the step is not counted, nothing is graded); sent again it is graded. Through the client library
the refusal never shows: `step` waits and sends the submit again. /metrics counts the refusal.
"""

from __future__ import annotations

import asyncio

import httpx
import websockets
from env_support import call, requires_sandbox, run, tool

from env_client import ClientConfig, EnvGraderBusyError, WsSession

pytestmark = requires_sandbox


def test_a_full_grading_queue_refuses_a_submit_and_loses_nothing(make_server):
    with make_server(max_gradings=1, max_waiting_gradings=1) as srv:
        service = srv.service

        async def main():
            conns = [await websockets.connect(srv.ws_url + "/ws") for _ in range(3)]
            try:
                for ws in conns:
                    assert (await call(ws, "reset", {}))["type"] == "observation"
                    assert (await call(ws, "step", tool("bash", command="echo edit >> README.md")))["type"] == \
                        "observation"
                first = asyncio.create_task(call(conns[0], "step", tool("submit")))
                while service.gradings.running < 1:
                    await asyncio.sleep(0.01)
                second = asyncio.create_task(call(conns[1], "step", tool("submit")))
                while service.gradings.waiting < 1:
                    await asyncio.sleep(0.01)
                refused = await call(conns[2], "step", tool("submit"))
                assert refused["type"] == "error", refused
                data = refused["data"]
                assert data["code"] == "GRADER_BUSY" and data["retry_after_s"] >= 1, data
                assert "submit again" in data["message"]
                # nothing happened: the episode goes on, its step count is unchanged
                episode = [s.episode for s in service.sessions.values()][2]
                assert episode.step_count == 1 and not episode.done
                later = await call(conns[2], "step", tool("bash", command="echo still here"))
                assert later["data"]["observation"]["output"].strip() == "still here", later
                graded = await asyncio.gather(first, second)
                for reply in graded:
                    assert reply["type"] == "observation" and reply["data"]["done"], reply
                    assert reply["data"]["reward"] == 0.0, reply  # README.md edited: no fix
                again = await call(conns[2], "step", tool("submit"))
                assert again["type"] == "observation" and again["data"]["done"], again
                assert episode.step_count == 3
            finally:
                await asyncio.gather(*(ws.close() for ws in conns))

        run(main())
        metrics = httpx.get(srv.url + "/metrics", timeout=120).text
        assert "envserver_grader_busy_total 1.0" in metrics, metrics
        assert service.gradings.running == service.gradings.waiting == 0


def test_the_client_library_sends_a_refused_submit_again(make_server):
    with make_server(max_gradings=1, max_waiting_gradings=0) as srv:
        service = srv.service

        async def main():
            sessions = [WsSession(srv.url) for _ in range(2)]
            patient = WsSession(srv.url)
            impatient = WsSession(srv.url, ClientConfig(grader_busy_wait_s=0))
            try:
                for s in (*sessions, patient, impatient):
                    await s.__aenter__()
                    await s.reset()
                holder = asyncio.create_task(sessions[0].call_tool("submit", {}))
                while service.gradings.running < 1:
                    await asyncio.sleep(0.01)
                try:
                    await impatient.call_tool("submit", {})
                except EnvGraderBusyError as exc:  # no wait allowed: the refusal comes through, typed
                    assert exc.code == "GRADER_BUSY" and exc.retry_after_s >= 1
                else:
                    raise AssertionError("a submit beyond a full queue was not refused")
                obs = await patient.call_tool("submit", {})  # refused at first, sent again: graded
                assert obs["done"] and obs["reward"] == 0.0, obs
                assert (await holder)["done"]
            finally:
                for s in (*sessions, patient, impatient):
                    await s.close()

        run(main())
        assert service.gradings.refused >= 2  # the impatient one, and the patient one at least once
