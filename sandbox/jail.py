"""The one sandbox mechanism: the in-sandbox runtime in a jail, driven over a RuntimeChannel.

A backend subclasses :class:`JailSandbox` and says only how its jail is launched (something
that runs ``runtime.py`` with its stdin/stdout piped to this host) and how it is killed;
starting the runtime, forwarding requests, timeouts and "sandbox died" live here, once.
"""

from __future__ import annotations

import abc
import asyncio
from typing import Any, Awaitable, Callable, Self

from .backends import BACKENDS
from .base import Sandbox
from .channel import RuntimeChannel
from .models import (CommandResult, CommandStatus, ExactDiff, PathError, SandboxClosed, SandboxConfig, SandboxDied,
                     SandboxInfo, SandboxStartError, WorkspaceSpec)


class JailSandbox(Sandbox):
    """A session whose commands and file operations are run by the runtime inside a jail.

    What a backend supplies: :meth:`launch`, :meth:`kill_jail`, :attr:`jail_alive`,
    :meth:`jail_stderr`, and :meth:`workspace_overrun` where no kernel holds the workspace
    to its size. What every backend then does alike:

    * start: the runtime gets its init message and must answer within ``start_timeout_s``;
      any failure (cancellation too) kills the jail, and raises SandboxStartError naming the
      jail's last stderr;
    * timeouts: a command runs for the caller's ``timeout_s`` (``Limits.command_timeout_s``
      when it is missing, zero, negative or NaN), at most ``Limits.max_command_timeout_s``; the
      runtime enforces it, and the channel declares the runtime dead when no reply comes
      within a grace period past it (and past fixed limits for file operations);
    * "sandbox died": the first command to find the runtime gone (dead, wedged, or sending
      garbage) comes back as a CommandResult with status ``sandbox_died`` saying why; from
      then on every call raises SandboxDied, and every call after :meth:`close`
      raises SandboxClosed;
    * a workspace found over its size limit after a command (``run`` or ``run_isolated``) closes
      the session: that command comes back as ``sandbox_died`` saying so;
    * a write over ``Limits.max_file_write_bytes`` is refused here, before it crosses the channel.
    """

    start_timeout_s: float = 30.0

    def __init__(self, session_id: str, config: SandboxConfig, info: SandboxInfo,
                 reader: asyncio.StreamReader, write: Callable[[bytes], Awaitable[None]]) -> None:
        self.id = session_id
        self.info = info
        self._limits = config.limits
        self._channel = RuntimeChannel(reader, write)
        self._closed = False

    # -- what a backend supplies ---------------------------------------------------
    @classmethod
    @abc.abstractmethod
    async def launch(cls, spec: WorkspaceSpec, config: SandboxConfig) -> tuple[Self, dict[str, Any]]:
        """Start a jail running the runtime, its stdin and stdout wired to the returned session's
        channel; return the session and the runtime's init message. A failure leaves nothing behind."""

    @property
    @abc.abstractmethod
    def jail_alive(self) -> bool:
        """Whether the jail (its process, its container) still runs."""

    @abc.abstractmethod
    def jail_stderr(self) -> str:
        """The last of what the jail wrote on stderr (for error messages)."""

    @abc.abstractmethod
    async def kill_jail(self) -> None:
        """Kill every process of the jail and free what it holds (called once, by :meth:`close`)."""

    async def workspace_overrun(self) -> str | None:
        """After a command: why the workspace is over ``Limits.workspace_mb``, or None while it is not."""
        return None

    # -- start ----------------------------------------------------------------------
    @classmethod
    async def start(cls, spec: WorkspaceSpec, config: SandboxConfig) -> Self:
        if spec.image_resident and not config.backend.runs_image_resident:
            able = [name for name, backend in BACKENDS.items() if backend.runs_image_resident]
            raise SandboxStartError(f"image-resident tasks (code inside {spec.image!r}) need a backend that runs "
                                    f"them ({', '.join(able) or 'none is registered'}), not {config.backend_name}")
        box, init = await cls.launch(spec, config)
        try:
            layers = await box._channel.handshake(init, box.start_timeout_s)
            box.info.seccomp = bool(layers.get("seccomp"))
            box.info.landlock_abi = int(layers.get("landlock_abi") or 0)
            box.info.noexec_workspace = bool(layers.get("noexec_workspace"))
            box.info.cpu_policy = str(layers.get("cpu_policy") or "normal")
            if "pycache_links" in layers:  # the environment's bytecode the runtime linked (docker)
                box.info.details["pycache_links"] = str(layers["pycache_links"])
        except BaseException as exc:
            await box.close()
            if not isinstance(exc, Exception) or isinstance(exc, SandboxStartError):
                raise  # cancelled, interrupted
            if isinstance(exc, asyncio.TimeoutError):
                reason = f"the runtime did not answer within {box.start_timeout_s:g} s"
            else:
                reason = str(exc) or type(exc).__name__
            detail = box.jail_stderr()[-2000:].strip()
            raise SandboxStartError(f"runtime failed to start: {reason}{' | ' + detail if detail else ''}") from exc
        return box

    # -- operations -------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise SandboxClosed(f"sandbox {self.id} is closed")
        if self._channel.dead:  # reported once as data (a command's result), from then on raised
            raise SandboxDied(f"{self._channel.dead} {self.jail_stderr()[-500:]}".strip())

    def _timeout(self, timeout_s: float | None) -> float:
        lim = self._limits
        timeout = float(timeout_s) if timeout_s is not None else 0.0
        if not timeout > 0:  # missing, zero, negative or NaN
            timeout = lim.command_timeout_s
        return min(timeout, lim.max_command_timeout_s)

    async def _settle(self, result: CommandResult) -> CommandResult:
        if result.status is CommandStatus.sandbox_died:
            if not result.output:
                result.output = f"[sandbox died: {self._channel.dead or 'runtime gone'}]"
            return result
        overrun = await self.workspace_overrun()
        if overrun is not None:
            await self.close()
            result.status = CommandStatus.sandbox_died
            result.output += f"\n[{overrun}: the session is closed]"
        return result

    async def run(self, command: str, timeout_s: float | None = None, output_limit: int | None = None) -> CommandResult:
        self._check_open()
        return await self._settle(await self._channel.run(command, self._timeout(timeout_s), output_limit))

    async def run_isolated(self, command: str, timeout_s: float, output_limit: int) -> CommandResult:
        self._check_open()
        return await self._settle(await self._channel.run_isolated(command, self._timeout(timeout_s), output_limit))

    async def read_file(self, path: str) -> bytes:
        self._check_open()
        return await self._channel.read_file(path)

    async def write_file(self, path: str, data: bytes) -> None:
        self._check_open()
        if len(data) > self._limits.max_file_write_bytes:  # refused before it crosses the channel
            raise PathError(f"{len(data)} bytes exceed the write limit", reason="too_large")
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
        return not self._closed and not self._channel.dead and self.jail_alive

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self.kill_jail()

