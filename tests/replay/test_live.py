"""The live replay loop against a real env server on loopback and teachers behind real HTTP
(support/teacher_double.py: a named test double of an OpenAI-compatible server)."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from trainer_client.replay.agreement import AgreementRule
from trainer_client.replay.config import TeachersFile
from trainer_client.replay.during_training import FinishedEpisode, LiveReplay
from trainer_client.replay.pair_mining import ReplayOptions
from trainer_client.replay.verify import ForkVerifier

from support.teacher_double import FakeTeacherServer, Reply
from .test_e2e import env_url, rollout, teacher_script  # noqa: F401 - env_url is a fixture

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("bwrap")]


def teachers(base_url: str, price: float = 1e-6) -> TeachersFile:
    return TeachersFile.model_validate({"teachers": [
        {"name": n, "model": n, "base_url": base_url, "price_in": price, "price_out": 2 * price, "max_tokens": 64}
        for n in ("t-a", "t-b", "t-c")]})


def test_finished_episodes_become_pairs_in_the_background(env_url):  # noqa: F811
    episodes = [asyncio.run(rollout(env_url)) for _ in range(2)]
    with FakeTeacherServer(teacher_script) as fake:
        loop = LiveReplay(teachers(fake.base_url), ReplayOptions(rule=AgreementRule(min_agree=2)),
                          states_per_episode=4)
        loop.start()
        try:
            started = time.monotonic()
            loop.submit([FinishedEpisode(ep, f"ws://{env_url.split('://')[1]}/mux", train_step=7) for ep in episodes])
            assert time.monotonic() - started < 0.5  # submit never waits for teachers
            assert loop.wait_idle(600)
            pairs = loop.drain()
        finally:
            loop.close()
    assert loop.drain() == []
    # the same four states per episode as the offline replay: t=1 and t=2 give pairs (error site first)
    # twin states of the two identical rollouts are deduplicated by normalization, as offline
    assert sorted(p.provenance.t for p in pairs) == [1, 2]
    for p in pairs:
        assert p.provenance.source == "live" and p.provenance.train_step == 7
        assert p.provenance.teachers == ["t-a", "t-b", "t-c"] and len(p.provenance.agreeing) >= 2
        assert p.provenance.verification == "agreement"
    m = loop.metrics()
    assert m["replay/episodes_replayed"] == 2 and m["replay/states_queried"] == 8
    assert m["replay/pairs_mined"] == len(pairs) and m["replay/spent_usd"] > 0


def test_error_sites_are_replayed_first(env_url):  # noqa: F811
    ep = asyncio.run(rollout(env_url))
    with FakeTeacherServer(teacher_script) as fake:
        loop = LiveReplay(teachers(fake.base_url), states_per_episode=1)
        loop.start()
        try:
            loop.submit([FinishedEpisode(ep, env_url, train_step=0)])
            assert loop.wait_idle(600)
            bodies = fake.bodies()
        finally:
            loop.close()
    # one state per episode: t=2, the step after the failing `cat nope.txt` (an error site), not t=0
    assert len(bodies) == 3
    assert {sum(m["role"] == "tool" for m in b["messages"]) for b in bodies} == {2}


def test_the_budget_ceiling_holds_across_rounds(env_url):  # noqa: F811
    episodes = [asyncio.run(rollout(env_url)) for _ in range(3)]
    with FakeTeacherServer(teacher_script) as fake:
        # worst case of one call ~ (prompt bytes + 64 output tokens) x price: a few cents at 1e-5/token;
        # a ceiling of 0.05 USD admits the first round's calls only in part
        loop = LiveReplay(teachers(fake.base_url, price=1e-5), states_per_episode=4, max_total_usd=0.05)
        loop.start()
        try:
            for ep in episodes:  # one round per episode
                loop.submit([FinishedEpisode(ep, env_url, train_step=0)])
                assert loop.wait_idle(600)
            calls = len(fake.bodies())
        finally:
            loop.close()
    assert 0 < loop.spent_usd <= 0.05
    assert calls < 3 * 4 * 3  # some calls were refused for the budget
    assert loop.counts["states_over_budget"] > 0 or loop.counts["teacher_calls_failed"] > 0


def test_state_dict_carries_spend_queue_and_undelivered_pairs(env_url):  # noqa: F811
    ep = asyncio.run(rollout(env_url))
    with FakeTeacherServer(teacher_script) as fake:
        loop = LiveReplay(teachers(fake.base_url), ReplayOptions(rule=AgreementRule(min_agree=2)))
        loop.start()
        try:
            loop.submit([FinishedEpisode(ep, env_url, train_step=3)])
            assert loop.wait_idle(600)
        finally:
            loop.close()
    loop.submit([FinishedEpisode("not-run-yet", env_url, train_step=4)])  # closed: stays queued
    saved = json.loads(json.dumps(loop.state_dict()))  # plain JSON: what a checkpoint holds
    restored = LiveReplay(teachers("http://127.0.0.1:9"))
    restored.load_state_dict(saved)
    assert restored.spent_usd == loop.spent_usd > 0
    assert restored.metrics()["replay/pending_episodes"] == 1
    assert restored.replica_url("not-run-yet") == env_url
    assert [p.state_id for p in restored.drain()] == [p.state_id for p in loop.drain()] != []


SIX_BUG, SIX_FIX = '    def b(s):\n        return s.encode("utf-8")', '    def b(s):\n        return s.encode("latin-1")'
SIX_STUDENT = [("bash", {"command": "ls"}), ("bash", {"command": "cat nope.txt"}),
               ("view", {"path": "six.py", "start_line": 1, "end_line": 5}), ("bash", {"command": "echo done"})]


def fix_or_look(model: str, body: dict, n: int) -> Reply:
    """After the failing `cat nope.txt` the teacher proposes the real fix; elsewhere a harmless look."""
    t = sum(1 for m in body["messages"] if m["role"] == "tool")
    if t == 2:
        return Reply.call("str_replace", path="six.py", old=SIX_BUG, new=SIX_FIX)
    return Reply.call("bash", command="git status")


@pytest.fixture(scope="module")
def six_url(tmp_path_factory):
    from support.servers import run_server

    from env_server.config import ServerConfig
    from task_factory.demo_task import demo_tasks_file
    from verifier.task import load_tasks

    config = ServerConfig(tasks_path=demo_tasks_file(), data_dir=tmp_path_factory.mktemp("six-data"))
    with run_server(config, load_tasks(demo_tasks_file())) as server:
        yield server.url


def test_fork_verification_keeps_only_actions_graded_better(six_url):
    env_url = six_url
    ep = asyncio.run(rollout(env_url, "six__demo-1", SIX_STUDENT))
    with FakeTeacherServer(fix_or_look) as fake:
        loop = LiveReplay(TeachersFile.model_validate({"teachers": [
            {"name": "t-a", "model": "t-a", "base_url": fake.base_url, "price_in": 0, "price_out": 0}]}),
            ReplayOptions(rule=AgreementRule(min_agree=1)), states_per_episode=4)
        loop.verifier = ForkVerifier(loop.replica_url)
        loop.start()
        try:
            loop.submit([FinishedEpisode(ep, env_url, train_step=1)])
            assert loop.wait_idle(600)
            pairs = loop.drain()
        finally:
            loop.close()
    # t=0..3 were all queried; only at t=2 did the teacher's action, executed in a fork and graded by
    # the hidden tests, beat the student's (1.0 vs 0.0): the other teacher actions scored the same
    assert [p.provenance.t for p in pairs] == [2], sorted(loop.counts.items())
    prov = pairs[0].provenance
    assert prov.verification == "fork" and prov.rewards == {"student": 0.0, "t-a": 1.0}
    assert set(prov.forks) == {"student", "t-a"} and len(set(prov.forks.values())) == 2
    assert pairs[0].chosen.tool_name == "str_replace" and pairs[0].chosen.arguments["new"] == SIX_FIX
    assert (pairs[0].rejected.tool_name, pairs[0].rejected.arguments) == SIX_STUDENT[2]
    assert loop.verifier.forks_opened == 8 and loop.verifier.fork_failures == 0
    assert loop.counts["verdicts/not_better"] == 3
    # the forks are episodes of their own on the server, each with its trace and its fork_of
    with httpx.Client(base_url=env_url, timeout=120) as http:
        listed = {e["episode_id"] if isinstance(e, dict) else e for e in http.get("/episodes").json()["episodes"]}
    assert set(prov.forks.values()) <= listed
