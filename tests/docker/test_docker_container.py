"""The session container's own hardening, checked with plain execs (no runtime)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox import Limits, SandboxConfig, SandboxStartError
from sandbox.docker import RUNTIME_PATH, WATCHDOG_USER, DockerContainer, container_kwargs
from sandbox.docker_engine import DockerSettings, docker_engine
from sandbox.models import DEFAULT_BLOCKED_TOOLS


def test_kwargs_carry_every_hardening_flag(tmp_path: Path) -> None:
    cfg = SandboxConfig(backend="docker", limits=Limits(memory_mb=256, pids=50, workspace_mb=20, tmp_mb=10))
    kw = container_kwargs(image="img", config=cfg, uid=123456, template_dir=tmp_path,
                          runtime_path=RUNTIME_PATH, python_env=tmp_path, options=DockerSettings(cpus=0.5))
    assert kw["network_mode"] == "none" and kw["read_only"] and kw["init"]
    assert kw["cap_drop"] == ["ALL"] and kw["security_opt"] == ["no-new-privileges"]
    assert kw["pids_limit"] == 58 and kw["mem_limit"] == kw["memswap_limit"] == "256m"
    assert kw["nano_cpus"] == 500_000_000 and kw["user"] == WATCHDOG_USER
    assert "noexec" in kw["tmpfs"]["/workspace"] and "size=20m" in kw["tmpfs"]["/workspace"]
    assert "uid=123456" in kw["tmpfs"]["/workspace"]
    assert "noexec" in kw["tmpfs"]["/tmp"] and "size=10m" in kw["tmpfs"]["/tmp"]
    assert all(m["ReadOnly"] for m in kw["mounts"]) and len(kw["mounts"]) == 3


def test_path_map_translates_longest_prefix() -> None:
    opts = DockerSettings(path_map="/srv=/host/srv;/srv/cache=/mnt/cache")
    assert opts.host_path(Path("/srv/cache/t/tree")) == "/mnt/cache/t/tree"
    assert opts.host_path(Path("/srv/x")) == "/host/srv/x"
    assert opts.host_path(Path("/srvx/y")) == "/srvx/y"  # a prefix is a path, not a string
    assert DockerSettings(path_map="").host_path(Path("/a/b")) == "/a/b"


async def plain_container(client, image: str, tmp_path: Path, **limits) -> DockerContainer:
    """A session container whose main process just sleeps (no runtime, no watchdog)."""
    (tmp_path / "tpl").mkdir(exist_ok=True)
    cfg = SandboxConfig(backend="docker", limits=Limits(**limits))
    uid = docker_engine().uids.take(DockerSettings())
    kw = container_kwargs(image=image, config=cfg, uid=uid, template_dir=tmp_path / "tpl",
                          runtime_path=RUNTIME_PATH, watchdog=False)
    return await DockerContainer.create(client, uid, **kw)


async def sh(c: DockerContainer, script: str) -> tuple[int, str]:
    code, out = await c.exec_run(["bash", "-c", script])
    return code, out.decode(errors="replace")


async def test_container_is_locked_down(client, image: str, tmp_path: Path) -> None:
    c = await plain_container(client, image, tmp_path, memory_mb=300, pids=40)
    try:
        assert (await sh(c, "id -u"))[1].strip() == str(c.uid) and c.uid != 0
        for target in ("/etc/x", "/usr/bin/x", "/.swe/template/x", "/.swe/runtime.py"):
            code, out = await sh(c, f"echo hi > {target}")
            assert code != 0 and "Read-only file system" in out, (target, out)
        status = (await sh(c, "cat /proc/self/status"))[1]
        assert "CapEff:\t0000000000000000" in status and "NoNewPrivs:\t1" in status
        assert "Seccomp:\t2" in status  # the engine's default profile
        assert (await sh(c, "ls /sys/class/net"))[1].split() == ["lo"]
        code, out = await sh(c, "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 53), 3)'")
        assert code != 0 and "unreachable" in out
        for d in ("/tmp", "/workspace", "/dev/shm"):
            code, out = await sh(c, f"cp /usr/bin/true {d}/t && chmod +x {d}/t && {d}/t")
            assert code == 126 and "Permission denied" in out, (d, out)
        mem = (await sh(c, "cat /sys/fs/cgroup/memory/memory.limit_in_bytes"))[1].strip()
        assert int(mem) == 300 * 1024 * 1024
        assert (await sh(c, "cat /sys/fs/cgroup/pids/pids.max"))[1].strip() == "48"
    finally:
        await c.remove()
    assert not await c.running()


async def test_blocked_tools_absent_from_image(client, image: str, tmp_path: Path) -> None:
    c = await plain_container(client, image, tmp_path)
    try:
        code, out = await sh(c, "python3 - <<'EOF'\n"
                                "import os, sys\n"
                                f"blocked = set({list(DEFAULT_BLOCKED_TOOLS)!r})\n"
                                "for top in ('/usr', '/etc', '/opt'):\n"
                                "    for d, _, files in os.walk(top):\n"
                                "        for f in files:\n"
                                "            if f in blocked: print(os.path.join(d, f))\n"
                                "EOF")
        assert code == 0 and out.strip() == "", out
        assert (await sh(c, "command -v python3 git bash patch"))[0] == 0
    finally:
        await c.remove()


async def test_fork_bomb_is_capped_by_pids_limit(client, image: str, tmp_path: Path) -> None:
    c = await plain_container(client, image, tmp_path, pids=30)
    try:
        bomb = ("import os, time\n"
                "kids = []\n"
                "for _ in range(200):\n"
                "    try:\n"
                "        pid = os.fork()\n"
                "    except OSError:\n"
                "        break\n"
                "    if pid == 0:\n"
                "        time.sleep(60); os._exit(0)\n"
                "    kids.append(pid)\n"
                "print(len(kids), open('/sys/fs/cgroup/pids/pids.current').read().strip(), flush=True)\n"
                "for k in kids: os.kill(k, 9)\n")
        code, out = await c.exec_run(["python3", "-c", bomb])
        forked, current = map(int, out.split())
        assert 10 < forked < 38 and current <= 38, out  # pids.max is pids + 8
        assert (await sh(c, "echo alive"))[1].strip() == "alive"
    finally:
        await c.remove()


async def test_workspace_and_tmp_are_size_limited(client, image: str, tmp_path: Path) -> None:
    c = await plain_container(client, image, tmp_path, workspace_mb=8, tmp_mb=4)
    try:
        for d, cap in (("/workspace", 8), ("/tmp", 4)):
            code, out = await sh(c, f"dd if=/dev/zero of={d}/fill bs=1M count=32 2>&1; stat -c %s {d}/fill")
            assert "No space left on device" in out, out
            assert int(out.split()[-1]) <= cap * 1024 * 1024
    finally:
        await c.remove()


async def test_memory_bomb_is_killed(client, image: str, tmp_path: Path) -> None:
    c = await plain_container(client, image, tmp_path, memory_mb=96)
    try:
        code, out = await sh(c, "python3 -c 'x = bytearray(400 * 2**20); x[::4096] = b\"1\" * len(x[::4096])'")
        assert code == 137, (code, out)  # SIGKILL by the cgroup's OOM killer
        assert await c.running()
    finally:
        await c.remove()


async def test_failed_create_leaves_no_container(client, image: str, tmp_path: Path) -> None:
    cfg = SandboxConfig(backend="docker")
    with pytest.raises(SandboxStartError, match="not found"):
        await DockerContainer.create(client, 424242, **container_kwargs(
            image="swe-openenv-no-such-image:0", config=cfg, uid=424242, template_dir=tmp_path,
            runtime_path=RUNTIME_PATH))
    with pytest.raises(SandboxStartError):  # created, then start fails: bind source missing
        await DockerContainer.create(client, 424242, **container_kwargs(
            image=image, config=cfg, uid=424242, template_dir=tmp_path / "missing",
            runtime_path=RUNTIME_PATH))
    # no_leaked_containers asserts nothing was left
