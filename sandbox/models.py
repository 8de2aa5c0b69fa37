"""Typed configuration and results of the sandbox layer.

Everything that crosses the sandbox boundary is one of these pydantic models:
the configuration a session starts with, and the results its operations return.
Failures an agent causes (a non-zero exit, a timeout, a flood of output) are
*data* in a :class:`CommandResult`; only infrastructure failures raise
(:class:`SandboxError` and subclasses).
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, field_validator, model_validator

from .backends import BackendConfig, BwrapBackend, backend_config, move_flat_keys

# Tools whose binaries must be *absent* from the sandbox's view (not masked by
# name): file finders and archive extractors an agent could use to dig up code the
# task removed. Hard-link aliases of these (Debian's unzip/zipinfo share an inode)
# are removed with them.
DEFAULT_BLOCKED_TOOLS: tuple[str, ...] = (
    "find", "locate", "plocate", "mlocate", "updatedb", "fd", "fdfind",
    "unzip", "unzipsfx", "zipinfo", "funzip", "zipgrep", "zipnote", "zipsplit", "zipcloak",
    "bsdtar", "bsdcpio", "bsdunzip", "cpio", "7z", "7za", "7zr", "p7zip",
    "unrar", "rar", "cabextract", "lzmainfo", "jar", "jarsigner", "busybox", "toybox",
    "uncompyle6", "decompyle3", "pycdc", "pydisasm",
)

# Purged from the workspace at start: bytecode, type caches, test caches and
# anything that remembers earlier runs or code the task removed.
DEFAULT_PURGE_DIRS: tuple[str, ...] = (
    "__pycache__", ".mypy_cache", ".pytype", ".pyre", ".pytest_cache", ".ruff_cache",
    ".hypothesis", ".tox", ".nox", ".eggs", ".cache", ".ipynb_checkpoints",
)
DEFAULT_PURGE_SUFFIXES: tuple[str, ...] = (".pyc", ".pyo", ".pyd.cache", ".coverage")
# Archives are removed when they hold Python source or bytecode (an archive of the
# repository); data fixtures without code are kept so the project's tests still pass.
DEFAULT_ARCHIVE_SUFFIXES: tuple[str, ...] = (
    ".zip", ".whl", ".egg", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz",
    ".txz", ".jar", ".7z", ".pyz",
)


class LayerMode(str, Enum):
    """How a kernel hardening layer is applied when the session starts."""

    required = "required"  # the session fails to start if the kernel lacks it
    best_effort = "best_effort"  # applied when available, reported in SandboxInfo
    off = "off"


class Limits(BaseModel):
    """Resource limits of one sandbox session."""

    model_config = ConfigDict(extra="forbid")

    command_timeout_s: float = Field(120.0, gt=0, description="default wall-clock limit of one command")
    max_command_timeout_s: float = Field(1800.0, gt=0, description="upper bound a caller may ask for")
    max_output_bytes: int = Field(64 * 1024, gt=0, description="output kept per command (head + tail)")
    output_kill_bytes: int = Field(64 * 1024 * 1024, gt=0, description="a command printing more is killed")
    max_file_read_bytes: int = Field(4 * 1024 * 1024, gt=0)
    max_file_write_bytes: int = Field(8 * 1024 * 1024, gt=0)
    max_diff_bytes: int = Field(16 * 1024 * 1024, gt=0, description="a larger workspace diff is refused "
                                "(DiffTooLarge): graded 0 and charged to the agent")
    memory_mb: int = Field(4096, gt=0, description="address space per process (RLIMIT_AS) and cgroup memory")
    pids: int = Field(256, gt=0, description="processes (RLIMIT_NPROC and cgroup pids.max)")
    open_files: int = Field(1024, gt=0)
    file_size_mb: int = Field(512, gt=0, description="largest file a process may write (RLIMIT_FSIZE)")
    cpu_seconds: int = Field(3600, gt=0, description="CPU time per process (RLIMIT_CPU)")
    workspace_mb: int = Field(1024, gt=0, description="writable space of the workspace (tmpfs upper layer)")
    tmp_mb: int = Field(512, gt=0, description="size of the private /tmp")
    cpu_policy: Literal["normal", "batch", "idle"] = Field("normal", description=(
        "scheduling policy of everything in the sandbox: 'normal' competes with the host's processes as "
        "equals; 'idle' (SCHED_IDLE) runs only on CPU time no normal process wants, so a busy sandbox "
        "never delays the process that serves it; 'batch' (SCHED_BATCH) never preempts on wakeup. "
        "Best effort: a kernel that refuses keeps 'normal' (SandboxInfo.cpu_policy tells)"))


class HardeningPolicy(BaseModel):
    """What an adversarial agent must not be able to reach or run."""

    model_config = ConfigDict(extra="forbid")

    blocked_tools: tuple[str, ...] = DEFAULT_BLOCKED_TOOLS
    purge_dirs: tuple[str, ...] = DEFAULT_PURGE_DIRS
    purge_suffixes: tuple[str, ...] = DEFAULT_PURGE_SUFFIXES
    archive_suffixes: tuple[str, ...] = DEFAULT_ARCHIVE_SUFFIXES
    # "squash": the workspace's git repository holds exactly one commit (the base
    # tree), no remotes, refs, reflog or stray objects. Needed for synthesized
    # tasks, whose parent commit is the un-bugged code.
    git_history: Literal["squash"] = "squash"
    seccomp: LayerMode = LayerMode.required
    landlock: LayerMode = LayerMode.best_effort
    cgroups: LayerMode = LayerMode.best_effort
    # Processes a command leaves running in the background are killed when it
    # returns (fork bombs, stray servers, output that would bleed into the next
    # observation). Set False to let `cmd &` outlive its command.
    kill_background: bool = True
    # Sockets inside the sandbox live in an empty network namespace either way;
    # "deny" also refuses AF_INET/AF_INET6 sockets (breaks test suites that bind
    # a loopback server, so it is off by default).
    inet_sockets: Literal["netns_only", "deny"] = "netns_only"


class SandboxConfig(BaseModel):
    """Configuration of the sandbox layer (one per server, shared by sessions)."""

    model_config = ConfigDict(extra="forbid")

    backend: SerializeAsAny[BackendConfig] = Field(default_factory=BwrapBackend, description=(
        "the backend and its settings: a backend of the registry (sandbox/backends.py) by its type, "
        "e.g. {type: docker, url: ...}; a bare name is that backend with its defaults"))
    limits: Limits = Field(default_factory=Limits)
    policy: HardeningPolicy = Field(default_factory=HardeningPolicy)
    cache_dir: Path | None = Field(None, description="prepared workspaces and tool views; default ~/.cache/swe-openenv")

    @model_validator(mode="before")
    @classmethod
    def _flat_keys(cls, data: Any) -> Any:
        """The flat keys of old (``docker_url``, ``docker_image``, ``images``) moved into their backend's section."""
        return move_flat_keys(data) if isinstance(data, dict) else data

    @field_validator("backend", mode="before")
    @classmethod
    def _registered(cls, value: Any) -> Any:
        return backend_config(value)

    @property
    def backend_name(self) -> str:
        """The backend's name (``"bwrap"``, ``"docker"``, ...)."""
        return self.backend.name


class WorkspaceSpec(BaseModel):
    """Where a session's files and runtime come from on this host."""

    model_config = ConfigDict(extra="forbid")

    repo_path: Path | None = Field(None, description="a directory (usually a git repository) holding the task's code")
    base_commit: str | None = Field(None, description="commit to check out; None takes the directory as it is")
    python_env: Path | None = Field(None, description="a venv or prefix mounted read-only, first on PATH")
    image: str | None = Field(None, description="docker backend: image to run instead of the default")
    image_workdir: str | None = Field(None, description="docker backend: the code is in `image` at this path "
                                                        "(image-resident workspace) instead of at repo_path")
    image_env: str | None = Field(None, description="image-resident: environment prefix in the image, bin/ first on PATH")
    setup_patch: str = Field("", description="a diff applied to the tree before it is scrubbed (e.g. a bug patch)")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment variables of the shell")

    @model_validator(mode="after")
    def _one_source(self) -> "WorkspaceSpec":
        if (self.repo_path is None) == (self.image_workdir is None):
            raise ValueError("give exactly one of repo_path (a host directory) or image_workdir (a path in image)")
        if self.image_workdir is not None and not self.image:
            raise ValueError("image_workdir needs image")
        return self

    @property
    def image_resident(self) -> bool:
        return self.image_workdir is not None


class CommandStatus(str, Enum):
    ok = "ok"  # exit code 0
    nonzero_exit = "nonzero_exit"
    timeout = "timeout"  # wall-clock limit hit; the command's processes were killed
    output_limit = "output_limit"  # printed more than output_kill_bytes; killed
    shell_exited = "shell_exited"  # the command ended the shell (exit, exec); a fresh shell took over
    sandbox_died = "sandbox_died"  # the sandbox itself is gone; the session cannot go on


class CommandResult(BaseModel):
    """The outcome of one shell command, failures included."""

    output: str = Field(description="stdout and stderr interleaved, capped (head + marker + tail)")
    exit_code: int | None = None
    status: CommandStatus
    truncated: bool = False
    output_bytes: int = Field(0, description="bytes the command printed in all")
    duration_s: float = 0.0
    files_changed: bool | None = Field(
        None, description="whether the workspace outside .git changed since the previous command "
        "or diff (None: the backend cannot tell); lets a caller skip a diff")

    @property
    def ok(self) -> bool:
        return self.status is CommandStatus.ok


class ExactDiff(BaseModel):
    """The workspace diff with what it takes to rebuild the workspace from the base exactly."""

    text: str = Field(description="the text diff (what ``Sandbox.diff`` returns)")
    lossy: bool = Field(False, description="the text cannot rebuild the workspace: a binary file, or bytes "
                                           "that are not UTF-8")
    patch: bytes | None = Field(None, description="when lossy: ``git diff --binary --full-index``, exact")
    patch_error: str | None = Field(None, description="when lossy and the exact patch was withheld (too large)")
    skipped: list[str] = Field(default_factory=list, description=(
        "what the diff left out, as 'path (reason)': what git cannot read or must not be let near (an embedded "
        "repository, an unreadable file or directory, a FIFO, a socket, a path too long, an untracked file "
        "over the diff limit, a name git refuses)"))


class SandboxInfo(BaseModel):
    """Which protections a started session actually has."""

    backend: str
    seccomp: bool = False
    landlock_abi: int = 0
    cgroup: bool = False
    noexec_workspace: bool = False
    blocked_tools_absent: bool = False
    cpu_policy: str = Field("normal", description="scheduling policy the sandbox's processes run under")
    base_commit: str = Field("", description="commit of the squashed workspace repository")
    details: dict[str, str] = Field(default_factory=dict)


class ArgumentError(ValueError):
    """The runtime refused a call's arguments (the caller's mistake, not an infrastructure failure)."""

    kind = "invalid_arguments"


class SandboxError(RuntimeError):
    """Root of infrastructure failures of the sandbox layer."""

    kind: str = "sandbox_error"


class SandboxStartError(SandboxError):
    kind = "sandbox_start_failed"


class SandboxDied(SandboxError):
    kind = "sandbox_died"


class SandboxClosed(SandboxError):
    kind = "sandbox_closed"


class DiffTooLarge(SandboxError):
    """The workspace's diff is over ``Limits.max_diff_bytes``: what the agent wrote, not a failure of ours."""

    kind = "diff_too_large"


class DiffUnreadable(SandboxError):
    """The runtime could not read the workspace's diff (git failed or ran out of time on what the
    workspace holds, /workspace itself is unreadable, ...): the message says why, in one line.
    Once the agent has changed the workspace, that is what the agent left, not a failure of ours."""

    kind = "diff_failed"


class PathError(SandboxError, ValueError):
    """A path outside the workspace, or one that cannot be read or written."""

    kind = "bad_path"

    def __init__(self, message: str, reason: str = "bad_path") -> None:
        super().__init__(message)
        # "outside_workspace", "not_found", "is_directory", "too_large", "bad_path"
        self.reason = reason


class ImageUnavailable(SandboxStartError):
    """A task's image could not be made present: it does not exist, the registry refused or could
    not be reached, or the pull timed out. The task's environment is at fault, not the agent."""

    kind = "image_unavailable"

    def __init__(self, image: str, reason: str) -> None:
        super().__init__(f"image {image!r} is unavailable: {reason}")
        self.image = image
        self.reason = reason


class WorkspaceError(SandboxError):
    """The task's repository could not be prepared (or failed its scrub check)."""

    kind = "workspace_error"
