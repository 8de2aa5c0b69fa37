"""End to end on the CPU against the real env server (bwrap sandbox, real tasks) on loopback.

The tasks are real historical fixes (``source: release-diff``) mined from six's releases
on PyPI (tests/support/taskpacks.py::build_mined_pack), served by this module's own env server.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import pytest

from support.servers import start_server_process

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tasks_file():
    """The mined pack; where the miner cannot build it this fails under CI / SWE_REQUIRE_TASKPACK=1."""
    from support.taskpacks import mined_pack_or_missing

    return mined_pack_or_missing(("six",))


@pytest.fixture(scope="module")
def server(bwrap, tasks_file, tmp_path_factory):
    proc = start_server_process(tasks_file, tmp_path_factory.mktemp("env-data"))
    url = proc.url
    yield url
    proc.stop()


@contextmanager
def capture_console():
    """The lines the run's console writes (trainer_client.metrics._write), in order."""
    from trainer_client import metrics

    lines: list[str] = []
    original = metrics._write
    metrics._write = lines.append
    try:
        yield lines
    finally:
        metrics._write = original


def _instance_ids(tasks_file: Path) -> list[str]:
    return [json.loads(l)["instance_id"] for l in tasks_file.read_text().splitlines() if l.strip()]


def test_environment_real_session_markers_and_reward(server, tasks_file):
    from trainer_client.environment import make_environment_class

    env_cls = make_environment_class([server])
    try:
        env = env_cls()
        iid = _instance_ids(tasks_file)[0]
        issue = env.reset(instance_id=iid, prompt=[{"role": "user", "content": "x"}])
        assert issue and env.instance_id == iid
        assert "workspace" in env.bash("pwd")
        out = env.bash("definitely-not-a-command-xyz")
        assert "not found" in out
        env.view("does/not/exist.py")
        kinds = [t["error_kind"] for t in env.turns]
        assert kinds[0] is None and kinds[1] == "command_not_found" and kinds[2] == "file_not_found"
        assert env.turns[1]["hint_template_key"] == "shell.command_not_found"
        assert env.turns[1]["error_source"] == "agent"
        reward = env.get_reward()  # auto-submit grades the untouched repo: hidden tests fail
        assert reward == 0.0 and env.done
    finally:
        env_cls.runtime.close()


def test_cli_train_smoke_against_real_server(server, tasks_file, tmp_path, capsys):
    """`trainer-client train` with the CPU smoke config: steps run, metrics JSONL + plot + checkpoint."""
    from trainer_client.cli import main

    out = tmp_path / "run"
    rc = main(["train", "--config", str(Path(__file__).resolve().parents[2] / "trainer_client/configs/cpu_smoke.yaml"),
               "--env-url", server, "--tasks", str(tasks_file), "--output-dir", str(out), "--max-steps", "2",
               "--set", "grpo.max_completion_length=64", "--set", "grpo.save_steps=2"])
    assert rc == 0
    rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward" in r]
    assert len(steps) == 2 and all("loss" in r for r in steps)
    assert [r["step"] for r in rows if "step" in r] == [1, 2]  # the run summary has no step of its own
    assert rows[-1]["kind"] == "summary" and rows[-1]["global_step"] == 2 and "train_runtime" in rows[-1]
    assert (out / "metrics.png").exists() and (out / "checkpoint-2").is_dir() and (out / "final").is_dir()
    printed = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(printed) if line.split()[:3] == ["step", "reward", "pass"])
    table = [line.split() for line in printed[header:] if line.split() and line.split()[0] in ("1", "2")]
    assert [row[0] for row in table] == ["1", "2"] and float(table[0][1]) == steps[0]["reward"], printed
    card = (out / "README.md").read_text()  # TRL's model card names the local base model, not "[None]"
    assert "[None]" not in card and 'model="None"' not in card and "tiny-qwen2" in card


def test_two_replicas_one_killed_mid_run(tasks_file, tmp_path):
    from env_client import ClientConfig
    from trainer_client.environment import make_environment_class

    proc_a = start_server_process(tasks_file, tmp_path / "a")
    url_a = proc_a.url
    proc_b = start_server_process(tasks_file, tmp_path / "b")
    url_b = proc_b.url
    env_cls = make_environment_class([url_a, url_b], ClientConfig(reconnect_attempts=1, reconnect_backoff_s=0.1))
    try:
        iid = _instance_ids(tasks_file)[0]
        envs = [env_cls() for _ in range(4)]
        for e in envs:
            e.reset(instance_id=iid)
        by_url = {}
        for e in envs:
            by_url.setdefault(e._session.connection.url, []).append(e)
        assert len(by_url) == 2
        proc_b.stop()
        for e in envs:
            e.bash("echo hi")
        victims = [e for e in envs if e.infra_error]
        survivors = [e for e in envs if not e.infra_error]
        assert len(victims) == 2 and len(survivors) == 2
        assert all(e.get_reward() is None for e in victims)  # masked out of GRPO, not an exception
        # the console names the lost rollouts and the replica once (what the trainer prints per batch)
        from trainer_client.console import RunConsole, rollout_summary
        from trainer_client.trainer import ConcurrentToolsMixin

        console = RunConsole(tmp_path / "run", sample_every=1)
        replicas = ConcurrentToolsMixin._replicas(envs)
        assert replicas == {url_a: True, url_b: False}
        with capture_console() as lines:
            console.report(3, [rollout_summary(e) for e in envs], replicas)
            console.report(4, [rollout_summary(e) for e in survivors], replicas)
        text = "\n".join(lines)
        assert f"[env] step 3: 2 of 4 rollouts lost to the env (masked out of the loss): 2 on {url_b}" in text
        assert text.count(f"replica {url_b} is out of rotation") == 1 and f"1 live replica(s): {url_a}" in text
        assert "[sample] step 3" in text and f"trace: {url_a}/episodes/" in text  # a graded rollout is shown
        assert "step 4: " not in text  # nothing lost in step 4
        assert [c.url.split(":")[-1] for c in env_cls.runtime.pool.live] == [url_a.split(":")[-1] + "/mux"]
        fresh = env_cls()
        fresh.reset(instance_id=iid)  # new sessions land on the live replica
        assert "hi" in fresh.bash("echo hi")
    finally:
        env_cls.runtime.close()
        proc_a.stop()
        proc_b.stop()
