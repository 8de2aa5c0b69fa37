"""DockerSandbox end to end: the real runtime in a real container, and no leaks."""

from __future__ import annotations

import asyncio
import signal
import statistics
import struct
import subprocess
import sys
import textwrap
import time

import pytest
from docker_support import sandbox_containers, wait_gone

from sandbox import CommandStatus, SandboxClosed, SandboxStartError, open_sandbox
from sandbox.docker import ExecStream, reap_containers
from sandbox.docker_engine import docker_engine
from sandbox.models import ImageUnavailable


async def test_session_ops_and_info(client, config, spec) -> None:
    async with await open_sandbox(spec, config) as sb:
        info = sb.info
        assert info.backend == "docker" and info.cgroup and info.noexec_workspace
        assert info.seccomp and info.blocked_tools_absent and len(info.base_commit) == 40
        r = await sb.run("id -u; pwd; python3 -c 'import pkg.core as c; print(c.f() + 1)'")
        uid, cwd, val = r.output.split()
        assert r.ok and int(uid) >= 1000 and cwd == "/workspace" and val == "42"
        assert uid == info.details["uid"]
        await sb.write_file("pkg/new.py", b"X = 1\n")
        assert await sb.read_file("/workspace/pkg/new.py") == b"X = 1\n"
        r = await sb.run("cd pkg && export V=7")
        r = await sb.run("echo $PWD $V")
        assert r.output.split() == ["/workspace/pkg", "7"]  # the shell persists
        diff = await sb.diff()
        assert "+++ b/pkg/new.py" in diff and "core.py" not in diff
        assert (await sb.run("git log --format=%H")).output.strip() == info.base_commit


async def test_timeout_kills_command_and_shell_survives(client, config, spec) -> None:
    async with await open_sandbox(spec, config) as sb:
        t0 = time.monotonic()
        r = await sb.run("sleep 100 & sleep 100", timeout_s=1)
        assert r.status is CommandStatus.timeout and time.monotonic() - t0 < 10
        r = await sb.run("pgrep -u \"$(id -u)\" -c sleep || true")  # the watchdog sleeps as 65534
        assert r.output.strip() == "0" and sb.alive


async def test_close_removes_container_and_is_idempotent(client, config, spec) -> None:
    sb = await open_sandbox(spec, config)
    cid = sb.info.details["container"]
    assert any(c.startswith(cid) for c in sandbox_containers(client))
    await sb.close()
    await sb.close()
    assert not any(c.startswith(cid) for c in sandbox_containers(client))
    assert not sb.alive
    with pytest.raises(SandboxClosed):
        await sb.run("true")


async def test_failed_starts_leave_nothing(client, config, spec) -> None:
    before = sandbox_containers(client)
    with pytest.raises(ImageUnavailable, match="'swe-openenv-missing:0' is unavailable: "):  # pulled: no registry has it
        await open_sandbox(spec.model_copy(update={"image": "swe-openenv-missing:0"}), config)
    # the base image has no python3: the container starts, the runtime cannot
    with pytest.raises(SandboxStartError):
        await open_sandbox(spec.model_copy(update={"image": "swe-openenv-base:bookworm"}), config)
    assert sandbox_containers(client) == before


async def test_killed_runtime_is_reported_and_container_goes(client, config, spec) -> None:
    sb = await open_sandbox(spec, config)
    try:
        c = sb.container
        code, _ = await c.exec_run(["pkill", "-KILL", "-f", "^python3 -I -S /.swe/runtime.py"])
        assert code == 0
        r = await sb.run("echo hi")
        assert r.status is CommandStatus.sandbox_died and not sb.alive
        # the watchdog ends (and the engine removes) the container even before close()
        assert not wait_gone(client, {c.id}, seconds=15)
    finally:
        await sb.close()


async def test_agent_cannot_kill_the_watchdog(client, config, spec) -> None:
    async with await open_sandbox(spec, config) as sb:
        r = await sb.run("kill -9 1 $(pgrep -u 65534) 2>&1; sleep 0.5; pgrep -u 65534 -c")
        assert "Operation not permitted" in r.output and int(r.output.split()[-1]) >= 1
        assert (await sb.run("echo still")).output.strip() == "still"


async def test_sessions_are_isolated(client, config, spec) -> None:
    a, b = await asyncio.gather(open_sandbox(spec, config), open_sandbox(spec, config))
    try:
        assert a.info.details["uid"] != b.info.details["uid"]
        await a.run("echo from-a > only_a.txt; sleep 30 &")
        r = await b.run("ls; ps -eo args; echo PROBE-DONE")  # the marker: the probe ran to its end
        assert r.output.rstrip().endswith("PROBE-DONE"), r
        assert "only_a.txt" not in r.output and "sleep 30" not in r.output
    finally:
        await asyncio.gather(a.close(), b.close())


async def test_host_crash_leaves_no_container(client, config, spec) -> None:
    """SIGKILL the process holding a session: the container must still go away."""
    script = textwrap.dedent(f"""
        import asyncio, sys
        from pathlib import Path
        from sandbox import SandboxConfig, WorkspaceSpec, open_sandbox
        async def main():
            sb = await open_sandbox(WorkspaceSpec(repo_path=Path({str(spec.repo_path)!r})),
                                    SandboxConfig.model_validate_json({config.model_dump_json()!r}))
            print(sb.container.id, flush=True)
            await asyncio.sleep(300)
        asyncio.run(main())
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        cid = proc.stdout.readline().strip()
        assert cid in sandbox_containers(client, mine=False)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert not wait_gone(client, {cid}, seconds=20)


async def test_reap_containers_removes_this_owners_sessions(client, config, spec) -> None:
    sb = await open_sandbox(spec, config)
    cid = sb.container.id
    assert reap_containers(client, docker_engine().owner) >= 1
    assert cid not in sandbox_containers(client)
    r = await sb.run("true")
    assert r.status is CommandStatus.sandbox_died
    await sb.close()  # still fine after the container vanished


async def test_round_trip_is_a_persistent_shell(client, config, spec) -> None:
    async with await open_sandbox(spec, config) as sb:
        times = []
        for _ in range(40):
            t0 = time.perf_counter()
            assert (await sb.run("true")).ok
            times.append(time.perf_counter() - t0)
    # a container or exec per command would cost > 50 ms here
    assert statistics.median(times) < 0.02, times


async def test_exec_stream_demultiplexes_frames() -> None:
    """Frames split at odd places, stderr, empty frames, then EOF."""

    class Sink(asyncio.Transport):
        def write(self, data):
            pass

        def is_closing(self):
            return False

        def close(self):
            pass

    sock = asyncio.StreamReader()
    proto = asyncio.StreamReaderProtocol(sock)
    writer = asyncio.StreamWriter(Sink(), proto, sock, asyncio.get_running_loop())
    stream = ExecStream(sock, writer)
    wire = b"".join(struct.pack(">BxxxI", kind, len(p)) + p
                    for kind, p in [(1, b'{"a":'), (2, b"warn\n"), (1, b""), (1, b"1}\n"), (2, b"x" * 20000)])
    for i in range(0, len(wire), 3):
        sock.feed_data(wire[i:i + 3])
    sock.feed_eof()
    assert await stream.reader.readuntil(b"\n") == b'{"a":1}\n'
    assert await stream.reader.read() == b""
    assert stream.stderr_tail.endswith("x" * 100) and len(stream.stderr_tail) <= 16 * 1024 + 20000
    assert stream.at_eof
