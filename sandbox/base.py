"""The `Sandbox` interface: one isolated, long-lived shell per episode.

A backend (``sandbox/backends.py`` lists them) decides *where* the session runs; the
in-sandbox runtime (``sandbox/runtime.py``) decides *how* commands and file operations run.
All methods are coroutines so a server can drive hundreds of sessions from one
event loop; none of them blocks it.
"""

from __future__ import annotations

import abc

from .models import CommandResult, ExactDiff, SandboxConfig, SandboxError, SandboxInfo, WorkspaceSpec


class Sandbox(abc.ABC):
    """One session's sandbox. Create with :func:`sandbox.open_sandbox`; close when done."""

    id: str
    info: SandboxInfo

    @classmethod
    @abc.abstractmethod
    async def start(cls, spec: WorkspaceSpec, config: SandboxConfig) -> "Sandbox":
        """Prepare the workspace (cached per repo and commit) and start the session.

        Raises SandboxStartError or WorkspaceError.
        """

    @classmethod
    async def prepare_ahead(cls, spec: WorkspaceSpec, config: SandboxConfig) -> None:
        """Make ready ahead of a session on ``spec`` what a start would otherwise wait for (nothing by
        default; the server's ``prefetch_ahead``, through ``BackendConfig.prepare_ahead``)."""

    @abc.abstractmethod
    async def run(self, command: str, timeout_s: float | None = None, output_limit: int | None = None) -> CommandResult:
        """Run ``command`` in the session's persistent shell (cwd, exports persist).

        ``output_limit``: bytes of output kept (head and tail) for this command; None: the
        configured ``max_output_bytes``.

        On timeout every process the command started is killed and the shell
        survives. Raises SandboxDied only when the sandbox itself is gone.
        """

    async def run_isolated(self, command: str, timeout_s: float, output_limit: int) -> CommandResult:
        """Run ``command`` in a fresh shell walled off from the rest of the sandbox.

        The shell starts like the persistent one (same environment, /workspace, same limits
        and layers) but in a Landlock domain of its own: nothing it starts can signal, ptrace,
        or open the fds of the runtime or of the persistent shell's processes (where the
        kernel has Landlock ABI >= 6; ``SandboxInfo.landlock_abi``). Its output travels only
        to the runtime and is kept up to ``output_limit`` bytes (head and tail); a flood never
        stops it. Every process it leaves is killed when it ends. A dead sandbox comes back as
        ``status == sandbox_died``.
        """
        raise SandboxError(f"{type(self).__name__} cannot run isolated commands")

    @abc.abstractmethod
    async def read_file(self, path: str) -> bytes:
        """Read a file inside the workspace (relative, or absolute under /workspace).

        Raises PathError (with ``reason``) for paths outside the workspace,
        missing files, directories and files over the read limit.
        """

    @abc.abstractmethod
    async def write_file(self, path: str, data: bytes) -> None:
        """Create or overwrite a file inside the workspace, creating parents."""

    @abc.abstractmethod
    async def diff(self) -> str:
        """The workspace's changes against its base commit as a git-style text diff

        (untracked files included, binary files reported but not inlined)."""

    async def diff_exact(self, patch_limit: int) -> ExactDiff:
        """:meth:`diff`, saying whether it is ``lossy`` (cannot rebuild the workspace), and then the

        exact ``git diff --binary --full-index`` (withheld, with ``patch_error``, past ``patch_limit`` bytes)."""
        raise SandboxError(f"{type(self).__name__} cannot take exact diffs")

    async def apply_patch(self, patch: bytes) -> None:
        """Apply a git patch (a :meth:`diff`, or :meth:`diff_exact`'s ``patch``) to the workspace.

        Restores a recorded workspace on a fresh session. Raises ArgumentError when it does not apply."""
        raise SandboxError(f"{type(self).__name__} cannot apply patches")

    @abc.abstractmethod
    async def close(self) -> None:
        """Kill every process of the session and free its resources. Idempotent."""

    @property
    @abc.abstractmethod
    def alive(self) -> bool:
        """False once the sandbox died or was closed."""

    async def __aenter__(self) -> "Sandbox":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

