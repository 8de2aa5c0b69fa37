"""Blame is exact: server faults are `infra` (logged), the agent's own bad arguments are `agent`;
a trace never records a diff it could not read (state(t) says the diff is unknown).

The episodes run on the real demo task in the real sandbox; the faults that a healthy sandbox
never produces (a failed diff read, a malformed runtime reply) are injected by replacing one
method of the live sandbox object: a named test double of that one failure.
"""

from __future__ import annotations

import logging

from env_support import requires_sandbox, run

from contract import CallToolAction
from env_server.episode import Episode, EpisodeConfig
from env_server.traces import TraceStore, state_at
from sandbox import SandboxConfig, SandboxError

pytestmark = requires_sandbox


def _bash(command: str) -> CallToolAction:
    return CallToolAction(tool_name="bash", arguments={"command": command})


async def _start(demo_task, tmp_path, name: str) -> Episode:
    ep, _ = await Episode.start(name, demo_task, TraceStore(tmp_path), SandboxConfig(), EpisodeConfig())
    return ep


def test_a_server_fault_is_infra_and_logged_not_the_agents_invalid_arguments(demo_task, tmp_path, caplog):
    async def main():
        ep = await _start(demo_task, tmp_path, "ep-fault")
        try:
            async def malformed_reply(*args, **kwargs):  # double: a runtime reply the server cannot parse
                raise ValueError("exit_code 'x' is not an integer")
            ep.sandbox.run = malformed_reply
            with caplog.at_level(logging.ERROR, logger="env_server.episode"):
                obs = await ep.step(_bash("ls"))
            return obs
        finally:
            await ep.close()

    obs = run(main())
    meta = obs.metadata
    assert (meta["error_kind"], meta["error_source"], meta["hint_template_key"]) == (
        "internal_error", "infra", "infra.internal")
    assert obs.done and "ValueError" in meta["error_message"]
    assert any("call failed inside the server" in r.getMessage() and r.exc_info for r in caplog.records)


def test_the_agents_own_bad_arguments_stay_the_agents(demo_task, tmp_path):
    async def main():
        ep = await _start(demo_task, tmp_path, "ep-args")
        try:
            return await ep.step(CallToolAction(tool_name="view", arguments={"path": "six.py", "start_line": 0}))
        finally:
            await ep.close()

    meta = run(main()).metadata
    assert (meta["error_kind"], meta["error_source"]) == ("invalid_arguments", "agent")


def test_an_unreadable_diff_is_recorded_as_unknown_never_as_unchanged(demo_task, tmp_path):
    async def main():
        ep = await _start(demo_task, tmp_path, "ep-diff")
        try:
            await ep.step(_bash("echo one >> six.py"))  # t=1: diff recorded
            real_diff = ep.sandbox.diff_exact

            async def failing_diff(patch_limit):  # double: the diff read fails once
                raise SandboxError("diff_failed: simulated")
            ep.sandbox.diff_exact = failing_diff
            await ep.step(_bash("echo two >> six.py"))  # t=2: diff unknown
            ep.sandbox.diff_exact = real_diff
            await ep.step(_bash("true"))  # t=3: bash that changes nothing (files_changed False)
            await ep.step(_bash("echo three >> six.py"))  # t=4: diff read again
            return ep.trace.records
        finally:
            await ep.close()

    records = run(main())
    assert records[2]["diff"] is None and "simulated" in records[2]["diff_error"]
    assert "+one" in state_at(records, 1).diff
    assert state_at(records, 2).diff is None and state_at(records, 3).diff is None  # not the stale t=1 diff
    latest = state_at(records, 4).diff
    assert "+one" in latest and "+two" in latest and "+three" in latest
