"""The registry of sandbox backends: one typed config per backend, each bound to its Sandbox class.

A backend is a config model (a :class:`BackendConfig` subclass whose ``type`` is a one-value
``Literal``, its name) naming its :class:`sandbox.jail.JailSandbox` subclass by ``"module:Class"``
(relative to this package), and its entry in :data:`BACKENDS`. ``SandboxConfig.backend`` is one of
them, chosen by ``type`` (a bare name is that backend with its defaults), so reading the names and
validating a configuration (CLI choices, ``SandboxConfig``) imports no backend module: the class is
imported when a session starts. What differs between backends is behaviour of their config
(:attr:`BackendConfig.runs_image_resident`, :meth:`BackendConfig.prepare_ahead`, ...), not string
comparisons with their names.

Adding a backend: its config class here, listed in :data:`BACKENDS`, and its Sandbox class.
"""

from __future__ import annotations

import builtins
import difflib
import importlib
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_BACKEND = "bwrap"  # what SandboxConfig.backend is when not given


class ImageSettings(BaseModel):
    """How task images reach the engine and how much disk they may take (the docker backend's ``images``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pull: bool = Field(True, description="pull a task's image when the engine lacks it (credentials: the "
                                         "engine client's usual configuration, ~/.docker/config.json)")
    max_pulls: int = Field(2, gt=0, le=64, description="pulls at once in this process")
    pull_timeout_s: float = Field(1800.0, gt=0, description="a pull taking longer fails the resets waiting for it")
    cache_gb: float | None = Field(None, gt=0, description=(
        "disk budget for the images this project pulled or derived; past it the least recently used "
        "are removed (never one in use, never one the user put there); none: no eviction"))


class BackendConfig(BaseModel):
    """The settings of one backend (``SandboxConfig.backend``); a subclass per backend."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: str = Field(description="the backend's name (a one-value Literal in each subclass)")

    # Its Sandbox class, or where to import it from ("module:Class", relative to this package).
    sandbox_class: ClassVar[str | builtins.type[Any]]  # (builtins: the field `type` shadows the name here)
    # Whether it runs image-resident workspaces (the code inside a task's image).
    runs_image_resident: ClassVar[bool] = False
    # (extra, modules): the package extra whose modules it imports (None: the base install runs it).
    needs_extra: ClassVar[tuple[str, tuple[str, ...]] | None] = None
    # Keys of the flat SandboxConfig of old (``docker_url``) that are settings of this backend now:
    # old key -> its key in this backend's section.
    moved_keys: ClassVar[dict[str, str]] = {}

    @classmethod
    def backend_name(cls) -> str:
        return str(cls.model_fields["type"].default)

    @property
    def name(self) -> str:
        return self.type

    @classmethod
    def sandbox_type(cls) -> builtins.type[Any]:
        """The backend's Sandbox class (imported on first use; this module imports none: ``sandbox.base`` and
        the backends import it)."""
        entry = cls.sandbox_class
        if isinstance(entry, str):
            module, _, attr = entry.partition(":")
            entry = getattr(importlib.import_module(module, __package__), attr)
        return entry

    @classmethod
    def setting_variants(cls) -> tuple[type[BackendConfig], ...]:
        """The models a ``SandboxConfig.backend`` may be (for the dotted keys of ``--set`` and their messages)."""
        return tuple(BACKENDS.values())

    async def prepare_ahead(self, spec: Any, config: Any) -> None:
        """Make ready ahead of a reset on ``spec`` (a WorkspaceSpec) what this backend can (the server's
        ``prefetch_ahead``): its Sandbox class's ``prepare_ahead`` (docker: the task's image pulled and derived)."""
        await self.sandbox_type().prepare_ahead(spec, config)


class BwrapBackend(BackendConfig):
    """bubblewrap on this host (sandbox/bwrap.py): the default."""

    type: Literal["bwrap"] = "bwrap"
    sandbox_class = ".bwrap:BwrapSandbox"


class DockerBackend(BackendConfig):
    """A container per session on a Docker engine (sandbox/docker.py)."""

    type: Literal["docker"] = "docker"
    image: str = Field("swe-openenv-sandbox:latest", description="image a session runs when its task names none")
    url: str | None = Field(None, description="Docker engine URL; default from the environment (DOCKER_HOST)")
    images: ImageSettings = Field(default_factory=ImageSettings, description=(
        "how task images are pulled and how much disk they may take (sandbox/images.py)"))

    sandbox_class = ".docker:DockerSandbox"
    runs_image_resident = True
    needs_extra = ("env", ("docker",))
    moved_keys = {"docker_image": "image", "docker_url": "url", "images": "images"}

    @classmethod
    def of(cls, config: Any) -> DockerBackend:
        """The docker settings of ``config`` (a SandboxConfig): its backend's, or the defaults where the
        backend is another (the image commands, the image export of an image-resident template)."""
        return config.backend if isinstance(config.backend, DockerBackend) else cls()


# name -> the backend's config class: the registry.
BACKENDS: dict[str, type[BackendConfig]] = {cls.backend_name(): cls for cls in (
    BwrapBackend, DockerBackend)}


def backend_names() -> tuple[str, ...]:
    """The registered backends' names, in registration order (CLI choices, config validation)."""
    return tuple(BACKENDS)


def backend_config_class(name: str) -> type[BackendConfig]:
    """The config class registered as ``name``; ValueError (one line, naming the registered ones) if none is."""
    try:
        return BACKENDS[name]
    except (KeyError, TypeError):
        raise ValueError(unknown_backend(name)) from None


def backend_class(name: str) -> type[Any]:
    """The Sandbox class registered as ``name`` (imported on first use); ValueError if none is."""
    return backend_config_class(name).sandbox_type()


def unknown_backend(name: object) -> str:
    """The error message for a backend name the registry does not hold (with the nearest, if one is close)."""
    close = difflib.get_close_matches(str(name), backend_names(), n=1, cutoff=0.6)
    near = f" (did you mean {close[0]}?)" if close else ""
    return f"unknown sandbox backend {name!r}{near}; registered backends: {', '.join(backend_names())}"


def backend_config(value: Any) -> Any:
    """``SandboxConfig.backend`` from what a user wrote: a name (that backend's defaults), a section
    (``{"type": name, ...}``; no type: the default backend) or a config of a registered backend.
    ValueError names what is wrong in one line: an unknown name (and the nearest), a key of another
    backend's section (and whose it is)."""
    if isinstance(value, BackendConfig):
        if BACKENDS.get(value.type) is not type(value):
            raise ValueError(unknown_backend(value.type))
        return value
    if isinstance(value, str):
        value = {"type": value}
    if not isinstance(value, dict):
        return value  # pydantic says what it should be
    name = value.get("type", DEFAULT_BACKEND)
    cls = backend_config_class(name)
    for key in value:
        owners = [other for other, c in BACKENDS.items() if other != name and key in c.model_fields]
        if key not in cls.model_fields and owners:
            raise ValueError(f"{key} is a setting of the {' / '.join(owners)} backend, not of {name} "
                             f"(backend.type: {owners[0]})")
    return cls.model_validate({**value, "type": name})


def move_flat_keys(data: dict[str, Any]) -> dict[str, Any]:
    """A SandboxConfig's input with the flat keys of old (``docker_url``, ``docker_image``, ``images``)
    moved into their backend's section (``backend.url``, ...) and a bare backend name made its section.
    An old key given for another backend is dropped when it holds that backend's default (a configuration
    printed before the sections existed) and refused, in one line naming its new key, when it does not."""
    moved = [(old, cls, new) for cls in BACKENDS.values() for old, new in cls.moved_keys.items() if old in data]
    if not moved:
        return data
    data = dict(data)
    section = data.get("backend", DEFAULT_BACKEND)
    if isinstance(section, BackendConfig):
        section = section.model_dump()
    section = {"type": section} if isinstance(section, str) else dict(section) if isinstance(section, dict) else section
    if not isinstance(section, dict):
        return data  # the backend's own validation says what is wrong
    name = section.get("type", DEFAULT_BACKEND)
    for old, cls, new in moved:
        value = data.pop(old)
        owner = cls.backend_name()
        if owner == name:
            if new in section and section[new] != value:
                raise ValueError(f"{old} and backend.{new} both given: give backend.{new} only")
            section[new] = value
        elif not _is_default(cls, new, value):
            raise ValueError(f"{old} is now backend.{new}, a setting of the {owner} backend; the backend here "
                             f"is {name} (backend: {{type: {owner}, {new}: ...}})")
    data["backend"] = section
    return data


def _is_default(cls: type[BackendConfig], key: str, value: Any) -> bool:
    try:
        return cls.model_validate({key: value}) == cls()
    except ValueError:
        return False
