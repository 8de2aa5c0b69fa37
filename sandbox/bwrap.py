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
import functools
import hashlib
import importlib.util
import json
import os
import py_compile
import select
import shutil
import sys
import uuid
from pathlib import Path
from typing import Any

from .cgroup import SessionCgroup
from .channel import MAX_LINE
from .jail import JailSandbox
from .models import LayerMode, SandboxConfig, SandboxInfo, SandboxStartError, WorkspaceSpec
from .bytecode import bytecode_tree, environment_roots
from .runtime import venv_base
from .runtime_config import runtime_init, venv_mount_point
from .toolview import tool_view
from .workspace import cache_root, prepare_template

RUNTIME_SCRIPT = Path(__file__).with_name("runtime.py")
PYCACHE_MOUNT = "/.swe/pycache"  # the environment's bytecode, the lower layer of the jail's pycache prefix
RUNTIME_MOUNT = "/.swe/runtime.pyc"  # where the jail sees it, compiled (``_compiled_runtime``)
SANDBOX_UID = 1000
HOST_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "nsswitch.conf",
            "ssl", "ca-certificates", "mime.types", "protocols", "services", "gitconfig")
START_TIMEOUT_S = 30.0


def _python_prefix_of_venv(venv: Path) -> Path | None:
    base = venv_base(str(venv))
    return Path(base) if base is not None else None


def _site_packages(prefix: Path) -> list[Path]:
    return sorted(p for p in prefix.glob("lib/python3*/site-packages") if p.is_dir())


def _environment_bytecode(spec: WorkspaceSpec, cache: Path) -> Path | None:
    """The read-only first layer of the jail's pycache prefix (``sandbox/bytecode.py``): the bytecode
    the task's environment and its interpreter's standard library hold (the ``python3`` on the shell's
    PATH where the task has no environment)."""
    venv = spec.python_env.resolve() if spec.python_env else None
    if venv is not None and not venv.is_dir():
        return None  # the start fails on it, naming it
    base = _python_prefix_of_venv(venv) if venv is not None else Path("/usr")
    roots = environment_roots(venv, venv_mount_point(str(venv)) if venv else None, base)
    return bytecode_tree(cache, roots)


def _compiled_runtime(cache: Path) -> Path:
    """``runtime.py`` compiled once per source and interpreter, for the jail to run: Python then
    starts it without compiling 1,600 lines each time (a cold start 40 ms sooner, docs/deploy.md).
    Its code objects name ``/.swe/runtime.pyc``, never a host path."""
    stat = RUNTIME_SCRIPT.stat()
    return _compiled(cache, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _compiled(cache: Path, mtime_ns: int, size: int) -> Path:
    source = RUNTIME_SCRIPT.read_bytes()
    digest = hashlib.sha256(importlib.util.MAGIC_NUMBER + source).hexdigest()[:16]
    target = cache / "runtime" / f"runtime-{digest}.pyc"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f"{target.name}.{uuid.uuid4().hex}.partial")
        try:
            py_compile.compile(str(RUNTIME_SCRIPT), cfile=str(partial), dfile=RUNTIME_MOUNT, doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
            os.replace(partial, target)  # whole or not at all: starts in other processes may read it now
        finally:
            partial.unlink(missing_ok=True)
    return target


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


def _join_cgroup(cgroup: SessionCgroup, bwrap_pid: int, info_fd: int) -> None:
    """Move the jail's processes into the session's cgroup before the runtime reads its init
    message (blocking: call in a thread; closes ``info_fd``).

    Nothing of the session forks before the runtime has its init message: bwrap (``bwrap_pid``),
    its child (the jail's pid 1, named on ``info_fd``) and, once that one has set up the mounts,
    the runtime are all there is. They are moved while the jail starts, not before it (a shell
    joining the cgroup, then exec'ing bwrap, kept bwrap waiting for the move: a migration waits
    for an RCU grace period, about 10 ms each start). Whatever they start from then on starts in
    the cgroup: a move holds off forks until it is done, and the children listed after a move are
    moved in turn. (What the runtime allocated before its move, its interpreter's start, is
    charged where the server's memory is.) OSError when any of it fails; nothing to move when
    bwrap ended before making its child (the handshake then reports why)."""
    data = b""
    try:
        while True:
            if not select.select([info_fd], [], [], START_TIMEOUT_S)[0]:
                raise OSError(f"bwrap named no child within {START_TIMEOUT_S:g} s")
            chunk = os.read(info_fd, 4096)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(info_fd)
    if not data.strip():
        return  # bwrap failed before its clone (a child it made dies with it: --die-with-parent)
    try:
        child = int(json.loads(data)["child-pid"])
    except (ValueError, KeyError, TypeError) as e:
        raise OSError(f"bwrap named no child pid ({data[:200]!r})") from e
    todo, moved = [bwrap_pid, child], set()
    while todo:
        pid = todo.pop()
        if pid in moved:
            continue
        for procs in cgroup.procs_files:
            with open(procs, "w") as f:
                f.write(str(pid))
        moved.add(pid)
        if pid != bwrap_pid:  # (bwrap's own child is named above)
            todo += _children_of(pid)


def _children_of(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (its /proc children file; a scan of /proc where the kernel has none)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except FileNotFoundError:
        if not os.path.exists(f"/proc/{pid}"):
            raise
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    if int(f.read().rsplit(b")", 1)[1].split()[1]) == pid:
                        found.append(int(name))
            except (OSError, IndexError, ValueError):
                pass
    return found


class BwrapSandbox(JailSandbox):
    """A session in a bubblewrap jail. Use :func:`sandbox.open_sandbox`."""

    start_timeout_s = START_TIMEOUT_S

    def __init__(self, proc: asyncio.subprocess.Process, config: SandboxConfig, cgroup: SessionCgroup | None,
                 info: SandboxInfo, session_id: str) -> None:
        super().__init__(session_id, config, info, proc.stdout, self._write)
        self._proc = proc
        self._cgroup = cgroup
        self._stderr = bytearray()
        self._stderr_task = asyncio.create_task(self._drain_stderr())

    @classmethod
    async def launch(cls, spec: WorkspaceSpec, config: SandboxConfig) -> tuple["BwrapSandbox", dict[str, Any]]:
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise SandboxStartError("bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
        template = await asyncio.to_thread(prepare_template, spec, config)
        cache = cache_root(config)
        view = await asyncio.to_thread(tool_view, config.policy.blocked_tools, cache)
        session_id = uuid.uuid4().hex[:12]

        pycache = await asyncio.to_thread(_environment_bytecode, spec, cache)
        argv, init = cls._command(bwrap, spec, config, template.path, view, cache, pycache)
        init["base_commit"] = template.base_commit
        cgroup = None
        if config.policy.cgroups is not LayerMode.off:
            cgroup = await asyncio.to_thread(SessionCgroup.create, SessionCgroup.name(session_id), config.limits.pids,
                                             config.limits.memory_mb)
            if cgroup is None and config.policy.cgroups is LayerMode.required:
                raise SandboxStartError("cgroups are required by the policy but cannot be created here")
        # The arguments go in through a pipe (--args), so /proc/1/cmdline inside
        # the jail shows no host paths.
        split = argv.index("--")
        info_r = info_w = None
        if cgroup is not None:  # bwrap says its child's pid here: the jail's processes join the cgroup
            info_r, info_w = os.pipe()
            argv[split:split] = ["--info-fd", str(info_w)]
            split += 2
        args_r, args_w = os.pipe()
        os.write(args_w, b"".join(a.encode() + b"\0" for a in argv[1:split]))
        os.close(args_w)
        argv = [argv[0], "--args", str(args_r), *argv[split:]]
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, start_new_session=True, limit=MAX_LINE,
                env={"PATH": "/usr/bin:/bin"}, pass_fds=(args_r,) if info_w is None else (args_r, info_w))
        except BaseException as e:
            if cgroup:
                cgroup.remove()
            if info_r is not None:
                os.close(info_r)
            if isinstance(e, OSError):
                raise SandboxStartError(f"cannot start bwrap: {e}") from e
            raise
        finally:
            os.close(args_r)
            if info_w is not None:
                os.close(info_w)
        if cgroup is not None:
            try:
                await asyncio.to_thread(_join_cgroup, cgroup, proc.pid, info_r)
            except BaseException as e:
                try:
                    os.killpg(proc.pid, 9)
                except ProcessLookupError:
                    pass
                await proc.wait()
                cgroup.kill_all()
                cgroup.remove()
                if isinstance(e, OSError):
                    raise SandboxStartError(f"the jail cannot join its cgroup: {e}") from e
                raise
        info = SandboxInfo(backend="bwrap", cgroup=cgroup is not None, blocked_tools_absent=True,
                           base_commit=template.base_commit,
                           details={"blocked_paths_hidden": str(len(view.blocked_found))})
        return cls(proc, config, cgroup, info, session_id), init

    @staticmethod
    def _command(bwrap: str, spec: WorkspaceSpec, config: SandboxConfig, template: Path, view, cache: Path,
                 pycache: Path | None = None):
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
                 "--dir", "/workspace", "--dir", "/.swe/upper", "--dir", "/.swe/private", "--dir", "/.swe/template",
                 "--ro-bind", str(template), "/.swe/template",
                 "--ro-bind", str(_compiled_runtime(cache)), RUNTIME_MOUNT,
                 *(["--ro-bind", str(pycache), PYCACHE_MOUNT] if pycache is not None else []),
                 "--remount-ro", "/", "--chdir", "/",
                 "--setenv", "PATH", "/usr/bin:/bin", "--",
                 str(runtime_python), "-I", "-S", RUNTIME_MOUNT]
        init = runtime_init(spec, config, mode="overlay", template="/.swe/template", upper="/.swe/upper",
                            base_commit="", venv=venv_mount_point(str(venv)) if venv else None,
                            extra_exec_paths=exec_paths)
        if pycache is not None:
            init["pycache_lower"] = PYCACHE_MOUNT
        return args, init

    # -- the jail -------------------------------------------------------------------
    async def _write(self, data: bytes) -> None:
        self._proc.stdin.write(data)
        await self._proc.stdin.drain()

    async def _drain_stderr(self) -> None:
        try:
            while chunk := await self._proc.stderr.read(65536):
                self._stderr += chunk
                del self._stderr[:-65536]
        except Exception:  # noqa: BLE001 - diagnostics only
            pass

    @property
    def jail_alive(self) -> bool:
        return self._proc.returncode is None

    def jail_stderr(self) -> str:
        return bytes(self._stderr).decode(errors="replace")

    async def kill_jail(self) -> None:
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
        if self._cgroup is not None:
            for _ in range(50):
                self._cgroup.kill_all()
                if not self._cgroup.pids():
                    break
                await asyncio.sleep(0.02)
            self._cgroup.remove()
        # the jail is gone: what it wrote last on stderr arrives now (start failures quote it)
        await asyncio.wait({self._stderr_task}, timeout=0.5)
        self._stderr_task.cancel()
