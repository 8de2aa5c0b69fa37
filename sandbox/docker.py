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
set ``SWE_DOCKER_PATH_MAP="/path/here=/path/on/host[;...]"`` (``DockerSettings.path_map``, with
the other ``SWE_DOCKER_*`` settings in ``docker_engine.py``) so the template cache,
the runtime script and python envs are translated to the engine's view. The
alternative (a named volume for the cache) avoids the map but copies each template
into the volume and ties the cache to the engine; the map keeps one cache on disk.
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
import urllib.parse
from collections import deque
from pathlib import Path
from typing import Any

import docker  # the SDK (extra "env"), imported here, on the importing thread: the blocking calls run on
import docker.errors  # worker threads, and two threads importing it at once can die on _DeadlockError
from pydantic import ValidationError

from .backends import DockerBackend
from .docker_engine import ENV_PREFIX, LABEL, LABEL_OWNER, DockerEngine, DockerSettings, docker_client, docker_engine
from .image_workspace import TOOLS_LABEL
from .images import image_store
from .jail import JailSandbox
from .models import SandboxConfig, SandboxInfo, SandboxStartError, WorkspaceSpec
from .runtime_bundle import MOUNT as BUNDLE_MOUNT
from .runtime_bundle import build_bundle, image_has_python, runtime_argv
from .runtime_config import runtime_init, venv_mount_point
from .workspace import cache_root

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


_log = logging.getLogger(__name__)


def container_kwargs(
    *,
    image: str,
    config: SandboxConfig,
    uid: int,
    template_dir: Path,
    runtime_path: Path,
    python_env: Path | None = None,
    options: DockerSettings | None = None,
    name: str | None = None,
    watchdog: bool = True,
    exec_workspace: bool = False,
    workspace_mount: Any = None,
    runtime_bundle: Path | None = None,
) -> dict[str, Any]:
    """Arguments of ``containers.create`` for one hardened session container.

    ``workspace_mount``: a mount for /workspace (a copy-on-write volume) instead of a tmpfs;
    ``runtime_bundle``: a Python for the runtime, for images without one (``runtime_bundle.py``)."""
    from docker.types import Mount, Ulimit

    opts = options or DockerSettings()
    lim = config.limits
    ro = dict(type="bind", read_only=True)
    mounts = [
        Mount(TEMPLATE_MOUNT, opts.host_path(template_dir), **ro),
        Mount(RUNTIME_MOUNT, opts.host_path(runtime_path), **ro),
    ]
    if runtime_bundle is not None:
        mounts.append(Mount(BUNDLE_MOUNT, opts.host_path(runtime_bundle), **ro))
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
        labels={LABEL: "1", LABEL_OWNER: docker_engine().owner},
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
            docker_engine().uids.give(self.uid)


class DockerSandbox(JailSandbox):
    """A session in its own container, speaking the runtime protocol over an exec stream."""

    @classmethod
    async def prepare_ahead(cls, spec: WorkspaceSpec, config: SandboxConfig) -> None:
        """The task's image pulled (and derived) and its workspace template made, ahead of its resets."""
        if spec.image:
            _, _, release = await image_store(config).prepare(spec, config)
            release()

    def __init__(self, config: SandboxConfig, container: DockerContainer, stream: ExecStream, info: SandboxInfo,
                 start_timeout_s: float) -> None:
        super().__init__(container.id[:12], config, info, stream.reader, stream.write)
        self.container = container
        self.start_timeout_s = start_timeout_s
        self._stream = stream
        self._cow = container.cow
        self._release_images: Any = lambda: None  # set by launch: the images this session holds

    @classmethod
    async def launch(cls, spec: WorkspaceSpec, config: SandboxConfig) -> tuple["DockerSandbox", dict[str, Any]]:
        settings = _settings()
        engine, url = docker_engine(), DockerBackend.of(config).url
        client = await asyncio.to_thread(engine.client, url)
        image, template, release = await image_store(config).prepare(spec, config)
        try:
            tools_absent = await asyncio.to_thread(_image_lacks_tools, engine, url, image,
                                                   config.policy.blocked_tools)
            box, init = await cls._launch_container(spec, config, settings, engine, client, image, template,
                                                    tools_absent)
        except BaseException:
            release()
            raise
        box._release_images = release
        return box, init

    @classmethod
    async def _launch_container(cls, spec: WorkspaceSpec, config: SandboxConfig, settings: DockerSettings,
                                engine: DockerEngine, client: Any, image: str, template: Any,
                                tools_absent: bool) -> tuple["DockerSandbox", dict[str, Any]]:
        docker = DockerBackend.of(config)
        url = docker.url
        bundle = None
        if spec.image_resident and not await asyncio.to_thread(
                engine.image_fact, url, image, "python", lambda: image_has_python(client, image)):
            bundle = await asyncio.to_thread(build_bundle, client, docker.image, cache_root(config))
        uid = engine.uids.take(settings)
        cow = None
        try:
            if settings.workspace == "overlay" or (settings.workspace == "auto" and spec.image_resident
                                                   and not engine.cow_refused(url)):
                cow = await _cow_workspace(engine, config, settings, Path(template.path), uid)
            kwargs = container_kwargs(
                image=image, config=config, uid=uid, template_dir=Path(template.path),
                runtime_path=RUNTIME_PATH, python_env=spec.python_env, options=settings,
                name=engine.container_name(), exec_workspace=spec.image_resident,
                workspace_mount=cow.mount() if cow else None, runtime_bundle=bundle,
            )
            container = await DockerContainer.create(client, uid, **kwargs)
        except BaseException:
            engine.uids.give(uid)
            if cow is not None:
                await asyncio.to_thread(cow.remove)
            raise
        container.cow = cow
        try:
            stream = await container.exec_stream(
                runtime_argv(bundle, RUNTIME_MOUNT) if bundle is not None else RUNTIME_ARGV)
        except BaseException as exc:
            await container.remove()
            if isinstance(exc, Exception) and not isinstance(exc, SandboxStartError):
                raise SandboxStartError(f"runtime failed to start: {exc}") from exc
            raise
        info = SandboxInfo(
            backend="docker",
            cgroup=True,  # the engine enforces memory, pids and CPU limits
            blocked_tools_absent=tools_absent,
            base_commit=template.base_commit,
            details={"container": container.id[:12], "uid": str(uid), "image": image,
                     "engine_seccomp": "default profile", "workspace": "copy-on-write" if cow else "copy",
                     "runtime_python": "bundled" if bundle is not None else "image",
                     **({"task_image": str(spec.image), "workdir": str(spec.image_workdir)}
                        if spec.image_resident else {})},
        )
        init = init_message(spec, config, template.base_commit, mounted=cow is not None, bundle=bundle is not None)
        return cls(config, container, stream, info, settings.start_timeout_s), init

    # -- the jail -------------------------------------------------------------------
    @property
    def jail_alive(self) -> bool:
        return not self._stream.at_eof

    def jail_stderr(self) -> str:
        return self._stream.stderr_tail

    async def kill_jail(self) -> None:
        try:
            await self._stream.close()
        finally:
            try:
                await self.container.remove()
            finally:
                self._release_images()

    async def workspace_overrun(self) -> str | None:
        if self._cow is None:  # a tmpfs: the kernel holds it to its size
            return None
        # a copy-on-write upper layer is on the host's disk: held to the limit here
        used, limit = await asyncio.to_thread(self._cow.used_bytes), self._limits.workspace_mb
        if used <= limit * 1024 * 1024:
            return None
        return f"the workspace holds {used // (1024 * 1024)} MB of changes, over its {limit} MB limit"


def _settings() -> DockerSettings:
    try:
        return DockerSettings()
    except ValidationError as exc:
        raise SandboxStartError(f"bad {ENV_PREFIX}* setting: {exc}") from None


async def _cow_workspace(engine: DockerEngine, config: SandboxConfig, settings: DockerSettings, template: Path,
                         uid: int) -> Any:
    """A copy-on-write volume for the session, or None to copy (``auto`` on an engine that refuses)."""

    from .cow import CowWorkspace

    client = engine.client(DockerBackend.of(config).url)
    try:
        return await asyncio.to_thread(CowWorkspace.create, client, template, uid, cache_root(config),
                                       {LABEL: "1", LABEL_OWNER: engine.owner}, settings.host_path)
    except (docker.errors.APIError, OSError) as exc:
        if settings.workspace == "overlay":
            raise SandboxStartError(f"no copy-on-write workspace: {exc}") from exc
        _log.warning("copy-on-write workspace refused (%s): sessions on this engine copy their workspace", exc)
        engine.refuse_cow(DockerBackend.of(config).url)  # "auto" does not ask this engine again
        return None


def init_message(spec: WorkspaceSpec, config: SandboxConfig, base_commit: str,
                 mounted: bool = False, bundle: bool = False) -> dict[str, Any]:
    """The runtime's init line: a copied workspace, or one the engine ``mounted`` (copy-on-write)."""
    # Relocated: the image's own folders on the host path (/root is 0700) may not let the agent's uid through.
    venv = (venv_mount_point(str(Path(spec.python_env).absolute()), relocate=True)
            if spec.python_env is not None else spec.image_env)
    init = runtime_init(spec, config, mode="mounted" if mounted else "copy", template=TEMPLATE_MOUNT, upper="",
                        base_commit=base_commit, venv=venv,
                        extra_exec_paths=(["/workspace"] if spec.image_resident else [])
                        + (["/.swe/py"] if bundle else []))
    init["pycache_links"] = venv  # the environment's bytecode, linked into the pycache prefix (runtime.py)
    return init


def _image_lacks_tools(engine: DockerEngine, url: str | None, image: str, blocked: tuple[str, ...]) -> bool:
    """Whether ``image`` was built with every tool of ``blocked`` removed (its label says)."""

    def removed() -> frozenset[str]:
        try:
            labels = engine.client(url).api.inspect_image(image)["Config"].get("Labels") or {}
        except docker.errors.ImageNotFound as exc:
            raise SandboxStartError(f"image {image!r} not found (build it with docker/build-images.sh)") from exc
        except docker.errors.DockerException as exc:
            raise SandboxStartError(f"cannot inspect image {image!r}: {exc}") from exc
        return frozenset(labels.get(TOOLS_LABEL, "").split())

    return set(blocked) <= engine.image_fact(url, image, "removed_tools", removed)


__all__ = [
    "DockerContainer", "DockerSandbox", "DockerSettings", "ExecStream", "container_kwargs",
    "docker_client", "init_message", "open_exec_stream", "reap_containers",
]
