"""Hardened, isolated execution of SWE episodes.

Knows nothing of HTTP or RL: a :class:`Sandbox` runs shell commands and file operations for
one episode in a jail built from a :class:`WorkspaceSpec`. Layout, top to bottom:

* interface: ``base.py`` (:class:`Sandbox`), ``models.py`` (configuration, results, errors);
* registry: ``backends.py`` (one config model per backend, bound to its class: :data:`BACKENDS`,
  :func:`backend_names`; ``SandboxConfig.backend`` is one of them), and
  :func:`open_sandbox` here, which starts a session on the configured backend; ``pool.py``
  (:class:`WarmPool`: sessions started ahead, claimed instead of started);
* mechanism: ``jail.py`` (:class:`~sandbox.jail.JailSandbox`: start-up, requests, timeouts,
  "sandbox died"), over ``channel.py`` (the JSON-lines protocol);
* backends: ``bwrap.py`` and ``docker.py`` (how a jail is launched and killed), with
  ``docker_engine.py`` (Docker clients, caches, ``SWE_DOCKER_*`` settings), ``images.py`` (task
  images pulled on demand, derived once, under a disk budget), ``cow.py``,
  ``image_workspace.py``, ``runtime_bundle.py``, ``cgroup.py``, ``toolview.py``;
* workspace: ``workspace.py`` (scrubbed templates), ``runtime_config.py`` (the runtime's init),
  ``git.py`` (every host-side git call, hardened once: ``run_git``);
* runtime: ``runtime.py``, which runs inside the jail and does the work.
"""

from .backends import (BACKENDS, DEFAULT_BACKEND, BackendConfig, BwrapBackend, DockerBackend, backend_class,
                       backend_config_class, backend_names)
from .base import Sandbox
from .models import (ArgumentError, CommandResult, CommandStatus, DiffTooLarge, DiffUnreadable, HardeningPolicy,
                     LayerMode, Limits, PathError, SandboxClosed, SandboxConfig, SandboxDied, SandboxError, SandboxInfo,
                     SandboxStartError, WorkspaceError, WorkspaceSpec)
from .pool import WarmPool


async def open_sandbox(spec: WorkspaceSpec, config: SandboxConfig | None = None) -> Sandbox:
    """Start a session on the configured backend (imported on first use)."""
    config = config or SandboxConfig()
    return await config.backend.sandbox_type().start(spec, config)


__all__ = [
    "ArgumentError", "CommandResult", "CommandStatus", "DiffTooLarge", "DiffUnreadable", "HardeningPolicy", "LayerMode",
    "Limits", "PathError",
    "Sandbox", "SandboxClosed", "SandboxConfig", "SandboxDied", "SandboxError", "SandboxInfo",
    "SandboxStartError", "WorkspaceError", "WorkspaceSpec", "BACKENDS", "DEFAULT_BACKEND", "BackendConfig", "BwrapBackend",
    "DockerBackend", "backend_class", "backend_config_class", "backend_names", "open_sandbox",
    "WarmPool",
]
