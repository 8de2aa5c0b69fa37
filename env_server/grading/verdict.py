"""Cross-check one graded run: the JUnit report, the grader's outcome records, the exit status.

Three witnesses of the same run must agree. The JUnit file is what pytest wrote (and
what code in the test process can rewrite); the channel records are what the
grader's plugin saw each test phase raise, sent on a pipe opened before any project
code ran; the exit status is what the supervisor saw the process return. With a
must-fail canary in the run, an honest run always exits 1. Any disagreement, a
canary with the wrong outcome, or a violation the plugin recorded is tampering.
"""

from __future__ import annotations

import json
from typing import Any

from ..junit import PASSING, Outcome, case_key, outcomes_for
from .canary import Canary

# pytest's exit code when tests ran and some failed (the must-fail canary guarantees one)
TESTS_FAILED = 1


def parse_channel(data: bytes) -> tuple[list[dict[str, Any]], list[str]]:
    """Records of the channel, and problems reading it (a record that is not ours)."""
    records: list[dict[str, Any]] = []
    problems: list[str] = []
    for n, line in enumerate(data.splitlines(), 1):
        try:
            rec = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            problems.append(f"outcome record {n} is not the grader's")
            continue
        if not isinstance(rec, dict) or not isinstance(rec.get("k"), str):
            problems.append(f"outcome record {n} is not the grader's")
            continue
        records.append(rec)
    return records, problems


def _phase_outcome(rec: dict[str, Any]) -> Outcome:
    setup, call, teardown = rec.get("setup"), rec.get("call"), rec.get("teardown")
    if "skip" in (setup, call):
        return "skipped"
    if "xfail" in (setup, call) or (setup == "ok" and call == "raised" and rec.get("xfail_marked")):
        return "xfailed"
    if setup == "ok" and call == "ok" and teardown == "ok":
        return "passed"
    return "error" if setup == "raised" or teardown == "raised" else "failed"


def channel_report(records: list[dict[str, Any]]) -> tuple[dict[str, Outcome], list[str]]:
    """``{case_key: outcome}`` as the plugin saw it (the JUnit report's keys), and conflicts."""
    out: dict[str, Outcome] = {}
    conflicts: list[str] = []
    for rec in records:
        if rec.get("k") != "test" or not isinstance(rec.get("id"), str):
            continue
        key = case_key(rec["id"])
        outcome = _phase_outcome(rec)
        if key in out and out[key] != outcome:
            conflicts.append(f"two outcome records for {rec['id']}")
        out[key] = outcome
    return out, conflicts


def cross_check(summary: dict[str, Any], junit: dict[str, Outcome] | None, channel: bytes,
                canary: Canary, tests: list[str]) -> list[str]:
    """Reasons the run was tampered with (empty: the three witnesses agree)."""
    records, reasons = parse_channel(channel)
    kinds = [r["k"] for r in records]
    reasons += [str(r.get("what")) for r in records if r["k"] == "violation"]
    seen, conflicts = channel_report(records)
    reasons += conflicts
    exit_code = summary.get("exit_code")
    exits = [r for r in records if r["k"] == "exit"]
    if summary.get("changed_files"):
        reasons.append("files the tests must not change were changed: " + ", ".join(summary["changed_files"][:10]))
    if "start" not in kinds:
        reasons.append("the grader's plugin never started")
    if exit_code == 0:
        reasons.append("the test process exited 0 although a canary test must fail")
    if junit is None:
        return reasons
    if len(exits) != 1:
        reasons.append("the test process ended without the grader's exit record")
    else:
        rec = exits[0]
        if rec.get("code") != exit_code:
            reasons.append(f"exit status {exit_code} differs from pytest's result {rec.get('code')}")
        if rec.get("junit_sha256") != summary.get("junit_sha256"):
            reasons.append("the JUnit report changed after pytest returned")
    finished = [r for r in records if r["k"] == "sessionfinish"]
    if exits and not finished:
        reasons.append("pytest returned without finishing its session")
    # every test JUnit calls passing must have passed as the plugin saw it
    claimed = outcomes_for(tests, junit)
    witnessed = outcomes_for(tests, seen)
    for test, outcome in claimed.items():
        if outcome in PASSING and witnessed.get(test) != outcome:
            reasons.append(f"JUnit reports {test} {outcome}; the run saw {witnessed.get(test)}")
    aborted = exit_code not in (TESTS_FAILED,) and not any(o in PASSING for o in claimed.values())
    if not aborted:
        for test, expected in ((canary.must_fail, "failed"), (canary.must_pass, "passed")):
            got = (outcomes_for([test], junit)[test], outcomes_for([test], seen)[test])
            if got != (expected, expected):
                reasons.append(f"canary test {expected_word(expected)}: JUnit {got[0]}, run {got[1]}")
    return reasons


def expected_word(expected: str) -> str:
    return "that must fail did not" if expected == "failed" else "that must pass did not"
