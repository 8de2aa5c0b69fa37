"""The whole replay loop against the fake teacher: exact state, pairs, budget, gating, failures."""

import asyncio
import json

import pytest

from trainer_client.replay import FrozenState, GatingConfig, ReplayOptions, read_trace_files, replay

from support.teacher_double import FakeTeacherServer, Reply
from .replay_support import bash, state, teachers


def canon(x) -> bytes:
    return json.dumps(x, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def by_step(table):
    """Script: table[t][model] -> Reply, where t is read from the number of tool results seen."""
    def script(model, body, n):
        t = sum(1 for m in body["messages"] if m["role"] == "tool")
        return table[t][model]
    return script


def test_teacher_receives_state_messages_and_tools_byte_for_byte(tmp_path):
    states = [state(t, bash(f"cmd {t}")) for t in range(3)]
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(s.model_dump_json() + "\n" for s in states), encoding="utf-8")
    raw_lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    with FakeTeacherServer(lambda m, b, n: Reply.call("bash", command="ls")) as fake:
        asyncio.run(replay(read_trace_files([path]), teachers(fake.base_url)))
        bodies = fake.bodies()
    assert len(bodies) == 9
    by_t = {canon(line["messages"]): line for line in raw_lines}
    for body in bodies:
        line = by_t[canon(body["messages"])]
        assert canon(body["messages"]) == canon(line["messages"])
        assert canon(body["tools"]) == canon(line["tools"])
        assert body["tool_choice"] == "required" and body["max_tokens"] == 256
    assert {canon(b["messages"]) for b in bodies} == set(by_t)


def test_pairs_follow_the_agreement_rule_step_by_step():
    X, Y, Z = {"command": "pytest -q"}, {"command": "ls"}, {"command": "cat a.py"}
    call = lambda a: Reply.call("bash", **a)  # noqa: E731
    table = {
        0: {"t-a": call(X), "t-b": call(X), "t-c": call(X)},        # unanimous vs student Y -> pair
        1: {"t-a": call(X), "t-b": call(Z), "t-c": call(Y)},        # no consensus -> none
        2: {"t-a": call(Y), "t-b": call(Y), "t-c": call(X)},        # agree with student -> none
        3: {"t-a": call(X), "t-b": Reply(status=500), "t-c": call(X)},  # one teacher down -> pair
        4: {"t-a": call(X), "t-b": Reply(content="hmm"), "t-c": call(Z)},  # malformed + split -> none
    }
    states = [state(t, bash("ls")) for t in range(5)] + [state(5, None)]
    with FakeTeacherServer(by_step(table)) as fake:
        res = asyncio.run(replay(states, teachers(fake.base_url)))
    reasons = [s.verdict.reason if s.verdict else None for s in res.steps]
    assert reasons == ["pair", "no_consensus", "agrees_with_student", "pair", "no_consensus", None]
    assert [p.state_id for p in res.pairs] == ["ep-1:0", "ep-1:3"]
    p0, p3 = res.pairs
    assert p0.chosen.arguments == X and p0.rejected == bash("ls") and p0.n_teachers_agreeing == 3
    assert p3.n_teachers_agreeing == 2 and p3.provenance.agreeing == ["t-a", "t-c"]
    assert p3.provenance.teachers == ["t-a", "t-b", "t-c"] and p3.provenance.t == 3
    assert p3.provenance.costs["t-b"] == 0.0 and p3.provenance.costs["t-a"] > 0
    assert p0.messages == states[0].messages and p0.tools == states[0].tools
    s = res.summary
    assert s.errors == {"http_5xx": 1, "no_tool_call": 1} and s.retries == 3
    assert s.pairs_kept == 2 and s.pair_yield == pytest.approx(2 / 5)


@pytest.mark.parametrize("max_usd", [0.0, 0.03, 0.1, 0.25, 10.0])
def test_budget_is_never_exceeded_with_calls_in_flight(max_usd):
    prices = {n: (1e-5, 3e-5) for n in ("t-a", "t-b", "t-c")}
    states = [state(t % 6, bash("ls"), episode=f"ep-{t}") for t in range(24)]
    with FakeTeacherServer(lambda m, b, n: Reply.call("bash", delay=0.05, command="pytest"), prices) as fake:
        tf = teachers(fake.base_url, price_in=1e-5, price_out=3e-5, max_concurrency=8)
        res = asyncio.run(replay(states, tf, ReplayOptions(max_total_usd=max_usd)))
        billed, n_requests = fake.billed_usd, len(fake.requests)
    s = res.summary
    assert billed <= max_usd + 1e-12                       # the server's own bill
    assert s.cost_usd == pytest.approx(billed)
    assert s.budget_peak_committed_usd <= max_usd + 1e-12
    assert s.budget_overruns == 0
    if max_usd == 0.0:
        assert n_requests == 0 and s.errors == {"budget_exhausted": 72}
    elif max_usd < 10:
        assert 0 < n_requests < 72 and s.errors["budget_exhausted"] == 72 - n_requests
    else:
        assert n_requests == 72 and not s.errors


def test_error_site_gating_queries_only_error_steps_and_reports_savings():
    states = [state(t, bash("ls"), error_kind="syntax_error" if t in (2, 4) else None) for t in range(6)]
    with FakeTeacherServer(lambda m, b, n: Reply.call("bash", command="pytest -q")) as fake:
        tf = teachers(fake.base_url)
        gated = asyncio.run(replay(states, tf, ReplayOptions(gating=GatingConfig(mode="error_sites"))))
        n_gated = len(fake.requests)
        full = asyncio.run(replay(states, tf))
    assert n_gated == 6                                    # 2 steps x 3 teachers
    g = gated.summary
    assert (g.steps_queried, g.steps_gated_out) == (2, 4)
    assert [p.provenance.t for p in gated.pairs] == [2, 4]
    assert g.est_cost_saved_method == "observed"
    # the estimate of what the 4 skipped steps would have cost, against what they did cost
    actual_saved = full.summary.cost_usd - g.cost_usd
    assert g.est_cost_saved_by_gating_usd == pytest.approx(actual_saved, rel=0.15)


def test_entropy_gating_reads_per_step_entropy():
    states = [state(0, bash("ls"), entropy=0.2), state(1, bash("ls"), entropy=2.5), state(2, bash("ls"))]
    with FakeTeacherServer(lambda m, b, n: Reply.call("bash", command="pytest")) as fake:
        opts = ReplayOptions(gating=GatingConfig(mode="entropy", entropy_threshold=1.0))
        res = asyncio.run(replay(states, teachers(fake.base_url), opts))
    assert [s.queried for s in res.steps] == [False, True, False]


def test_an_unreachable_teacher_is_recorded_and_the_others_still_pair():
    with FakeTeacherServer(lambda m, b, n: Reply.call("bash", command="pytest")) as fake:
        tf = teachers(fake.base_url)
        dead = tf.teachers[2].model_copy(update={"base_url": "http://127.0.0.1:9/v1"})
        tf = tf.model_copy(update={"teachers": [*tf.teachers[:2], dead]})
        res = asyncio.run(replay([state(1, bash("ls"))], tf))
    assert res.summary.errors == {"transport": 1}
    assert len(res.pairs) == 1 and res.pairs[0].provenance.agreeing == ["t-a", "t-b"]


def test_state_record_round_trips_env_json_without_changes():
    line = state(2, bash("ls")).model_dump_json()
    rec = FrozenState.model_validate_json(line)
    assert canon(rec.messages) == canon(json.loads(line)["messages"])
