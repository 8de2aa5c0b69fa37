"""The docker backend: one hardened container per session, driven over the engine's API.

The container runs the sandbox image (docker/build-images.sh) with no network, a
read-only root, no capabilities, no-new-privileges, pids/memory/CPU limits, a
per-session non-root uid, ``--init`` as reaper, and size-limited ``noexec`` tmpfs
mounts for /workspace and /tmp. The prepared workspace template and the in-sandbox
runtime (``sandbox/runtime.py``, shared with the bwrap backend) are bind-mounted
read-only; the runtime is ``exec``'d attached to a hijacked API connection whose
8-byte-framed output stream this module demultiplexes itself.

Blocking SDK calls run in threads; the exec stream is plain asyncio.

Leaks: every container is labelled, ``auto_remove``d, and its main process is a
watchdog that ends the container once no runtime process is left (the runtime
exits when its stdin, our connection, closes), so a crashed host cannot leave
containers behind. :func:`reap_containers` removes stragglers by label.

Host paths: bind sources are paths *on the engine's host*. When this code itself
runs in a container beside the engine (sibling containers via the mounted socket),
set ``SWE_DOCKER_PATH_MAP="/path/here=/path/on/host[;...]"`` so the template cache,
the runtime script and python envs are translated to the engine's view. The
alternative (a named volume for the cache) avoids the map but copies each template
into the volume and ties the cache to the engine; the map keeps one cache on disk.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import random
import secrets
import struct
import threading
import urllib.parse
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .base import Sandbox
from .image_workspace import TOOLS_LABEL
from .runtime_config import runtime_init, venv_mount_point
from .models import (
    CommandResult,
    CommandStatus,
    ExactDiff,
    PathError,
    SandboxClosed,
    SandboxConfig,
    SandboxDied,
    SandboxInfo,
    SandboxStartError,
    WorkspaceSpec,
)

LABEL = "org.swe-openenv.sandbox"
LABEL_OWNER = "org.swe-openenv.owner"
TEMPLATE_MOUNT = "/.swe/template"
RUNTIME_MOUNT = "/.swe/runtime.py"
RUNTIME_ARGV = ["python3", "-I", "-S", RUNTIME_MOUNT]
RUNTIME_PATH = Path(__file__).with_name("runtime.py")
DEFAULT_SOCKET = "/var/run/docker.sock"
_STDERR_KEEP = 16 * 1024

# The container's main process, under docker-init (PID 1, the reaper), runs as
# WATCHDOG_USER, so neither the agent nor the runtime's kill sweeps (session uid) can
# signal it. It looks for the runtime every 50 ms for up to 60 s (a runtime that dies
# unseen within 50 ms of its start is caught by that limit), then polls every 2 s and
# exits, ending and auto-removing the container, once no runtime is left.
WATCHDOG_USER = "65534:65534"
# It reads /proc itself (task images need not have pgrep); the bracket keeps the
# pattern from matching the watchdog's own command line.
_RUNTIME_ALIVE = "grep -aqs 'I.-S./\\.swe/[r]untime\\.py' /proc/[0-9]*/cmdline"
WATCHDOG = (
    f'i=0; while ! {_RUNTIME_ALIVE}; do '
    'i=$((i+1)); [ "$i" -gt 1200 ] && exit 1; sleep 0.05; done; '
    f'while {_RUNTIME_ALIVE}; do sleep 2; done'
)


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


@dataclass
class DockerOptions:
    """Backend settings outside SandboxConfig, from the environment (``SWE_DOCKER_*``)."""

    cpus: float = field(default_factory=lambda: _env_float("SWE_DOCKER_CPUS", 1.0))
    uid_base: int = field(default_factory=lambda: int(_env_float("SWE_DOCKER_UID_BASE", 200000)))
    uid_span: int = field(default_factory=lambda: int(_env_float("SWE_DOCKER_UID_SPAN", 100000)))
    path_map: str = field(default_factory=lambda: os.environ.get("SWE_DOCKER_PATH_MAP", ""))
    start_timeout_s: float = field(default_factory=lambda: _env_float("SWE_DOCKER_START_TIMEOUT_S", 60.0))
    # "auto": image-resident workspaces copy-on-write (an overlay volume, sandbox/cow.py) where the
    # engine can mount one, else copied; "copy": always copied; "overlay": always copy-on-write.
    workspace: str = field(default_factory=lambda: os.environ.get("SWE_DOCKER_WORKSPACE", "auto"))

    def host_path(self, path: Path) -> str:
        """``path`` as the engine's host sees it (longest matching prefix of ``path_map``)."""
        text = str(Path(path).resolve())
        best: tuple[str, str] | None = None
        for item in filter(None, self.path_map.split(";")):
            local, _, host = item.partition("=")
            local = local.rstrip("/") or "/"
            if (text == local or text.startswith(local.rstrip("/") + "/")) and (
                best is None or len(local) > len(best[0])
            ):
                best = (local, host.rstrip("/"))
        if best is None:
            return text
        return best[1] + text[len(best[0].rstrip("/")):]


class _UidPool:
    """Per-session uids, so RLIMIT_NPROC (counted per uid host-wide) cannot be
    exhausted by one session's fork bomb for the others. Unique within a process;
    a random start makes clashes between processes on one engine unlikely."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._used: set[int] = set()
        self._next = random.randrange(1 << 30)

    def take(self, opts: DockerOptions) -> int:
        with self._lock:
            for _ in range(opts.uid_span):
                uid = opts.uid_base + self._next % opts.uid_span
                self._next += 1
                if uid not in self._used:
                    self._used.add(uid)
                    return uid
        raise SandboxStartError("no free sandbox uid")

    def give(self, uid: int) -> None:
        with self._lock:
            self._used.discard(uid)


_UIDS = _UidPool()
_CLIENTS: dict[str | None, Any] = {}
_CLIENTS_LOCK = threading.Lock()
_OWNER = f"{os.uname().nodename}:{os.getpid()}:{secrets.token_hex(4)}"
_SEQ = itertools.count()
_log = logging.getLogger(__name__)
_COW_REFUSED: set[str | None] = set()  # engines (docker_url) that could not mount a copy-on-write volume


def docker_client(url: str | None = None) -> Any:
    """A cached ``docker.DockerClient`` for ``url`` (None: from the environment)."""
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(url)
        if client is None:
            import docker  # optional dependency (extra "env")

            try:
                client = docker.DockerClient(base_url=url) if url else docker.from_env()
                client.ping()
            except Exception as exc:  # DockerException, requests errors, FileNotFoundError
                raise SandboxStartError(f"no Docker engine at {url or 'default socket'}: {exc}") from exc
            _CLIENTS[url] = client
        return client


def container_kwargs(
    *,
    image: str,
    config: SandboxConfig,
    uid: int,
    template_dir: Path,
    runtime_path: Path,
    python_env: Path | None = None,
    options: DockerOptions | None = None,
    name: str | None = None,
    watchdog: bool = True,
    exec_workspace: bool = False,
    workspace_mount: Any = None,
    runtime_bundle: Path | None = None,
) -> dict[str, Any]:
    """``workspace_mount``: a mount for /workspace (a copy-on-write volume) instead of a tmpfs;
    ``runtime_bundle``: a Python for the runtime, for images without one (``runtime_bundle.py``)."""
    """Arguments of ``containers.create`` for one hardened session container."""
    from docker.types import Mount, Ulimit

    opts = options or DockerOptions()
    lim = config.limits
    ro = dict(type="bind", read_only=True)
    mounts = [
        Mount(TEMPLATE_MOUNT, opts.host_path(template_dir), **ro),
        Mount(RUNTIME_MOUNT, opts.host_path(runtime_path), **ro),
    ]
    if runtime_bundle is not None:
        from .runtime_bundle import MOUNT

        mounts.append(Mount(MOUNT, opts.host_path(runtime_bundle), **ro))
    if python_env is not None:
        env_path = str(Path(python_env).absolute())
        mounts.append(Mount(venv_mount_point(env_path, relocate=True), opts.host_path(Path(python_env)), **ro))
    tmpfs_opts = "rw,noexec,nosuid,nodev"
    tmpfs = {
        # image-resident tasks' harnesses run scripts from the repository (./tests/runtests.py)
        "/workspace": f"{'rw,exec,nosuid,nodev' if exec_workspace else tmpfs_opts},size={lim.workspace_mb}m,"
                      f"uid={uid},gid={uid},mode=0700",
        "/tmp": f"{tmpfs_opts},size={lim.tmp_mb}m,mode=1777",
        # the runtime's private diff state; the agent's Landlock layer cannot write here
        "/.swe/private": f"{tmpfs_opts},size={lim.workspace_mb}m,uid={uid},gid={uid},mode=0700",
    }
    if workspace_mount is not None:
        del tmpfs["/workspace"]
        mounts.append(workspace_mount)
    return dict(
        image=image,
        command=["/bin/sh", "-c", WATCHDOG] if watchdog else ["sleep", "infinity"],
        name=name,
        labels={LABEL: "1", LABEL_OWNER: _OWNER},
        user=WATCHDOG_USER,
        working_dir="/workspace",
        hostname="sandbox",
        detach=True,
        init=True,
        auto_remove=watchdog,
        network_mode="none",
        read_only=True,
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        pids_limit=lim.pids + 8,  # + init, watchdog, runtime and the shell
        mem_limit=f"{lim.memory_mb}m",
        memswap_limit=f"{lim.memory_mb}m",
        nano_cpus=int(opts.cpus * 1e9),
        shm_size="16m",
        ulimits=[Ulimit(name="core", soft=0, hard=0)],
        tmpfs=tmpfs,
        mounts=mounts,
        environment={"HOME": "/workspace"},
    )


class ExecStream:
    """The runtime's stdio over one hijacked engine connection.

    ``reader`` yields the exec's stdout (de-framed), ``writer`` feeds its stdin raw;
    stderr is kept (last 16 KiB) in ``stderr_tail`` for diagnostics.
    """

    def __init__(self, sock_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = asyncio.StreamReader(limit=64 * 1024 * 1024)
        self.writer = writer
        self._sock_reader = sock_reader
        self._stderr: deque[bytes] = deque()
        self._stderr_len = 0
        self._pump = asyncio.get_running_loop().create_task(self._demux())

    @property
    def stderr_tail(self) -> str:
        return b"".join(self._stderr).decode("utf-8", "replace")

    async def write(self, data: bytes) -> None:
        """Send ``data`` to the exec's stdin."""
        self.writer.write(data)
        await self.writer.drain()

    @property
    def at_eof(self) -> bool:
        return self._pump.done()

    async def _demux(self) -> None:
        try:
            while True:
                header = await self._sock_reader.readexactly(8)
                kind, size = header[0], struct.unpack(">I", header[4:])[0]
                payload = await self._sock_reader.readexactly(size) if size else b""
                if kind == 1:
                    self.reader.feed_data(payload)
                elif kind == 2:
                    self._stderr.append(payload)
                    self._stderr_len += len(payload)
                    while self._stderr_len > _STDERR_KEEP and len(self._stderr) > 1:
                        self._stderr_len -= len(self._stderr.popleft())
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            self.reader.feed_eof()

    async def close(self) -> None:
        self._pump.cancel()
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass
        try:
            await self._pump
        except asyncio.CancelledError:
            pass


async def open_exec_stream(client: Any, exec_id: str) -> ExecStream:
    """Start exec ``exec_id`` on a fresh connection upgraded to a raw stream."""
    api = client.api
    url = api.base_url
    if url.startswith("http+docker://"):  # unix socket: the SDK hides the path
        path = urllib.parse.unquote(getattr(api, "_custom_adapter").socket_path)
        reader, writer = await asyncio.open_unix_connection(path)
    elif url.startswith("http://"):
        parts = urllib.parse.urlsplit(url)
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port or 80)
    else:
        raise SandboxStartError(f"exec streaming over {url} is not supported (use unix:// or tcp://)")
    body = json.dumps({"Detach": False, "Tty": False}).encode()
    head = (
        f"POST /v{api._version}/exec/{exec_id}/start HTTP/1.1\r\nHost: docker\r\n"
        "Content-Type: application/json\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    writer.write(head + body)
    await writer.drain()
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
        writer.close()
        raise SandboxStartError(f"engine closed the exec connection: {exc}") from exc
    status = raw.split(b"\r\n", 1)[0].decode("latin-1")
    if status.split()[1:2] not in (["101"], ["200"]):
        writer.close()
        raise SandboxStartError(f"exec start refused: {status}")
    return ExecStream(reader, writer)


def reap_containers(client: Any, owner: str | None = None) -> int:
    """Force-remove sandbox containers (of ``owner``, or all), then their workspace volumes.
    Returns how many containers."""
    import docker.errors

    labels = [f"{LABEL}=1"] + ([f"{LABEL_OWNER}={owner}"] if owner else [])
    n = 0
    for c in client.containers.list(all=True, filters={"label": labels}):
        if _remove(client, c.id):
            n += 1
    for v in client.api.volumes(filters={"label": labels}).get("Volumes") or []:
        try:
            client.api.remove_volume(v["Name"], force=True)
        except docker.errors.APIError:
            pass  # still in use by a container being removed
    return n


def _remove(client: Any, container_id: str) -> bool:
    import docker.errors

    try:
        client.api.remove_container(container_id, force=True)
        return True
    except docker.errors.NotFound:
        return False
    except docker.errors.APIError as exc:  # 409: removal already in progress (auto_remove)
        if exc.status_code == 409:
            return False
        raise


class DockerContainer:
    """One started session container (no runtime yet); async wrappers of the SDK."""

    def __init__(self, client: Any, container_id: str, uid: int) -> None:
        self.client = client
        self.id = container_id
        self.uid = uid
        self.cow: Any = None  # its copy-on-write workspace volume, removed with it
        self._removed = False

    @classmethod
    async def create(cls, client: Any, uid: int, **kwargs: Any) -> "DockerContainer":
        """Create and start; on any failure nothing is left behind."""
        import docker.errors

        cid: str | None = None
        try:
            c = await asyncio.to_thread(client.containers.create, **kwargs)
            cid = c.id
            await asyncio.to_thread(client.api.start, cid)
        except docker.errors.ImageNotFound as exc:
            raise SandboxStartError(
                f"image {kwargs['image']!r} not found (build it with docker/build-images.sh)"
            ) from exc
        except (docker.errors.DockerException, OSError) as exc:
            if cid:
                await asyncio.to_thread(_remove, client, cid)
            raise SandboxStartError(f"container start failed: {exc}") from exc
        except BaseException:
            if cid:
                await asyncio.to_thread(_remove, client, cid)
            raise
        return cls(client, cid, uid)

    async def exec_stream(self, argv: list[str], environment: dict[str, str] | None = None) -> ExecStream:
        """``argv`` in the container with stdin/stdout/stderr attached."""
        import docker.errors

        try:
            res = await asyncio.to_thread(
                self.client.api.exec_create, self.id, argv, stdin=True, stdout=True, stderr=True,
                tty=False, environment=environment, workdir="/workspace", user=f"{self.uid}:{self.uid}",
            )
        except docker.errors.DockerException as exc:
            raise SandboxStartError(f"exec failed: {exc}") from exc
        return await open_exec_stream(self.client, res["Id"])

    async def exec_run(self, argv: list[str], user: str | None = None) -> tuple[int, bytes]:
        """Run ``argv`` to completion as the session uid (or ``user``); ``(exit code, output)``."""
        res = await asyncio.to_thread(
            self.client.containers.get(self.id).exec_run, argv, user=user or f"{self.uid}:{self.uid}")
        return res.exit_code, res.output

    async def running(self) -> bool:
        import docker.errors

        try:
            state = await asyncio.to_thread(self.client.api.inspect_container, self.id)
        except docker.errors.NotFound:
            return False
        return bool(state["State"]["Running"])

    async def remove(self) -> None:
        if not self._removed:
            self._removed = True
            await asyncio.to_thread(_remove, self.client, self.id)
            if self.cow is not None:
                await asyncio.to_thread(self.cow.remove)
            _UIDS.give(self.uid)


class DockerSandbox(Sandbox):
    """A session in its own container, speaking the runtime protocol over an exec stream."""

    def __init__(self, config: SandboxConfig, container: DockerContainer, stream: ExecStream,
                 channel: Any, info: SandboxInfo, cow: Any = None) -> None:
        self.id = container.id[:12]
        self._cow = cow
        self.info = info
        self.container = container
        self._limits = config.limits
        self._stream = stream
        self._channel = channel
        self._closed = False

    @classmethod
    async def start(cls, spec: WorkspaceSpec, config: SandboxConfig) -> "DockerSandbox":
        from .channel import RuntimeChannel
        from .workspace import prepare_template

        opts = DockerOptions()
        client = await asyncio.to_thread(docker_client, config.docker_url)
        template = await asyncio.to_thread(prepare_template, spec, config)
        if spec.image_resident:
            from .image_workspace import derived_image

            image = await asyncio.to_thread(derived_image, client, spec.image, spec.image_workdir,
                                            config.policy.blocked_tools)
        else:
            image = spec.image or config.docker_image
        bundle = None
        if spec.image_resident and not await asyncio.to_thread(_has_python, client, image):
            from .runtime_bundle import build_bundle
            from .workspace import cache_root

            bundle = await asyncio.to_thread(build_bundle, client, config.docker_image, cache_root(config))
        uid = _UIDS.take(opts)
        cow = None
        try:
            if opts.workspace == "overlay" or (opts.workspace == "auto" and spec.image_resident
                                               and config.docker_url not in _COW_REFUSED):
                cow = await _cow_workspace(client, config, opts, Path(template.path), uid)
            kwargs = container_kwargs(
                image=image, config=config, uid=uid, template_dir=Path(template.path),
                runtime_path=RUNTIME_PATH, python_env=spec.python_env, options=opts,
                name=f"swe-sbx-{os.getpid()}-{next(_SEQ)}-{secrets.token_hex(3)}",
                exec_workspace=spec.image_resident, workspace_mount=cow.mount() if cow else None,
                runtime_bundle=bundle,
            )
            container = await DockerContainer.create(client, uid, **kwargs)
        except BaseException:
            _UIDS.give(uid)
            if cow is not None:
                await asyncio.to_thread(cow.remove)
            raise
        container.cow = cow
        stream: ExecStream | None = None
        try:
            if bundle is not None:
                from .runtime_bundle import runtime_argv

                stream = await container.exec_stream(runtime_argv(bundle, RUNTIME_MOUNT))
            else:
                stream = await container.exec_stream(RUNTIME_ARGV)
            channel = RuntimeChannel(stream.reader, stream.write)
            init = await channel.handshake(init_message(spec, config, template.base_commit, mounted=cow is not None,
                                                        bundle=bundle is not None), opts.start_timeout_s)
            tools_absent = await asyncio.to_thread(_image_lacks_tools, client, image, config.policy.blocked_tools)
        except BaseException as exc:
            detail = stream.stderr_tail[-2000:] if stream else ""
            if stream:
                await stream.close()
            await container.remove()
            if isinstance(exc, (SandboxStartError, asyncio.CancelledError, KeyboardInterrupt)):
                raise
            raise SandboxStartError(f"runtime failed to start: {exc} {detail}".strip()) from exc
        info = SandboxInfo(
            backend="docker",
            seccomp=bool(init.get("seccomp")),
            landlock_abi=int(init.get("landlock_abi") or 0),
            cpu_policy=str(init.get("cpu_policy") or "normal"),
            cgroup=True,  # the engine enforces memory, pids and CPU limits
            noexec_workspace=bool(init.get("noexec_workspace")),
            blocked_tools_absent=tools_absent,
            base_commit=template.base_commit,
            details={"container": container.id[:12], "uid": str(uid), "image": image,
                     "engine_seccomp": "default profile", "workspace": "copy-on-write" if cow else "copy",
                     "runtime_python": "bundled" if bundle is not None else "image",
                     **({"task_image": str(spec.image), "workdir": str(spec.image_workdir)}
                        if spec.image_resident else {})},
        )
        return cls(config, container, stream, channel, info, cow)

    @property
    def alive(self) -> bool:
        return not self._closed and not self._stream.at_eof and not self._channel.dead

    def _check(self) -> None:
        if self._closed:
            raise SandboxClosed(f"sandbox {self.id} is closed")
        if self._channel.dead:  # reported once as data, from then on raised
            raise SandboxDied(f"{self._channel.dead} {self._stream.stderr_tail[-500:]}".strip())

    async def run(self, command: str, timeout_s: float | None = None) -> CommandResult:
        self._check()
        lim = self._limits
        timeout = min(timeout_s if timeout_s and timeout_s > 0 else lim.command_timeout_s, lim.max_command_timeout_s)
        result = await self._channel.run(command, timeout)
        if result.status is CommandStatus.sandbox_died and not result.output:
            result.output = f"[sandbox died: {self._channel.dead or 'runtime gone'}]"
        if self._cow is not None:  # a copy-on-write upper layer is on the host's disk: hold it to the limit
            used = await asyncio.to_thread(self._cow.used_bytes)
            if used > lim.workspace_mb * 1024 * 1024:
                await self.close()
                result.status = CommandStatus.sandbox_died
                result.output += (f"\n[the workspace holds {used // (1024 * 1024)} MB of changes, over its "
                                  f"{lim.workspace_mb} MB limit: the session is closed]")
        return result

    async def run_isolated(self, command: str, timeout_s: float, output_limit: int) -> CommandResult:
        self._check()
        timeout = min(float(timeout_s), self._limits.max_command_timeout_s)
        result = await self._channel.run_isolated(command, timeout, output_limit)
        if result.status is CommandStatus.sandbox_died and not result.output:
            result.output = f"[sandbox died: {self._channel.dead or 'runtime gone'}]"
        return result

    async def read_file(self, path: str) -> bytes:
        self._check()
        return await self._channel.read_file(path)

    async def write_file(self, path: str, data: bytes) -> None:
        self._check()
        if len(data) > self._limits.max_file_write_bytes:
            raise PathError(f"{len(data)} bytes exceed the write limit", reason="too_large")
        await self._channel.write_file(path, data)

    async def diff(self) -> str:
        self._check()
        return await self._channel.diff()

    async def diff_exact(self, patch_limit: int) -> ExactDiff:
        self._check()
        return await self._channel.diff_exact(patch_limit)

    async def apply_patch(self, patch: bytes) -> None:
        self._check()
        await self._channel.apply_patch(patch)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self._stream.close()
        finally:
            await self.container.remove()


async def _cow_workspace(client: Any, config: SandboxConfig, opts: DockerOptions, template: Path, uid: int) -> Any:
    """A copy-on-write volume for the session, or None to copy (``auto`` on an engine that refuses)."""
    import docker.errors

    from .cow import CowWorkspace
    from .workspace import cache_root

    try:
        return await asyncio.to_thread(CowWorkspace.create, client, template, uid, cache_root(config),
                                       {LABEL: "1", LABEL_OWNER: _OWNER}, opts.host_path)
    except (docker.errors.APIError, OSError) as exc:
        if opts.workspace == "overlay":
            raise SandboxStartError(f"no copy-on-write workspace: {exc}") from exc
        _log.warning("copy-on-write workspace refused (%s): sessions on this engine copy their workspace", exc)
        _COW_REFUSED.add(config.docker_url)  # "auto" does not ask this engine again
        return None


_image_python: dict[str, bool] = {}


def _has_python(client: Any, image: str) -> bool:
    if image not in _image_python:
        from .runtime_bundle import image_has_python

        _image_python[image] = image_has_python(client, image)
    return _image_python[image]


def init_message(spec: WorkspaceSpec, config: SandboxConfig, base_commit: str,
                 mounted: bool = False, bundle: bool = False) -> dict[str, Any]:
    """The runtime's init line: a copied workspace, or one the engine ``mounted`` (copy-on-write)."""
    # Relocated: the image's own folders on the host path (/root is 0700) may not let the agent's uid through.
    venv = (venv_mount_point(str(Path(spec.python_env).absolute()), relocate=True)
            if spec.python_env is not None else spec.image_env)
    return runtime_init(spec, config, mode="mounted" if mounted else "copy", template=TEMPLATE_MOUNT, upper="",
                        base_commit=base_commit, venv=venv,
                        extra_exec_paths=(["/workspace"] if spec.image_resident else [])
                        + (["/.swe/py"] if bundle else []))


_image_tools: dict[str, frozenset[str]] = {}


def _image_lacks_tools(client: Any, image: str, blocked: tuple[str, ...]) -> bool:
    """Whether ``image`` was built with every tool of ``blocked`` removed (its label says)."""
    if image not in _image_tools:
        labels = client.api.inspect_image(image)["Config"].get("Labels") or {}
        _image_tools[image] = frozenset(labels.get(TOOLS_LABEL, "").split())
    return set(blocked) <= _image_tools[image]


__all__ = [
    "DockerContainer", "DockerOptions", "DockerSandbox", "ExecStream", "container_kwargs",
    "docker_client", "init_message", "open_exec_stream", "reap_containers",
]
