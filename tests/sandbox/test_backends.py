"""The backend registry (sandbox/backends.py: one config model per backend, bound to its Sandbox
class) is the one place backends are listed, every surface that names or runs a backend is generated
from it, and the one sandbox mechanism (sandbox/jail.py) serves whatever is registered there.

``PipeSandbox`` (config ``PipeBackend``) is a backend of one class: its "jail" is a plain child process
running a small stand-in for the runtime (the protocol's init and ``run``/``write`` replies), so what
these tests see of start-up, timeouts and "sandbox died" is the shared mechanism's, with no jail in the way.
``ThrowawayBackend`` with ``SandboxDouble`` is a backend added in a test, with a setting of its own,
to check the generated surfaces (config validation, the CLIs' choices, the errors) carry it.
"""

from __future__ import annotations

import asyncio
import math
import sys
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import ValidationError

from sandbox import (BACKENDS, BackendConfig, BwrapBackend, CommandResult, CommandStatus, DockerBackend, Limits,
                     PathError, Sandbox, SandboxClosed, SandboxConfig, SandboxDied, SandboxInfo, SandboxStartError,
                     WorkspaceSpec, backend_class, backend_names, open_sandbox)
from sandbox.jail import JailSandbox

# Answers the init line, then: `run` echoes the command and the timeout it was given ("exit"
# ends the process, "ops" lists the ops seen so far), `write` records the write.
STAND_IN_RUNTIME = r"""
import json, sys
init = json.loads(sys.stdin.readline())
if init.get("refuse"):
    sys.stderr.write("stand-in refuses to start\n"); sys.stderr.flush()
    print(json.dumps({"ok": False, "error": {"kind": "setup_failed", "message": "told to refuse"}}), flush=True)
    sys.exit(1)
print(json.dumps({"ok": True, "info": {"seccomp": True, "landlock_abi": 6, "noexec_workspace": True,
                                       "cpu_policy": "idle"}}), flush=True)
ops = []
for line in sys.stdin:
    req = json.loads(line)
    ops.append(req["op"])
    if req["op"] == "run" and req["command"] == "exit":
        sys.exit(3)
    out = {"run": lambda: {"output": "%s %r" % (req["command"] if req["command"] != "ops" else ",".join(ops),
                                                 req["timeout_s"]),
                           "exit_code": 0, "status": "ok", "truncated": False, "output_bytes": 1,
                           "duration_s": 0.0, "files_changed": False},
           "write": lambda: {}}[req["op"]]()
    print(json.dumps({"id": req["id"], "ok": True, "result": out}), flush=True)
"""


class PipeSandbox(JailSandbox):
    """A backend whose jail is an unconfined child process (for these tests only)."""

    start_timeout_s = 10.0
    launched: list["PipeSandbox"] = []

    def __init__(self, proc: asyncio.subprocess.Process, config: SandboxConfig) -> None:
        super().__init__(f"pipe-{proc.pid}", config, SandboxInfo(backend="pipe"), proc.stdout, self._write)
        self.proc = proc
        self.stderr = b""
        self.killed = 0

    @classmethod
    async def launch(cls, spec: WorkspaceSpec, config: SandboxConfig) -> tuple["PipeSandbox", dict[str, Any]]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-c", STAND_IN_RUNTIME, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        box = cls(proc, config)
        cls.launched.append(box)
        return box, {"refuse": "refuse" in spec.env}

    async def _write(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        await self.proc.stdin.drain()

    @property
    def jail_alive(self) -> bool:
        return self.proc.returncode is None

    def jail_stderr(self) -> str:
        return self.stderr.decode(errors="replace")

    async def kill_jail(self) -> None:
        self.killed += 1
        if self.proc.returncode is None:
            self.proc.kill()
        self.stderr = await self.proc.stderr.read()
        await self.proc.wait()


class PipeBackend(BackendConfig):
    """The config of the ``pipe`` backend (PipeSandbox; for these tests only)."""

    type: Literal["pipe"] = "pipe"
    sandbox_class = PipeSandbox


@pytest.fixture
def pipe_backend(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setitem(BACKENDS, "pipe", PipeBackend)
    PipeSandbox.launched.clear()
    return "pipe"


def _spec(tmp_path: Path, **env: str) -> WorkspaceSpec:
    return WorkspaceSpec(repo_path=tmp_path, env=env)


def test_an_unknown_backend_is_refused_naming_the_registered_ones() -> None:
    assert backend_names() == tuple(BACKENDS) and {"bwrap", "docker"} <= set(backend_names())
    assert "host" not in backend_names()  # the task factory's removed host grader is no backend
    for bad in ("nope", "host", {"type": "nope"}):
        with pytest.raises(ValidationError) as err:
            SandboxConfig(backend=bad)
        (error,) = err.value.errors()
        assert error["loc"] == ("backend",) and "\n" not in error["msg"], error
        assert "unknown sandbox backend" in error["msg"] and "registered backends: bwrap, docker" in error["msg"]
    with pytest.raises(ValidationError, match=r"unknown sandbox backend 'dokcer' \(did you mean docker\?\)"):
        SandboxConfig(backend="dokcer")
    with pytest.raises(ValueError, match="registered backends: bwrap, docker"):
        backend_class("nope")


def test_a_backend_is_its_typed_config() -> None:
    """``backend`` is the config of one registered backend, chosen by its type; a bare name is its defaults."""
    assert SandboxConfig().backend == BwrapBackend() and SandboxConfig().backend_name == "bwrap"
    config = SandboxConfig(backend="docker")
    assert type(config.backend) is DockerBackend and config.backend == DockerBackend() and config.backend_name == "docker"
    config = SandboxConfig(backend={"type": "docker", "url": "tcp://engine:2375", "images": {"max_pulls": 4}})
    assert (config.backend.url, config.backend.images.max_pulls) == ("tcp://engine:2375", 4)
    assert SandboxConfig.model_validate(config.model_dump(mode="json")) == config  # a dump loads again
    assert config.model_dump()["backend"] == {**DockerBackend().model_dump(), "url": "tcp://engine:2375",
                                              "images": {**DockerBackend().images.model_dump(), "max_pulls": 4}}
    assert SandboxConfig(backend=DockerBackend(image="img:1")).backend.image == "img:1"
    # its keys are its own: another backend's key names whose it is, a misspelt one is pydantic's extra_forbidden
    with pytest.raises(ValidationError, match="url is a setting of the docker backend, not of bwrap"):
        SandboxConfig(backend={"type": "bwrap", "url": "tcp://engine:2375"})
    with pytest.raises(ValidationError) as err:
        SandboxConfig(backend={"type": "docker", "urll": "x"})
    assert [(e["loc"], e["type"]) for e in err.value.errors()] == [(("backend", "urll"), "extra_forbidden")]
    # what a backend does differently is its config's behaviour, read with no backend module imported
    assert DockerBackend.runs_image_resident and not BwrapBackend.runs_image_resident
    assert DockerBackend.needs_extra == ("env", ("docker",)) and BwrapBackend.needs_extra is None


def test_the_flat_docker_keys_of_old_move_into_the_docker_section() -> None:
    config = SandboxConfig(backend="docker", docker_url="tcp://old:2375", docker_image="img:2",
                           images={"cache_gb": 5})
    assert config.backend == DockerBackend(url="tcp://old:2375", image="img:2", images={"cache_gb": 5})
    # a configuration printed before the sections: the docker keys at their defaults under bwrap are dropped
    old_dump = {"backend": "bwrap", "docker_image": "swe-openenv-sandbox:latest", "docker_url": None,
                "images": {"pull": True, "max_pulls": 2, "pull_timeout_s": 1800.0, "cache_gb": None}}
    assert SandboxConfig.model_validate(old_dump).backend == BwrapBackend()
    # ... and a docker setting given for another backend, or given twice, is one line naming its new key
    for given, says in (({"docker_url": "tcp://x"}, "docker_url is now backend.url, a setting of the docker backend"),
                        ({"backend": "bwrap", "images": {"cache_gb": 1}}, "images is now backend.images"),
                        ({"backend": {"type": "docker", "url": "a"}, "docker_url": "b"},
                         "docker_url and backend.url both given: give backend.url only")):
        with pytest.raises(ValidationError) as err:
            SandboxConfig.model_validate(given)
        (error,) = err.value.errors()
        assert says in error["msg"] and "\n" not in error["msg"], error


def test_registry_entries_by_import_path_resolve_on_use(monkeypatch: pytest.MonkeyPatch) -> None:
    from sandbox.bwrap import BwrapSandbox

    class BwrapAgain(BackendConfig):
        type: Literal["bwrap-again"] = "bwrap-again"
        sandbox_class = ".bwrap:BwrapSandbox"

    monkeypatch.setitem(BACKENDS, "bwrap-again", BwrapAgain)
    assert SandboxConfig(backend="bwrap-again").backend_name == "bwrap-again"
    assert backend_class("bwrap-again") is backend_class("bwrap") is BwrapSandbox


async def test_a_registered_backend_is_configured_and_opened(pipe_backend: str, tmp_path: Path) -> None:
    """One class and one registry entry: SandboxConfig accepts the name and open_sandbox starts it."""
    assert pipe_backend in backend_names()
    config = SandboxConfig(backend=pipe_backend)
    async with await open_sandbox(_spec(tmp_path), config) as sb:
        assert type(sb) is PipeSandbox and PipeSandbox.launched == [sb]
        # the runtime's layers, as it reported them at start-up
        assert (sb.info.seccomp, sb.info.landlock_abi, sb.info.noexec_workspace, sb.info.cpu_policy) == (
            True, 6, True, "idle")
        res = await sb.run("hello")
        assert res.ok and res.output == "hello 120.0", res
        assert sb.alive
    assert not sb.alive and sb.killed == 1


def test_unregistered_again_it_is_refused(pipe_backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    config = SandboxConfig(backend=pipe_backend)
    monkeypatch.delitem(BACKENDS, pipe_backend)
    with pytest.raises(ValidationError, match="unknown sandbox backend 'pipe'"):
        SandboxConfig(backend=pipe_backend)
    with pytest.raises(ValidationError, match="unknown sandbox backend 'pipe'"):
        SandboxConfig(backend=config.backend)  # its config, made while it was registered, too


async def test_timeouts_are_normalised_the_same_for_every_backend(pipe_backend: str, tmp_path: Path) -> None:
    """Missing, zero, negative or NaN: the default; above the cap: the cap (run and run_isolated alike)."""
    config = SandboxConfig(backend=pipe_backend, limits=Limits(command_timeout_s=7, max_command_timeout_s=30))
    async with await open_sandbox(_spec(tmp_path), config) as sb:
        for asked, sent in ((None, 7.0), (0, 7.0), (-5, 7.0), (math.nan, 7.0), (2.5, 2.5), (1e9, 30.0),
                            (math.inf, 30.0)):
            res = await sb.run("t", timeout_s=asked)
            assert res.output == f"t {sent!r}", (asked, res)


async def test_oversized_writes_are_refused_before_the_runtime(pipe_backend: str, tmp_path: Path) -> None:
    config = SandboxConfig(backend=pipe_backend, limits=Limits(max_file_write_bytes=10))
    async with await open_sandbox(_spec(tmp_path), config) as sb:
        await sb.write_file("a", b"x" * 10)
        with pytest.raises(PathError) as err:
            await sb.write_file("b", b"x" * 11)
        assert err.value.reason == "too_large"
        assert (await sb.run("ops")).output == "write,run 120.0", "the oversized write crossed the channel"


async def test_a_dead_runtime_is_reported_once_then_raised(pipe_backend: str, tmp_path: Path) -> None:
    sb = await open_sandbox(_spec(tmp_path), SandboxConfig(backend=pipe_backend))
    try:
        res = await sb.run("exit")
        assert res.status is CommandStatus.sandbox_died and res.output.startswith("[sandbox died: "), res
        assert not sb.alive
        with pytest.raises(SandboxDied):
            await sb.run("again")
        with pytest.raises(SandboxDied):
            await sb.read_file("x")
    finally:
        await sb.close()
        await sb.close()
    assert sb.killed == 1
    with pytest.raises(SandboxClosed):
        await sb.run("after close")


async def test_a_failed_start_kills_the_jail_and_names_its_stderr(pipe_backend: str, tmp_path: Path) -> None:
    with pytest.raises(SandboxStartError) as err:
        await open_sandbox(_spec(tmp_path, refuse="1"), SandboxConfig(backend=pipe_backend))
    assert "told to refuse" in str(err.value) and "stand-in refuses to start" in str(err.value), err.value
    (box,) = PipeSandbox.launched
    assert box.killed == 1 and box.proc.returncode is not None


async def test_image_resident_tasks_go_only_to_backends_that_run_them(pipe_backend: str) -> None:
    spec = WorkspaceSpec(image="task:latest", image_workdir="/testbed")
    with pytest.raises(SandboxStartError, match=r"need a backend that runs them \(docker\), not pipe"):
        await open_sandbox(spec, SandboxConfig(backend=pipe_backend))
    assert PipeSandbox.launched == []  # refused before anything was launched
    assert BACKENDS["docker"].runs_image_resident and not BACKENDS["bwrap"].runs_image_resident


class SandboxDouble(Sandbox):
    """The Sandbox class of ``ThrowawayBackend``: starts without a jail and runs nothing (a test double)."""

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config
        self.info = SandboxInfo(backend=config.backend_name)

    prepared: list[WorkspaceSpec] = []

    @classmethod
    async def start(cls, spec: WorkspaceSpec, config: SandboxConfig) -> "SandboxDouble":
        return cls(config)

    @classmethod
    async def prepare_ahead(cls, spec: WorkspaceSpec, config: SandboxConfig) -> None:
        cls.prepared.append(spec)

    async def run(self, command: str, timeout_s: float | None = None, output_limit: int | None = None) -> CommandResult:
        return CommandResult(output="", exit_code=0, status=CommandStatus.ok)

    async def read_file(self, path: str) -> bytes:
        return b""

    async def write_file(self, path: str, data: bytes) -> None:
        pass

    async def diff(self) -> str:
        return ""

    async def close(self) -> None:
        pass

    @property
    def alive(self) -> bool:
        return True


class ThrowawayBackend(BackendConfig):
    """A backend added by a test: one config class with a setting of its own, and its Sandbox class."""

    type: Literal["throwaway"] = "throwaway"
    speed: int = 1
    sandbox_class = SandboxDouble
    needs_extra = ("env", ("a_module_no_install_has",))


async def test_a_backend_added_in_a_test_reaches_every_generated_surface(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """One config class, its Sandbox class and its registry entry: config validation, open_sandbox, the
    server's settings (flags, --set into its section, the nearest-key messages), the --backend/--check
    choices of env-server and task-factory and the unknown-name errors all carry it."""
    import yaml

    from env_server.cli import build_parser as server_parser
    from env_server.cli import main as server_main
    from task_factory.check import check_choices
    from task_factory.cli import _missing_extra
    from task_factory.cli import build_parser as factory_parser

    monkeypatch.setitem(BACKENDS, "throwaway", ThrowawayBackend)
    # config validation: its name, its section, its own setting; an unknown name lists it, a near one names it
    assert SandboxConfig(backend="throwaway").backend == ThrowawayBackend()
    config = SandboxConfig(backend={"type": "throwaway", "speed": 3})
    assert type(config.backend) is ThrowawayBackend and config.backend.speed == 3
    with pytest.raises(ValidationError, match=r"registered backends: bwrap, docker, throwaway"):
        SandboxConfig(backend="nope")
    with pytest.raises(ValidationError, match=r"'throwawy' \(did you mean throwaway\?\)"):
        SandboxConfig(backend="throwawy")
    with pytest.raises(ValidationError, match="speed is a setting of the throwaway backend, not of docker"):
        SandboxConfig(backend={"type": "docker", "speed": 2})
    # the session starts on its class, with its settings
    sb = await open_sandbox(_spec(tmp_path), config)
    assert type(sb) is SandboxDouble and sb.config.backend.speed == 3 and backend_class("throwaway") is SandboxDouble
    SandboxDouble.prepared.clear()  # what the server prepares ahead of resets (prefetch_ahead) is the class's
    await config.backend.prepare_ahead(_spec(tmp_path), config)
    assert SandboxDouble.prepared == [_spec(tmp_path)]

    # env-server serve: a --backend choice; its setting reached by --set; a misspelt one named
    serve = server_parser()._subparsers._group_actions[0].choices["serve"]
    assert "throwaway" in next(a for a in serve._actions if "--backend" in a.option_strings).choices
    assert server_main(["serve", "--print-config", "--backend", "throwaway", "--set", "sandbox.backend.speed=5"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["sandbox"]["backend"] == {"type": "throwaway", "speed": 5}
    assert server_main(["serve", "--print-config", "--backend", "throwaway", "--set", "sandbox.backend.sped=5"]) == 2
    assert capsys.readouterr().err == "env-server: sandbox.backend.sped: not a setting (did you mean sandbox.backend.speed?)\n"
    assert server_main(["serve", "--print-config", "--set", "sandbox.backend=throwawy"]) == 2
    err = capsys.readouterr().err
    assert "did you mean throwaway?" in err and "bwrap, docker, throwaway" in err and err.count("\n") == 1, err

    # task-factory: validate/reverify --backend and build/mine --check choose it; a wrong name lists it
    parser = factory_parser()
    assert parser.parse_args(["validate", "t.jsonl", "--backend", "throwaway"]).backend == "throwaway"
    assert parser.parse_args(["reverify", "--traces", "d", "--tasks", "t", "--backend", "throwaway"]).backend == "throwaway"
    assert parser.parse_args(["build", "--out", "x", "--check", "throwaway"]).check == "throwaway"
    assert "throwaway" in check_choices()
    with pytest.raises(SystemExit):
        parser.parse_args(["validate", "t.jsonl", "--backend", "nope"])
    assert "not one of bwrap, docker, throwaway" in capsys.readouterr().err
    # ... and the extra it needs is named before the command runs
    args = parser.parse_args(["validate", "t.jsonl", "--backend", "throwaway"])
    assert "--backend throwaway needs the 'env' extra" in _missing_extra(args)
    assert "a_module_no_install_has" in _missing_extra(args)
