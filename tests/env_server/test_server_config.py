"""``env-server serve`` settings: one model, reached by --config FILE, the flags and --set KEY=VALUE."""

from __future__ import annotations

import yaml

from env_server.cli import main
from env_server.config import ServerConfig
from sandbox import DockerBackend


def _resolved(capsys, *argv: str) -> dict:
    assert main(["serve", "--print-config", *argv]) == 0
    return yaml.safe_load(capsys.readouterr().out)


def test_the_defaults_are_the_models(capsys):
    shown = _resolved(capsys)
    assert shown == ServerConfig().model_dump(mode="json")
    assert shown["sandbox"]["limits"]["cpu_policy"] == "idle" and shown["port"] == 8000


def test_flags_and_set_reach_nested_settings(capsys):
    shown = _resolved(capsys, "--tasks", "t.jsonl", "--backend", "docker", "--sandbox-cpu", "normal", "--fsync",
                      "--max-steps", "9", "--set", "sandbox.limits.memory_mb=2048", "--set", "episode.grade_timeout_s=60")
    assert shown["tasks_path"] == "t.jsonl" and shown["sandbox"]["backend"]["type"] == "docker"
    assert shown["sandbox"]["limits"]["cpu_policy"] == "normal" and shown["sandbox"]["limits"]["memory_mb"] == 2048
    assert shown["episode"]["trace_fsync"] is True and shown["episode"]["max_steps"] == 9
    assert shown["episode"]["grade_timeout_s"] == 60.0


def test_a_config_file_then_flags_then_set(tmp_path, capsys):
    cfg = tmp_path / "conf" / "server.yaml"
    cfg.parent.mkdir()
    cfg.write_text("tasks_path: tasks.jsonl\nport: 9100\nmax_sessions: 8\nepisode: {max_steps: 20}\n"
                   "sandbox: {limits: {pids: 64}}\n")
    shown = _resolved(capsys, "--config", str(cfg), "--max-sessions", "16", "--set", "max_sessions=32")
    assert shown["tasks_path"] == str(cfg.parent / "tasks.jsonl")  # relative to the file
    assert shown["port"] == 9100 and shown["max_sessions"] == 32 and shown["episode"]["max_steps"] == 20
    # a partial sandbox section keeps the server's idle CPU policy
    assert shown["sandbox"]["limits"]["pids"] == 64 and shown["sandbox"]["limits"]["cpu_policy"] == "idle"
    assert _resolved(capsys, "--config", str(cfg), "--max-sessions", "16")["max_sessions"] == 16


def test_a_backends_settings_are_its_section(tmp_path, capsys):
    """A bare backend name is its section; its keys reach into it from a file, the flags and --set; naming
    the backend the section already is keeps it, naming another starts from that one's defaults."""
    docker = DockerBackend().model_dump(mode="json")
    shown = _resolved(capsys, "--backend", "docker", "--set", "sandbox.backend.url=tcp://engine:2375",
                      "--image-cache-gb", "5", "--max-pulls", "3")
    assert shown["sandbox"]["backend"] == {**docker, "url": "tcp://engine:2375",
                                           "images": {**docker["images"], "cache_gb": 5.0, "max_pulls": 3}}
    cfg = tmp_path / "server.yaml"  # the flat docker keys of old, moved into the docker section
    cfg.write_text("sandbox: {backend: docker, docker_url: 'tcp://old:2375', docker_image: 'img:1', "
                   "images: {max_pulls: 4}}\n")
    moved = {**docker, "url": "tcp://old:2375", "image": "img:1", "images": {**docker["images"], "max_pulls": 4}}
    assert _resolved(capsys, "--config", str(cfg))["sandbox"]["backend"] == moved
    assert _resolved(capsys, "--config", str(cfg), "--backend", "docker")["sandbox"]["backend"] == moved
    assert _resolved(capsys, "--config", str(cfg), "--backend", "bwrap")["sandbox"]["backend"] == {"type": "bwrap"}
    assert _resolved(capsys, "--set", "sandbox.backend=docker", "--set", "sandbox.backend.image=img:2",
                     "--set", "sandbox.backend=docker")["sandbox"]["backend"]["image"] == "img:2"
    # what --print-config prints loads again, and so does what it printed before the sections
    cfg.write_text(yaml.safe_dump(_resolved(capsys, "--backend", "docker", "--image-cache-gb", "7")))
    assert _resolved(capsys, "--config", str(cfg))["sandbox"]["backend"]["images"]["cache_gb"] == 7.0
    cfg.write_text("sandbox: {backend: bwrap, docker_image: 'swe-openenv-sandbox:latest', docker_url: null,\n"
                   "  images: {pull: true, max_pulls: 2, pull_timeout_s: 1800.0, cache_gb: null}}\n")
    assert _resolved(capsys, "--config", str(cfg))["sandbox"]["backend"] == {"type": "bwrap"}


def test_a_setting_of_another_backend_is_one_line_naming_its_key(capsys):
    for argv, says in ((["--image-cache-gb", "5"], "sandbox.backend: images is a setting of the docker backend, "
                                                   "not of bwrap (backend.type: docker)"),
                       (["--set", "sandbox.docker_url=tcp://x"], "sandbox: docker_url is now backend.url, a setting "
                                                                 "of the docker backend; the backend here is bwrap"),
                       (["--backend", "docker", "--set", "sandbox.backend.urll=x"],
                        "sandbox.backend.urll: not a setting (did you mean sandbox.backend.url?)"),
                       (["--set", "sandbox.backend=dokcer"], "sandbox.backend: unknown sandbox backend 'dokcer' "
                                                             "(did you mean docker?); registered backends: bwrap, docker")):
        assert main(["serve", "--print-config", *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"env-server: {says}") and err.count("\n") == 1, (argv, err)


def test_tokens_never_printed(capsys, monkeypatch):
    monkeypatch.setenv("ENV_SERVER_TOKEN", "s3cret-token")
    shown = _resolved(capsys, "--client-token", "alice=alice-secret")
    text = yaml.safe_dump(shown)
    assert "s3cret-token" not in text and "alice-secret" not in text
    assert shown["client_tokens"] == {"alice": "**********"} and shown["auth_token"] == "**********"


def test_bad_settings_are_named(tmp_path, capsys):
    assert main(["serve", "--print-config", "--set", "episode.max_stepz=3"]) == 2
    assert capsys.readouterr().err == "env-server: episode.max_stepz: not a setting (did you mean episode.max_steps?)\n"
    # a key set at the wrong level, or misspelt deep down: one line naming the key it most likely meant
    assert main(["serve", "--print-config", "--set", "max_steps=2"]) == 2
    assert capsys.readouterr().err == "env-server: max_steps: not a setting (did you mean episode.max_steps?)\n"
    assert main(["serve", "--print-config", "--set", "sandbox.limits.memroy_mb=2"]) == 2
    assert "(did you mean sandbox.limits.memory_mb?)" in capsys.readouterr().err
    assert main(["serve", "--print-config", "--set", "qqqq=1"]) == 2
    assert capsys.readouterr().err == "env-server: qqqq: not a setting\n"  # nothing close: no guess
    assert main(["serve", "--print-config", "--set", "nokey"]) == 2
    assert "is not key=value" in capsys.readouterr().err
    assert main(["serve", "--print-config", "--set", "sandbox.backend=vm"]) == 2
    err = capsys.readouterr().err
    assert "vm" in err and "bwrap" in err and "docker" in err
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    assert main(["serve", "--config", str(tmp_path / "list.yaml")]) == 2
    assert "must be a mapping" in capsys.readouterr().err
    assert main(["serve", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read config" in capsys.readouterr().err


def test_serving_needs_a_task_file(capsys):
    assert main(["serve", "--port", "0"]) == 2
    assert "no task file" in capsys.readouterr().err


def test_env_server_tasks_names_the_command_that_replaced_it(capsys):
    assert main(["tasks", "validate", "t.jsonl"]) == 2
    assert "task-factory validate t.jsonl" in capsys.readouterr().err


def test_a_pack_the_server_cannot_use_is_refused_before_it_is_ready(tmp_path, capsys, demo_task):
    """A task repository another uid owns (git would refuse it at every reset) or this uid cannot read
    stops `serve` before the ready line: one line naming the path, the owner and the fix."""
    import json
    import os
    import shutil

    repo = tmp_path / "pack" / "six"
    shutil.copytree(demo_task.repo_path, repo, symlinks=True)
    row = json.loads(demo_task.model_dump_json())
    row["repo_path"] = str(repo)
    tasks = tmp_path / "pack" / "tasks.jsonl"
    tasks.write_text(json.dumps(row) + "\n")
    argv = ["serve", "--tasks", str(tasks), "--data-dir", str(tmp_path / "data"), "--port", "9"]
    uid = os.geteuid()
    if uid == 0:  # root reads everything: the pack of another user is the case
        for root, dirs, files in os.walk(repo):
            for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
                os.lchown(name, 4321, 4321)
        want = (f"belongs to uid 4321, not to this server's uid 0, and git refuses a repository another user owns: "
                f"chown -R 0:0 on the pack, or run the server as uid 4321 (compose: SWE_ENV_UID=4321)")
    else:
        repo.chmod(0)
        want = f"is not readable by this server's uid {uid}"
    try:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and str(repo) in err and want in err, err
        assert "ready" not in err
    finally:
        repo.chmod(0o755)
