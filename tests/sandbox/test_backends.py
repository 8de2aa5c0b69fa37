"""The backend registry (sandbox/backends.py) is the one place backends are listed, and the one
sandbox mechanism (sandbox/jail.py) serves whatever is registered there.

``PipeSandbox`` is a backend of one class: its "jail" is a plain child process running a small
stand-in for the runtime (the protocol's init and ``run``/``write`` replies), so what these tests
see of start-up, timeouts and "sandbox died" is the shared mechanism's, with no jail in the way.
"""

from __future__ import annotations

import asyncio
import math
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from sandbox import (CommandStatus, Limits, PathError, SandboxClosed, SandboxConfig, SandboxDied, SandboxInfo,
                     SandboxStartError, WorkspaceSpec, backend_class, backend_names, open_sandbox)
from sandbox.backends import BACKENDS
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


@pytest.fixture
def pipe_backend(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setitem(BACKENDS, "pipe", PipeSandbox)
    PipeSandbox.launched.clear()
    return "pipe"


def _spec(tmp_path: Path, **env: str) -> WorkspaceSpec:
    return WorkspaceSpec(repo_path=tmp_path, env=env)


def test_an_unknown_backend_is_refused_naming_the_registered_ones() -> None:
    assert backend_names() == tuple(BACKENDS) and {"bwrap", "docker"} <= set(backend_names())
    with pytest.raises(ValidationError) as err:
        SandboxConfig(backend="nope")
    assert "'nope'" in str(err.value)
    for name in backend_names():
        assert name in str(err.value), err.value
    with pytest.raises(ValueError, match="registered backends: bwrap, docker"):
        backend_class("nope")


def test_registry_entries_by_import_path_resolve_on_use(monkeypatch: pytest.MonkeyPatch) -> None:
    from sandbox.bwrap import BwrapSandbox

    monkeypatch.setitem(BACKENDS, "bwrap-again", ".bwrap:BwrapSandbox")
    assert SandboxConfig(backend="bwrap-again").backend == "bwrap-again"
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
    SandboxConfig(backend=pipe_backend)
    monkeypatch.delitem(BACKENDS, pipe_backend)
    with pytest.raises(ValidationError, match="unknown sandbox backend 'pipe'"):
        SandboxConfig(backend=pipe_backend)


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
    assert backend_class("docker").runs_image_resident and not backend_class("bwrap").runs_image_resident
