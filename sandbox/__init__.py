"""Hardened, isolated execution of SWE episodes.

Knows nothing of HTTP or RL: a :class:`Sandbox` runs shell commands and file
operations for one episode in a jail built from a :class:`WorkspaceSpec`.
"""

from .base import Sandbox, open_sandbox
from .models import (
    ArgumentError,
    CommandResult,
    CommandStatus,
    DiffTooLarge,
    HardeningPolicy,
    LayerMode,
    Limits,
    PathError,
    SandboxClosed,
    SandboxConfig,
    SandboxDied,
    SandboxError,
    SandboxInfo,
    SandboxStartError,
    WorkspaceError,
    WorkspaceSpec,
)

__all__ = [
    "ArgumentError", "CommandResult", "CommandStatus", "DiffTooLarge", "HardeningPolicy", "LayerMode", "Limits", "PathError",
    "Sandbox", "SandboxClosed", "SandboxConfig", "SandboxDied", "SandboxError", "SandboxInfo",
    "SandboxStartError", "WorkspaceError", "WorkspaceSpec", "open_sandbox",
]
