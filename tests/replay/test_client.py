"""TeacherClient against the fake teacher: retries, backoff, malformed answers, limits, secrets."""

import asyncio
import logging
import time

import pytest

from trainer_client.replay.budget import Budget
from trainer_client.replay.client import TeacherClient, retry_after_seconds

from support.teacher_double import FakeTeacherServer, Reply
from .replay_support import bash, state, teachers

S = state(2, bash("ls"))


def ask(fake, script_state=S, **kw):
    tf = teachers(fake.base_url, names=("t-a",), **kw)

    async def go():
        client = TeacherClient(tf.teachers[0], tf.retry, Budget())
        try:
            return await client.ask(script_state)
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_success_records_action_tokens_cost_latency():
    with FakeTeacherServer(lambda m, b, n: Reply.call("bash", delay=0.1, command="pytest -q")) as fake:
        rec = ask(fake)
    assert rec.ok and rec.error is None and rec.attempts == 1
    assert rec.action == bash("pytest -q")
    assert rec.prompt_tokens > 0 and rec.completion_tokens > 0
    assert rec.cost_usd == pytest.approx(rec.prompt_tokens * 1e-6 + rec.completion_tokens * 2e-6)
    assert rec.latency_s >= 0.1


def test_5xx_is_retried_then_succeeds():
    def script(m, b, n):
        return Reply(status=503) if n < 2 else Reply.call("bash", command="ls")
    with FakeTeacherServer(script) as fake:
        rec = ask(fake)
        assert len(fake.requests) == 3
    assert rec.ok and rec.attempts == 3 and rec.action == bash("ls")


def test_429_retry_after_is_honoured():
    def script(m, b, n):
        return Reply(status=429, retry_after="1") if n == 0 else Reply.call("bash", command="ls")
    with FakeTeacherServer(script) as fake:
        t0 = time.monotonic()
        rec = ask(fake)
        elapsed = time.monotonic() - t0
    assert rec.ok and rec.attempts == 2
    assert elapsed >= 1.0          # backoff alone would be <= 0.05 s


def test_persistent_failure_is_recorded_after_max_retries():
    with FakeTeacherServer(lambda m, b, n: Reply(status=500)) as fake:
        rec = ask(fake)
        assert len(fake.requests) == 4
    assert not rec.ok and rec.error == "http_5xx" and rec.attempts == 4 and rec.cost_usd == 0


def test_4xx_is_not_retried():
    with FakeTeacherServer(lambda m, b, n: Reply(status=400)) as fake:
        rec = ask(fake)
        assert len(fake.requests) == 1
    assert rec.error == "http_4xx"


def test_timeout_is_retried_and_charged_worst_case():
    def script(m, b, n):
        return Reply.call("bash", delay=1.0, command="ls") if n == 0 else Reply.call("bash", command="ls")
    with FakeTeacherServer(script) as fake:
        rec = ask(fake, timeout=0.3)
    assert rec.ok and rec.attempts == 2 and rec.cost_estimated
    assert rec.cost_usd > rec.prompt_tokens * 1e-6 + rec.completion_tokens * 2e-6


@pytest.mark.parametrize("reply, kind", [
    (Reply(raw_body="{not json"), "malformed_json"),
    (Reply(raw_body='{"choices": []}'), "malformed_json"),
    (Reply(content="I would run the tests."), "no_tool_call"),
    (Reply(tool_name="bash", arguments='{"command": "ls"'), "bad_arguments"),
    (Reply(tool_name="bash", arguments='["ls"]'), "bad_arguments"),
    (Reply(tool_name="rm_rf", arguments={"x": 1}), "unknown_tool"),
])
def test_malformed_answers_are_recorded_not_raised(reply, kind):
    with FakeTeacherServer(lambda m, b, n: reply) as fake:
        rec = ask(fake)
        assert len(fake.requests) == 1
    assert not rec.ok and rec.action is None and rec.error == kind and rec.error_detail


def test_missing_usage_is_charged_worst_case():
    r = Reply.call("bash", command="ls")
    r.usage = False
    with FakeTeacherServer(lambda m, b, n: r) as fake:
        rec = ask(fake)
    assert rec.ok and rec.cost_estimated and rec.cost_usd > 256 * 2e-6


def test_concurrency_limit_is_respected():
    tf = None
    with FakeTeacherServer(lambda m, b, n: Reply.call("bash", delay=0.2, command="ls")) as fake:
        tf = teachers(fake.base_url, names=("t-a",), max_concurrency=2)

        async def go():
            client = TeacherClient(tf.teachers[0], tf.retry, Budget())
            try:
                return await asyncio.gather(*(client.ask(state(i, bash("ls"))) for i in range(6)))
            finally:
                await client.aclose()

        recs = asyncio.run(go())
        assert fake.max_in_flight["t-a"] == 2
    assert all(r.ok for r in recs)


def test_api_key_is_sent_but_never_recorded_or_logged(monkeypatch, caplog, capsys):
    secret = "sk-test-SECRET-0123456789"
    monkeypatch.setenv("FAKE_TEACHER_KEY", secret)
    def script(m, b, n):
        return Reply(status=500, echo_auth=True) if n == 0 else Reply(status=401, echo_auth=True)
    with caplog.at_level(logging.DEBUG), FakeTeacherServer(script) as fake:
        rec = ask(fake, api_key_env="FAKE_TEACHER_KEY")
        assert fake.requests[0].headers["authorization"] == f"Bearer {secret}"
    out = capsys.readouterr()
    assert secret not in rec.model_dump_json() + caplog.text + out.out + out.err
    assert rec.error == "http_4xx" and "Bearer ***" in rec.error_detail


def test_missing_api_key_env_fails_fast(monkeypatch):
    from trainer_client.replay import ReplayConfigError
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    tf = teachers("http://127.0.0.1:9/v1", names=("t-a",), api_key_env="NO_SUCH_KEY_VAR")
    with pytest.raises(ReplayConfigError, match="NO_SUCH_KEY_VAR"):
        tf.teachers[0].api_key()


def test_retry_after_parsing():
    assert retry_after_seconds("3") == 3.0
    assert retry_after_seconds(None) is None and retry_after_seconds("soon") is None
    assert 0 <= retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
