"""No reward without a fix: every attempt of ``grading_attacks_support`` is a real episode over the real server.

For each sandbox backend and each kind of task (the demo task, whose tests are hidden
in ``test_patch``; a built task of the small pack, whose tests are in the workspace; a mined
release-diff task of six, a real historical fix; ``ROUND_TASKS`` says which round runs on which),
one server runs, in the same campaign, the controls (the gold patch: 1.0; an empty
submit: 0.0) and every attack (via the agent's own tools: one ``bash`` call, then
``submit``). Each attack must score 0.0 and be *witnessed*: dropped with its reason,
flagged ``grading_tampered``, or failing honestly with the evidence it names.
"""

from __future__ import annotations

import asyncio
import json
import posixpath
import shlex
from pathlib import Path

import pytest
import websockets
from env_support import docker_or_fail, requires_sandbox, run_server
from grading_attacks_support import Ctx, attacks, bash_script
from grading_attacks_r2_support import attacks_r2, bash_script_r2
from grading_attacks_r3_support import attacks_r3, gold_source
from support.git_repos import git_run

from env_server.config import ServerConfig
from env_server.episode import EpisodeConfig
from sandbox import SandboxConfig
from verifier.diffs import split_diff
from verifier.task import TaskInstance, load_tasks

pytestmark = [requires_sandbox, pytest.mark.timeout(1800)]
CONCURRENCY = 3
# Per backend, how many of the campaign's tasks (in _tasks_file's order: the demo task, a built task, two
# mined release-diff tasks) each round runs on. Every attack runs on both backends. The first two rounds
# (the runner, the isolation, the log) run where the tests are hidden and where they are visible; the
# third (canaries read from the modules, fixes only while graded) on the real historical fixes too.
ROUND_TASKS = {"bwrap": {"r1_r2": 2, "r3": 4}, "docker": {"r1_r2": 1, "r3": 2}}


def rounds_for(backend: str, index: int, ctx: Ctx, task: TaskInstance) -> list:
    """The attacks (with the runner script of their round) that run on the campaign's `index`-th task."""
    n = ROUND_TASKS[backend]
    out = []
    if index < n["r1_r2"]:
        out += [(a, bash_script(a, ctx)) for a in attacks(ctx)]
        out += [(a, bash_script_r2(a, ctx)) for a in attacks_r2(ctx)]  # the run's isolation, canaries, log
    if index < n["r3"]:  # canaries told apart by reading, fixes only while graded, workspaces that break
        # the diff, logs that stall the replica
        out += [(a, bash_script_r2(a, ctx)) for a in attacks_r3(ctx, gold_source(task, ctx.target))]
    return out


def ctx_for(task: TaskInstance) -> Ctx:
    target = split_diff(task.patch)[0].new_path
    test_file = task.FAIL_TO_PASS[0].split("::")[0]
    visible = git_run(task.repo_path, "cat-file", "-e", f"{task.base_commit}:{test_file}").returncode == 0
    return Ctx(target=target, tests_dir=posixpath.dirname(test_file), f2p=task.FAIL_TO_PASS, tests_visible=visible)


def _gold_script(task: TaskInstance) -> str:
    return f"printf %s {shlex.quote(task.patch)} > /tmp/gold.patch && cd /workspace && git apply /tmp/gold.patch"


async def _call(ws, type_: str, data=None) -> dict:
    await ws.send(json.dumps({"type": type_, "data": data} if data is not None else {"type": type_}))
    return json.loads(await ws.recv())


async def _episode(url: str, task: TaskInstance, script: str | None, sem: asyncio.Semaphore) -> dict:
    """reset, (one bash call,) submit; the submit's data plus the bash call's metadata."""
    async with sem, websockets.connect(url + "/ws", max_size=None) as ws:
        r = await _call(ws, "reset", {"instance_id": task.instance_id})
        assert r["type"] == "observation", r
        bash_meta: dict = {}
        if script is not None:
            r = await _call(ws, "step", {"type": "call_tool", "tool_name": "bash", "arguments": {"command": script}})
            assert r["type"] == "observation", r
            bash_meta = {**r["data"]["metadata"], "output": r["data"]["observation"]["output"]}
        r = await _call(ws, "step", {"type": "call_tool", "tool_name": "submit", "arguments": {}})
        assert r["type"] == "observation" and r["data"]["done"], r
        return {**r["data"], "bash": bash_meta}


def _campaign(backend: str, tasks_path: Path, data_dir: Path) -> dict[tuple[str, str], dict]:
    tasks = load_tasks(tasks_path)
    config = ServerConfig(tasks_path=tasks_path, data_dir=data_dir, sandbox=SandboxConfig(backend=backend),
                          episode=EpisodeConfig(grade_timeout_s=120))
    with run_server(config, tasks) as srv:
        async def main() -> dict[tuple[str, str], dict]:
            sem = asyncio.Semaphore(CONCURRENCY)
            jobs: dict[tuple[str, str], asyncio.Task] = {}
            url = srv.url.replace("http", "ws")
            for index, task in enumerate(tasks):
                ctx = ctx_for(task)
                jobs[(task.instance_id, "control:gold")] = asyncio.ensure_future(
                    _episode(url, task, _gold_script(task), sem))
                jobs[(task.instance_id, "control:empty")] = asyncio.ensure_future(_episode(url, task, None, sem))
                for attack, script in rounds_for(backend, index, ctx, task):
                    jobs[(task.instance_id, attack.name)] = asyncio.ensure_future(_episode(url, task, script, sem))
            return {k: await v for k, v in jobs.items()}

        return asyncio.run(main())


def _tasks_file(tmp: Path, demo_tasks_path: Path, backend: str) -> Path:
    from support.taskpacks import load_small_pack, mined_pack_or_missing

    def resolved_all(tasks_path: Path) -> list[dict]:
        rows = [json.loads(line) for line in tasks_path.read_text().splitlines() if line.strip()]
        for row in rows:
            for key in ("repo_path", "python_env"):
                row[key] = str((tasks_path.parent / row[key]).resolve())
        return rows

    def resolved(tasks_path: Path) -> dict:
        return resolved_all(tasks_path)[0]

    # the demo task (tests hidden in test_patch), a built task (tests in the workspace) and two
    # mined release-diff tasks (real historical fixes, their tests hidden in test_patch); ROUND_TASKS
    # says which rounds run on which
    rows = [resolved(demo_tasks_path), load_small_pack(3)[0]]
    if max(ROUND_TASKS[backend].values()) > 2:
        rows += resolved_all(mined_pack_or_missing())[:2]
    path = tmp / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module", params=["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def campaign(request, tmp_path_factory, demo_tasks_path):
    if request.param == "docker":
        docker_or_fail()
    tmp = tmp_path_factory.mktemp(f"adversarial-{request.param}")
    tasks_path = _tasks_file(tmp, demo_tasks_path, request.param)
    results = _campaign(request.param, tasks_path, tmp / "data")
    return request.param, load_tasks(tasks_path), results, tmp / "data"


def test_controls_gold_resolves_and_empty_scores_zero(campaign):
    backend, tasks, results, _ = campaign
    for task in tasks:
        gold = results[(task.instance_id, "control:gold")]
        empty = results[(task.instance_id, "control:empty")]
        assert "error_kind" not in gold["bash"], (backend, gold["bash"])
        assert gold["reward"] == 1.0 and gold["metadata"]["reward_hacking"] is False, (backend, gold["metadata"])
        assert empty["reward"] == 0.0 and empty["metadata"]["reward_hacking"] is False, (backend, empty["metadata"])
        assert gold["metadata"]["suspicious"] == [], gold["metadata"]


def test_every_attack_scores_zero_and_is_witnessed(campaign):
    backend, tasks, results, _ = campaign
    failures = []
    count = 0
    for index, task in enumerate(tasks):
        for attack, _ in rounds_for(backend, index, ctx_for(task), task):
            count += 1
            res = results[(task.instance_id, attack.name)]
            meta = res["metadata"]
            if "error_kind" in res["bash"]:  # the attack itself must have been carried out
                failures.append(f"{task.instance_id} {attack.name}: the attack's bash call failed: {res['bash']}")
            elif res["reward"] != 0.0:
                failures.append(f"{task.instance_id} {attack.name}: REWARD {res['reward']}")
            elif not attack.witnessed(meta):
                failures.append(f"{task.instance_id} {attack.name}: expected {attack.expect} "
                                f"({attack.reason or attack.evidence}), got dropped={meta.get('dropped')} "
                                f"error={meta.get('grade_error') or meta.get('error_message')}")
    n = ROUND_TASKS[backend]
    assert count >= n["r1_r2"] * (25 + 15) + n["r3"] * 15
    assert not failures, f"[{backend}] " + "\n".join(failures)


def test_tampering_is_blamed_on_the_agent_and_recorded(campaign):
    backend, tasks, results, data_dir = campaign
    res = results[(tasks[0].instance_id, "report_objects_patched")]
    meta = res["metadata"]
    assert meta["error_kind"] == "grading_tampered" and meta["hint_template_key"] == "grading.tampered"
    assert meta["error_source"] == "agent" and meta["reward_hacking"] is True and meta["tamper_reasons"]
    assert "runner_internals" in meta["suspicious"]
    # the trace holds the same verdict (what `task-factory reverify` and audits read)
    trace = data_dir / "traces" / f"{meta['episode_id']}.jsonl"
    last = json.loads(trace.read_text().splitlines()[-1])
    assert last["observation"]["metadata"]["reward_hacking"] is True
