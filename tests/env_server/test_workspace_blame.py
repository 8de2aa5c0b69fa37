"""Nothing the workspace holds can produce `infra` (issue 33, guarantee 4 of docs/grading.md).

Real episodes of the demo task on the bwrap and docker backends: the agent's own ``bash`` leaves
one hostile workspace state (an embedded repository, a .gitattributes that re-encodes, an
unreadable file, a FIFO, a path past PATH_MAX, ...), then submits. Without the fix the reward is
0 and never charged to the infrastructure (masked out of training); with the gold fix beside all
that junk the reward is 1.0 (a correct fix is never lost because of junk), and what the diff left
out is named (``metadata.unread``). A workspace git cannot read at all is the agent's zero with one
line naming why. Every step's trace diff is read the same way and a step never crashes; a fork of
such a step restores what the diff holds.
"""

from __future__ import annotations

import asyncio
import shlex

import pytest
from env_support import requires_sandbox, run
from support.diff_states import HELD, STATES  # the same states, sandbox-level

from contract import CallToolAction
from env_server.episode import Episode, EpisodeConfig
from env_server.traces import TraceStore, fork_point
from sandbox import DiffUnreadable, DockerBackend, SandboxConfig

pytestmark = [requires_sandbox, pytest.mark.timeout(900)]

# States git cannot read at all: the agent's zero, with the reason in the error.
FATAL = {
    "fifo .gitignore at the top": ("mkfifo .gitignore", "/workspace/.gitignore is a FIFO"),
    "/workspace unreadable": ("chmod 000 /workspace", "/workspace itself cannot be read"),
}


def _bash(command: str) -> CallToolAction:
    return CallToolAction(tool_name="bash", arguments={"command": command})


SUBMIT = CallToolAction(tool_name="submit", arguments={})


@pytest.fixture(scope="module", params=["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request) -> str:
    if request.param == "docker":
        from support.requirements import missing

        try:
            from sandbox.docker import docker_client

            docker_client(None).images.get(DockerBackend().image)
        except Exception as exc:  # no SDK, no engine, no image
            missing("docker", f"the docker backend is unavailable: {exc}")
    return request.param


def _gold(task) -> str:
    return f"printf %s {shlex.quote(task.patch)} > /tmp/gold.patch && git apply /tmp/gold.patch"


async def _episode(task, backend: str, store: TraceStore, name: str, commands: list[str]) -> tuple:
    """reset, one bash call per command, submit: (each bash observation, the submit's, the trace)."""
    ep, _ = await Episode.start(name, task, store, SandboxConfig(backend=backend), EpisodeConfig(grade_timeout_s=180))
    try:
        bash = [await ep.step(_bash(cmd)) for cmd in commands]
        return bash, await ep.step(SUBMIT), ep.trace.records
    finally:
        await ep.close()


async def _all(jobs: dict, limit: int = 3) -> dict:
    sem = asyncio.Semaphore(limit)

    async def one(job):
        async with sem:
            return await job

    return dict(zip(jobs, await asyncio.gather(*(one(j) for j in jobs.values()))))


def test_no_hostile_state_turns_a_zero_into_infra(backend, demo_task, tmp_path):
    store = TraceStore(tmp_path)
    every = {**{k: (v[0], v[1]) for k, v in STATES.items()}, **{k: (v[0], None) for k, v in HELD.items()}}

    async def main():
        jobs = {name: _episode(demo_task, backend, store, f"state-{i}", [cmd])
                for i, (name, (cmd, _)) in enumerate(every.items())}
        jobs.update({name: _episode(demo_task, backend, store, f"fatal-{i}", [cmd])
                     for i, (name, (cmd, _)) in enumerate(FATAL.items())})
        return await _all(jobs)

    results = run(main())
    for name, (bash, sub, records) in results.items():
        meta = sub.metadata
        assert bash[0].metadata.get("error_kind") is None, (name, bash[0].output)
        assert sub.done and sub.reward == 0.0, (name, sub.reward, meta)
        assert "infra" not in (meta.get("error_source"), meta.get("grade_error_source")), (name, meta)
        assert not str(meta.get("error_kind", "")).startswith("sandbox"), (name, meta)
        if name in FATAL:
            assert meta["grade_error_source"] == "agent", (name, meta)
            assert f"could not read the workspace diff: {FATAL[name][1]}" in meta["grade_error"], (name, meta)
            assert "\n" not in meta["grade_error"]
            assert "diff_error" in records[1] and FATAL[name][1] in records[1]["diff_error"], records[1]
        else:
            left_out = every[name][1]
            if left_out is not None:
                assert any(left_out in u for u in meta["unread"]), (name, meta.get("unread"))
                assert any(left_out in u for u in records[1]["unread"]), (name, records[1])
            assert "diff_error" not in records[1], (name, records[1])


def test_the_gold_fix_beside_every_kind_of_junk_still_resolves(backend, demo_task, tmp_path):
    store = TraceStore(tmp_path)
    junk = " && ".join(cmd for cmd, _ in STATES.values())

    async def main():
        return await _all({
            "all junk": _episode(demo_task, backend, store, "gold-junk", [_gold(demo_task), junk,
                                                                           HELD["names with a newline and bytes "
                                                                                "that are not UTF-8"][0]]),
            "chmod 000 junk": _episode(demo_task, backend, store, "gold-chmod",
                                       [_gold(demo_task) + " && echo junk > junk.log && chmod 000 junk.log"]),
        })

    results = run(main())
    for name, (bash, sub, _) in results.items():
        assert all(b.metadata.get("error_kind") is None for b in bash), (name, [b.output for b in bash])
        assert sub.reward == 1.0, (name, sub.reward, sub.metadata)
    unread = results["all junk"][1].metadata["unread"]
    assert len(unread) >= len(STATES) - 1, unread  # the summary line lists the first ones
    assert "Left out of the submission" in results["all junk"][1].output
    assert any("junk.log (unreadable file)" in u for u in results["chmod 000 junk"][1].metadata["unread"])


def test_a_fork_of_a_hostile_step_restores_what_the_diff_holds(backend, demo_task, tmp_path):
    store = TraceStore(tmp_path)
    state = STATES["embedded repository without a commit"][0] + " && " + STATES["unreadable file"][0]

    async def main():
        bash, sub, records = await _episode(demo_task, backend, store, "orig", [_gold(demo_task) + " && " + state])
        point = fork_point(records, 1)
        ep, _ = await Episode.start("fork", demo_task, store, SandboxConfig(backend=backend), EpisodeConfig(),
                                    fork=point)
        try:
            probe = await ep.step(_bash("grep -c latin-1 six.py; ls vendor junk.txt 2>&1 | head -3"))
            return sub, records, probe, await ep.step(SUBMIT)
        finally:
            await ep.close()

    sub, records, probe, forked = run(main())
    assert sub.reward == 1.0 and any("vendor/empty" in u for u in records[1]["unread"]), (sub.metadata, records[1])
    assert probe.output.splitlines()[0] != "0", probe.output  # the fix came through the fork
    assert "No such file" in probe.output  # what the diff could not hold did not
    assert forked.reward == 1.0, forked.metadata


def test_a_diff_the_runtime_cannot_read_is_the_agents_once_it_changed_the_workspace(demo_task, tmp_path):
    """Before any tool call could change the workspace, an unreadable diff is the server's (infra);
    after one, the workspace is the agent's doing. The one failure is a named test double."""
    async def main():
        out = {}
        for name, steps in (("untouched", []), ("changed", [_bash("true")])):
            ep, _ = await Episode.start(f"dbl-{name}", demo_task, TraceStore(tmp_path), SandboxConfig(),
                                        EpisodeConfig())
            try:
                for action in steps:
                    await ep.step(action)

                async def unreadable(patch_limit):  # double: the runtime could not read the diff
                    raise DiffUnreadable("git add failed: simulated")
                ep.sandbox.diff_exact = unreadable
                out[name] = await ep.step(SUBMIT)
            finally:
                await ep.close()
        return out

    out = run(main())
    assert out["untouched"].metadata["grade_error_source"] == "infra"
    assert out["untouched"].metadata["error_source"] == "infra"  # a sandbox error: masked out of training
    assert out["changed"].metadata["grade_error_source"] == "agent" and out["changed"].reward == 0.0
    assert "error_source" not in out["changed"].metadata
    assert "simulated" in out["changed"].metadata["grade_error"]
