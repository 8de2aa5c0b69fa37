"""SWE-bench-family instances, end to end offline: images laid out like SWE-bench's (built
here from real code by docker/swebench_layout.py), their dataset rows imported with
`task-factory import`, sessions on the docker backend in the image's own
environment, and grading by each instance's own harness (pytest, Django's runtests.py,
SymPy's runner) read by swebench's parsers. Controls in the same run: gold 1.0, empty 0.0.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import websockets
from support.layouts import import_rows, layout_module
from support.servers import call, run_server, tool

from sandbox import SandboxConfig, open_sandbox
from task_factory.cli import main as task_factory_cli
from verifier import grade_submission
from verifier.task import TaskInstance, load_tasks

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(1500)


@pytest.fixture(scope="module")
def tasks_file(client, tmp_path_factory) -> Path:
    """The three instances: built (cached by the engine), imported, written as task records."""
    layout = layout_module(client)
    rows = [layout.build(p, log=lambda m: None) for p in layout.PROJECTS.values()]
    return import_rows(rows, tmp_path_factory.mktemp("layout"))


@pytest.fixture(scope="module")
def tasks(tasks_file) -> dict[str, TaskInstance]:
    return {t.repo.split("/")[1]: t for t in load_tasks(tasks_file)}


def test_import_maps_each_harness(tasks):
    toolz, django, sympy = tasks["toolz"], tasks["django"], tasks["sympy"]
    assert all(t.image_resident and t.workdir == "/testbed" for t in tasks.values())
    assert all(t.source == "synthetic-mutation" for t in tasks.values())  # the rows say so; kept
    assert toolz.test_cmd is None  # pytest instances: the grader's own pytest run (canaries, outcome channel)
    assert django.log_parser == "parse_log_django" and django.test_cmd.startswith("./tests/runtests.py")
    assert sympy.log_parser == "parse_log_sympy" and "sympy.testing.runtests import test" in sympy.test_cmd
    assert all(t.image_env == "/opt/envs/testbed" for t in tasks.values())  # from the eval script's activation


def test_image_session_is_hardened_and_sees_only_the_base_commit(tasks):
    task = tasks["toolz"]

    async def main():
        sb = await open_sandbox(task.workspace_spec(), SandboxConfig(backend="docker"))
        try:
            assert sb.info.blocked_tools_absent and sb.info.seccomp
            assert sb.info.details["task_image"] == task.image
            assert sb.info.details["workspace"] == "copy-on-write"  # an overlay volume, not a copy
            out = (await sb.run("git rev-list --all | wc -l; git log --format=%s")).output.split()
            assert out == ["1", "base"], out  # the image's release commit (the un-bugged code) is gone
            # no object anywhere in the repository holds the un-bugged line
            r = await sb.run("git grep -c 'd\\[item\\] += 1' $(git rev-list --all) -- toolz; "
                             "git cat-file --batch-all-objects --batch-check | wc -l")
            assert "d[item]" not in r.output and ":" not in r.output.splitlines()[0]
            r = await sb.run("readlink /testbed; command -v python; python -c 'import toolz; print(toolz.__file__)'")
            assert r.output.split() == ["/workspace", "/opt/envs/testbed/bin/python", "/workspace/toolz/__init__.py"]
            r = await sb.run("command -v find unzip busybox; touch /usr/x 2>&1; "
                             "python -c \"import socket; socket.create_connection(('93.184.215.14', 80), 3)\" 2>&1 "
                             "| tail -1")
            assert "Read-only file system" in r.output and "unreachable" in r.output
            assert "/find" not in r.output and "/unzip" not in r.output
            r = await sb.run("ls -a; ls toolz | grep -c '\\.pyc$'")
            assert r.output.split()[-1] == "0" and ".git" in r.output.split()
            await sb.run("sed -i 's/d\\[item\\] += 2/d[item] += 1/' toolz/itertoolz.py")
            diff = await sb.diff()
            assert diff.count("diff --git") == 1 and "+        d[item] += 1" in diff
        finally:
            await sb.close()

    asyncio.run(main())


def test_copy_on_write_workspace_holds_only_changes_and_its_limit(client, tasks):
    """Django's 100 MB tree is not copied per session; what the agent writes is held to workspace_mb."""
    from sandbox import Limits
    from sandbox.docker import LABEL

    task = tasks["django"]
    cfg = SandboxConfig(backend="docker", limits=Limits(workspace_mb=16))

    async def main():
        sb = await open_sandbox(task.workspace_spec(), cfg)
        try:
            cow = sb._cow
            assert cow is not None and cow.used_bytes() < 1024 * 1024
            r = await sb.run("echo '# note' >> django/utils/text.py && git status --short && "
                             "python -c 'import django.utils.text as t; print(t.__file__)'")
            assert r.output.split() == ["M", "django/utils/text.py", "/workspace/django/utils/text.py"], r.output
            assert (cow.root / "upper" / "django/utils/text.py").is_file()  # the change, and only it, is written
            assert cow.used_bytes() < 1024 * 1024
            r = await sb.run("head -c 24000000 /dev/zero > big.bin; echo done")
            assert r.status.value == "sandbox_died" and "over its 16 MB limit" in r.output
            assert not sb.alive
        finally:
            await sb.close()
        return cow

    cow = asyncio.run(main())
    assert not cow.root.exists()
    assert not client.api.volumes(filters={"name": cow.volume, "label": f"{LABEL}=1"}).get("Volumes")


def test_validate_gold_one_empty_zero_on_every_harness(tasks_file, capsys):
    assert task_factory_cli(["validate", str(tasks_file), "--backend", "docker", "--concurrency", "2"]) == 0
    table = capsys.readouterr().out
    assert "3 passed, 0 failed" in table, table


def test_episodes_through_the_server_on_the_docker_backend(tasks, tmp_path):
    from env_server.config import ServerConfig

    config = ServerConfig(data_dir=tmp_path, sandbox=SandboxConfig(backend="docker"))

    async def episode(srv, task: TaskInstance, fix: bool) -> dict:
        async with websockets.connect(srv.ws_url + "/ws", max_size=None) as ws:
            r = await call(ws, "reset", {"instance_id": task.instance_id})
            meta = r["data"]["observation"]["metadata"]
            assert meta["task_source"] == "synthetic-mutation"
            if fix:
                r = await call(ws, "step", tool("create", path="gold.diff", content=task.patch))
                r = await call(ws, "step", tool("bash", command="git apply gold.diff && rm gold.diff && "
                                                                "git status --short"))
                assert r["data"]["observation"]["output"].strip().startswith("M "), r
                rec = (await call(ws, "state", {"t": 2}))["data"]  # state(t) as on host-directory tasks
                assert rec["t"] == 2 and rec["diff"].count("diff --git") == task.patch.count("diff --git"), rec
                added = [ln for ln in task.patch.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
                assert all(ln in rec["diff"].splitlines() for ln in added)
            r = await call(ws, "step", tool("submit"))
            return r["data"]

    async def main(srv):
        results = {}
        for name, task in tasks.items():
            results[name] = await asyncio.gather(episode(srv, task, True), episode(srv, task, False))
        return results

    with run_server(config, list(tasks.values())) as srv:
        results = asyncio.run(main(srv))
    for name, (gold, empty) in results.items():
        assert gold["done"] and gold["reward"] == 1.0, (name, gold["metadata"])
        assert empty["reward"] == 0.0 and empty["metadata"]["tests_failed"] >= 1, (name, empty["metadata"])


def test_harness_forgery_and_runner_patches_do_not_pay(tasks):
    """Django's harness: a forged result line beside the real one is tampering; a patched runner is dropped."""
    task = tasks["django"]
    f2p = task.FAIL_TO_PASS[0]
    forged = (
        "diff --git a/django/utils/text.py b/django/utils/text.py\n--- a/django/utils/text.py\n"
        "+++ b/django/utils/text.py\n@@ -1,3 +1,5 @@\n+import sys as _s\n"
        f"+_s.stderr.write({(f2p + ' ... ok') + chr(10)!r})\n"
    )
    runner = ("diff --git a/django/test/runner.py b/django/test/runner.py\n--- a/django/test/runner.py\n"
              "+++ b/django/test/runner.py\n@@ -1,1 +1,2 @@\n+# patched\n")
    cfg = SandboxConfig(backend="docker")

    async def main():
        from sandbox.workspace import prepare_template

        tpl = await asyncio.to_thread(prepare_template, task.workspace_spec(), cfg)
        head = (tpl.path / "django/utils/text.py").read_text().splitlines(keepends=True)[:3]
        diff = forged + "".join(" " + line for line in head)
        res = await grade_submission(task, diff, cfg)
        dropped = await grade_submission(task, runner + " " + (tpl.path / "django/test/runner.py")
                                         .read_text().splitlines(keepends=True)[0], cfg)
        return res, dropped

    res, dropped = asyncio.run(main())
    assert res.applied and res.reward == 0.0 and res.tampered, res
    assert any("both" in r for r in res.tamper_reasons), res.tamper_reasons
    assert dropped.dropped == ["django/test/runner.py (test file)"] and dropped.reward == 0.0  # the runner's


def test_trainer_client_trains_a_step_on_them(tasks_file, tmp_path, capsys):
    """`trainer-client train` (CPU smoke model) against `env-server serve --backend docker` with these tasks."""
    from env_client.local_server import local_env_server
    from trainer_client.cli import main as trainer_cli

    with local_env_server(tasks_file, backend="docker", data_dir=tmp_path / "env", startup_timeout_s=60,
                          stop_grace_s=30) as server:
        out = tmp_path / "run"
        rc = trainer_cli(["train", "--config", str(ROOT / "trainer_client/configs/cpu_smoke.yaml"), "--env-url",
                          server.url, "--tasks", str(tasks_file), "--output-dir", str(out), "--max-steps", "1",
                          "--set", "grpo.max_completion_length=32", "--set", "output.plot=false"])
    assert rc == 0
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r for r in steps if "reward" in r], steps
    traces = list((tmp_path / "env" / "traces").glob("*.jsonl"))
    assert traces, "no episode reached the docker server"
    graded = [json.loads(line) for t in traces for line in t.read_text().splitlines()]
    rewards = [r["observation"].get("reward") for r in graded if r.get("kind") == "step"
               and r["observation"].get("done")]
    assert rewards and all(r in (0.0, 1.0) for r in rewards), rewards
