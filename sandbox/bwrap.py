"""The bwrap backend: one bubblewrap jail and one runtime per session.

Where it runs (this module): user/mount/pid/net/ipc/uts/cgroup namespaces, a
read-only system view with blocked tools absent, the scrubbed template as the
read-only lower layer of the workspace, no environment from the host, a
per-session cgroup where the host allows one. What runs a command is the
runtime (``runtime.py``), which builds the writable layers and applies the
in-jail kernel layers before it starts the agent's shell.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import uuid
from pathlib import Path

from .base import Sandbox
from .cgroup import SessionCgroup
from .channel import MAX_LINE, RuntimeChannel
from .models import (
    CommandResult,
    ExactDiff,
    LayerMode,
    SandboxClosed,
    SandboxConfig,
    SandboxDied,
    SandboxError,
    SandboxInfo,
    SandboxStartError,
    WorkspaceSpec,
)
from .runtime_config import runtime_init, venv_mount_point
from .toolview import tool_view
from .workspace import cache_root, prepare_template

RUNTIME_SCRIPT = Path(__file__).with_name("runtime.py")
SANDBOX_UID = 1000
HOST_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "nsswitch.conf",
            "ssl", "ca-certificates", "mime.types", "protocols", "services", "gitconfig")
START_TIMEOUT_S = 30.0


def _python_prefix_of_venv(venv: Path) -> Path | None:
    cfg = venv / "pyvenv.cfg"
    if not cfg.exists():
        return None
    for line in cfg.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            return Path(value.strip()).resolve().parent
    return None


def _site_packages(prefix: Path) -> list[Path]:
    return sorted(p for p in prefix.glob("lib/python3*/site-packages") if p.is_dir())


def _synthetic_etc(cache: Path) -> Path:
    d = cache / "etc"
    d.mkdir(parents=True, exist_ok=True)
    files = {
        "passwd": f"root:x:0:0::/nonexistent:/usr/sbin/nologin\nagent:x:{SANDBOX_UID}:{SANDBOX_UID}::/tmp/home:/bin/bash\n"
                  "nobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\n",
        "group": f"root:x:0:\nagent:x:{SANDBOX_UID}:\nnogroup:x:65534:\n",
        "hosts": "127.0.0.1 localhost sandbox\n::1 localhost ip6-localhost\n",
        "hostname": "sandbox\n",
        "resolv.conf": "# no network in the sandbox\n",
    }
    for name, text in files.items():
        path = d / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    return d


class BwrapSandbox(Sandbox):
    """A session in a bubblewrap jail. Use :func:`sandbox.open_sandbox`."""

    def __init__(self, proc: asyncio.subprocess.Process, channel: RuntimeChannel, config: SandboxConfig,
                 cgroup: SessionCgroup | None, info: SandboxInfo, session_id: str) -> None:
        self.id = session_id
        self.info = info
        self._proc = proc
        self._channel = channel
        self._config = config
        self._cgroup = cgroup
        self._closed = False
        self._stderr_task: asyncio.Task | None = None

    # -- start ------------------------------------------------------------------
    @classmethod
    async def start(cls, spec: WorkspaceSpec, config: SandboxConfig) -> "BwrapSandbox":
        if spec.image_resident:
            raise SandboxStartError(f"image-resident tasks (code inside {spec.image!r}) need the docker backend")
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise SandboxStartError("bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
        template = await asyncio.to_thread(prepare_template, spec, config)
        cache = cache_root(config)
        view = await asyncio.to_thread(tool_view, config.policy.blocked_tools, cache)
        session_id = uuid.uuid4().hex[:12]

        argv, init = cls._command(bwrap, spec, config, template.path, view, cache)
        init["base_commit"] = template.base_commit
        cgroup = None
        if config.policy.cgroups is not LayerMode.off:
            cgroup = await asyncio.to_thread(SessionCgroup.create, f"s-{session_id}", config.limits.pids,
                                             config.limits.memory_mb)
            if cgroup is None and config.policy.cgroups is LayerMode.required:
                raise SandboxStartError("cgroups are required by the policy but cannot be created here")
        # The arguments go in through a pipe (--args), so /proc/1/cmdline inside
        # the jail shows no host paths.
        split = argv.index("--")
        args_r, args_w = os.pipe()
        os.write(args_w, b"".join(a.encode() + b"\0" for a in argv[1:split]))
        os.close(args_w)
        argv = [argv[0], "--args", str(args_r), *argv[split:]]
        if cgroup is not None:  # join the cgroup before bwrap forks anything
            argv = ["/bin/sh", "-c", 'for f in $0; do echo $$ > "$f"; done; exec "$@"',
                    " ".join(cgroup.procs_files), *argv]
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, start_new_session=True, limit=MAX_LINE,
                env={"PATH": "/usr/bin:/bin"}, pass_fds=(args_r,))
        except OSError as e:
            if cgroup:
                cgroup.remove()
            raise SandboxStartError(f"cannot start bwrap: {e}") from e
        finally:
            os.close(args_r)

        async def write(data: bytes) -> None:
            proc.stdin.write(data)
            await proc.stdin.drain()

        channel = RuntimeChannel(proc.stdout, write)
        info = SandboxInfo(backend="bwrap", cgroup=cgroup is not None, blocked_tools_absent=True,
                           base_commit=template.base_commit,
                           details={"blocked_paths_hidden": str(len(view.blocked_found))})
        box = cls(proc, channel, config, cgroup, info, session_id)
        box._stderr = bytearray()
        box._stderr_task = asyncio.create_task(box._drain_stderr())
        try:
            layers = await channel.handshake(init, START_TIMEOUT_S)
        except (SandboxError, asyncio.TimeoutError, OSError) as e:
            await box.close()
            detail = bytes(box._stderr[-2000:]).decode(errors="replace").strip()
            raise SandboxStartError(f"sandbox failed to start: {e}{' | ' + detail if detail else ''}") from None
        info.seccomp = bool(layers.get("seccomp"))
        info.landlock_abi = int(layers.get("landlock_abi") or 0)
        info.noexec_workspace = bool(layers.get("noexec_workspace"))
        info.cpu_policy = str(layers.get("cpu_policy") or "normal")
        return box

    @staticmethod
    def _command(bwrap: str, spec: WorkspaceSpec, config: SandboxConfig, template: Path, view, cache: Path):
        args = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
                "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "sandbox",
                "--ro-bind", "/usr", "/usr"]
        mounts = [(src, dst) for src, dst in view.farms]
        farm_targets = {dst for _, dst in view.farms}
        mounts += [(d, d) for d in view.rebinds if d not in farm_targets]
        for src, dst in sorted(mounts, key=lambda m: m[1]):
            args += ["--ro-bind", src, dst]
        for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            host = Path("/") / top
            if host.is_symlink():
                args += ["--symlink", os.readlink(host), f"/{top}"]
            elif host.is_dir():
                args += ["--ro-bind", str(host), f"/{top}"]
        etc = _synthetic_etc(cache)
        for name in sorted(os.listdir(etc)):
            args += ["--ro-bind", str(etc / name), f"/etc/{name}"]
        for name in HOST_ETC:
            if os.path.exists(f"/etc/{name}"):
                args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]

        # Interpreters: the one the runtime runs on, and the task's venv with its base.
        runtime_python = Path(getattr(sys, "_base_executable", sys.executable)).resolve()
        prefixes = {Path(sys.base_prefix).resolve()}
        exec_paths: list[str] = []
        venv = spec.python_env.resolve() if spec.python_env else None
        if venv is not None:
            if not venv.is_dir():
                raise SandboxStartError(f"python_env {spec.python_env} is not a directory")
            base = _python_prefix_of_venv(venv)
            if base is not None:
                prefixes.add(base)
            args += ["--ro-bind", str(venv), venv_mount_point(str(venv))]
        for prefix in sorted(prefixes):
            if not str(prefix).startswith("/usr"):
                args += ["--ro-bind", str(prefix), str(prefix)]
                exec_paths.append(str(prefix))
            for sp in _site_packages(prefix):  # the server's own packages stay out of sight
                if venv is None or not str(sp).startswith(str(venv)):
                    args += ["--tmpfs", str(sp)]

        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
                 "--dir", "/workspace", "--dir", "/.swe/upper", "--dir", "/.swe/template",
                 "--ro-bind", str(template), "/.swe/template",
                 "--ro-bind", str(RUNTIME_SCRIPT), "/.swe/runtime.py",
                 "--remount-ro", "/", "--chdir", "/",
                 "--setenv", "PATH", "/usr/bin:/bin", "--",
                 str(runtime_python), "-I", "-S", "/.swe/runtime.py"]
        init = runtime_init(spec, config, mode="overlay", template="/.swe/template", upper="/.swe/upper",
                            base_commit="", venv=venv_mount_point(str(venv)) if venv else None,
                            extra_exec_paths=exec_paths)
        return args, init

    async def _drain_stderr(self) -> None:
        try:
            while chunk := await self._proc.stderr.read(65536):
                self._stderr += chunk
                del self._stderr[:-65536]
        except Exception:  # noqa: BLE001 - diagnostics only
            pass

    # -- operations -------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise SandboxClosed(f"sandbox {self.id} is closed")
        if self._channel.dead:
            raise SandboxDied(self._channel.dead)

    async def run(self, command: str, timeout_s: float | None = None) -> CommandResult:
        self._check_open()
        lim = self._config.limits
        timeout = min(float(timeout_s or lim.command_timeout_s), lim.max_command_timeout_s)
        return await self._channel.run(command, timeout)

    async def run_isolated(self, command: str, timeout_s: float, output_limit: int) -> CommandResult:
        self._check_open()
        timeout = min(float(timeout_s), self._config.limits.max_command_timeout_s)
        return await self._channel.run_isolated(command, timeout, output_limit)

    async def read_file(self, path: str) -> bytes:
        self._check_open()
        return await self._channel.read_file(path)

    async def write_file(self, path: str, data: bytes) -> None:
        self._check_open()
        await self._channel.write_file(path, data)

    async def diff(self) -> str:
        self._check_open()
        return await self._channel.diff()

    async def diff_exact(self, patch_limit: int) -> ExactDiff:
        self._check_open()
        return await self._channel.diff_exact(patch_limit)

    async def apply_patch(self, patch: bytes) -> None:
        self._check_open()
        await self._channel.apply_patch(patch)

    @property
    def alive(self) -> bool:
        return not self._closed and not self._channel.dead and self._proc.returncode is None

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        proc = self._proc
        if proc.returncode is None:
            try:
                os.killpg(proc.pid, 9)
            except ProcessLookupError:
                pass
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except asyncio.TimeoutError:
            pass
        if self._stderr_task:
            self._stderr_task.cancel()
        if self._cgroup is not None:
            for _ in range(50):
                self._cgroup.kill_all()
                if not self._cgroup.pids():
                    break
                await asyncio.sleep(0.02)
            self._cgroup.remove()
