"""This process's Docker side: the docker backend's settings, and the engine clients with their caches.

:class:`DockerSettings` is the one reader of the ``SWE_DOCKER_*`` environment variables;
:func:`docker_engine` gives the process's :class:`DockerEngine` (made on first use), which owns
the SDK clients, what is cached about the engines' images, and the session uids. The workspace
templates (``workspace.py``) and the docker backend (``docker.py``) both reach Docker through it.
"""

from __future__ import annotations

import itertools
import os
import random
import secrets
import threading
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .models import SandboxStartError

LABEL = "org.swe-openenv.sandbox"  # on every container and volume of a session
LABEL_OWNER = "org.swe-openenv.owner"  # whose they are: DockerEngine.owner
ENV_PREFIX = "SWE_DOCKER_"


class DockerSettings(BaseModel):
    """The docker backend's host-side settings (beside ``SandboxConfig``).

    A field not given is read from the environment variable ``SWE_DOCKER_<FIELD>``
    (``SWE_DOCKER_CPUS``, ``SWE_DOCKER_PATH_MAP`` ...), else it keeps its default.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpus: float = Field(1.0, gt=0, description="CPUs of one session container")
    uid_base: int = Field(200000, ge=1000, le=2**31 - 1, description="first per-session uid (never a system uid)")
    uid_span: int = Field(100000, gt=0, description="how many per-session uids there are")
    path_map: str = Field("", description=(
        "bind sources as the engine's host sees them, when this process runs in a container beside the "
        "engine: '/path/here=/path/on/host[;...]'"))
    start_timeout_s: float = Field(60.0, gt=0, description="how long the runtime may take to answer its init")
    workspace: Literal["auto", "copy", "overlay"] = Field("auto", description=(
        "'auto': image-resident workspaces copy-on-write (an overlay volume, sandbox/cow.py) where the "
        "engine can mount one, else copied; 'copy': always copied; 'overlay': always copy-on-write"))

    @model_validator(mode="before")
    @classmethod
    def _from_environment(cls, data: Any) -> Any:
        if isinstance(data, dict):
            env = {name: os.environ[ENV_PREFIX + name.upper()] for name in cls.model_fields
                   if ENV_PREFIX + name.upper() in os.environ}
            data = {**env, **data}
        return data

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


class UidPool:
    """Per-session uids, so RLIMIT_NPROC (counted per uid host-wide) cannot be
    exhausted by one session's fork bomb for the others. Unique within a process;
    a random start makes clashes between processes on one engine unlikely."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._used: set[int] = set()
        self._next = random.randrange(1 << 30)

    def take(self, settings: DockerSettings) -> int:
        with self._lock:
            for _ in range(settings.uid_span):
                uid = settings.uid_base + self._next % settings.uid_span
                self._next += 1
                if uid not in self._used:
                    self._used.add(uid)
                    return uid
        raise SandboxStartError("no free sandbox uid")

    def give(self, uid: int) -> None:
        with self._lock:
            self._used.discard(uid)


class DockerEngine:
    """What this process holds of the Docker engines it uses.

    One SDK client per engine URL (``None``: from the environment), what is known of their
    images (whether one has a usable ``python3``, which tools it was built without), which
    engines refused a copy-on-write volume, the session uids, and the owner id its containers
    are labelled with (:func:`sandbox.docker.reap_containers`). Thread-safe: blocking SDK calls
    run in worker threads.
    """

    def __init__(self) -> None:
        self.owner = f"{os.uname().nodename}:{os.getpid()}:{secrets.token_hex(4)}"
        self.uids = UidPool()
        self._lock = threading.Lock()
        self._clients: dict[str | None, Any] = {}
        self._images: dict[tuple[str | None, str, str], Any] = {}  # (engine, image, what) -> fact
        self._cow_refused: set[str | None] = set()
        self._names = itertools.count()

    def client(self, url: str | None = None) -> Any:
        """The ``docker.DockerClient`` of ``url``, connected and pinged on first use."""
        with self._lock:
            client = self._clients.get(url)
            if client is None:
                import docker  # optional dependency (extra "env")

                try:
                    client = docker.DockerClient(base_url=url) if url else docker.from_env()
                    client.ping()
                except Exception as exc:  # DockerException, requests errors, FileNotFoundError
                    raise SandboxStartError(f"no Docker engine at {url or 'default socket'}: {exc}") from exc
                self._clients[url] = client
            return client

    def image_fact(self, url: str | None, image: str, what: str, probe: Callable[[], Any]) -> Any:
        """``probe()``'s answer about ``image`` on engine ``url``, asked once (blocking)."""
        key = (url, image, what)
        with self._lock:
            if key in self._images:
                return self._images[key]
        fact = probe()
        with self._lock:
            return self._images.setdefault(key, fact)

    def cow_refused(self, url: str | None) -> bool:
        """Whether engine ``url`` could not mount a copy-on-write volume (``auto`` then copies)."""
        with self._lock:
            return url in self._cow_refused

    def refuse_cow(self, url: str | None) -> None:
        with self._lock:
            self._cow_refused.add(url)

    def container_name(self) -> str:
        """A fresh name for a session container."""
        return f"swe-sbx-{os.getpid()}-{next(self._names)}-{secrets.token_hex(3)}"


_engine: DockerEngine | None = None
_engine_lock = threading.Lock()


def docker_engine() -> DockerEngine:
    """This process's :class:`DockerEngine`, made on first use."""
    global _engine
    with _engine_lock:
        if _engine is None:
            _engine = DockerEngine()
        return _engine


def docker_client(url: str | None = None) -> Any:
    """The cached ``docker.DockerClient`` for ``url`` (None: from the environment)."""
    return docker_engine().client(url)
