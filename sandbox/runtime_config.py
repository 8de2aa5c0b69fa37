"""The init message a backend sends the in-sandbox runtime (one place for every backend)."""

from __future__ import annotations

from typing import Any

from .models import SandboxConfig, WorkspaceSpec

BASE_PATH = ("/usr/local/bin", "/usr/bin", "/bin")
BASE_EXEC_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib64")
WRITE_PATHS = ("/workspace", "/tmp", "/dev")
# Paths the sandbox mounts its own filesystems on: a python_env below one of them
# would be hidden, so it is mounted at RELOCATED_VENV instead (venvs whose scripts
# use `#!/usr/bin/env python`, as the task builder makes them, run anywhere).
SANDBOX_OWNED = ("/tmp", "/workspace", "/dev", "/proc", "/.swe", "/etc")
RELOCATED_VENV = "/opt/swe-python-env"


def venv_mount_point(venv: str, relocate: bool = False) -> str:
    """Where a task's python_env appears inside the sandbox (``relocate``: always at RELOCATED_VENV)."""
    hidden = any(venv == p or venv.startswith(p + "/") for p in SANDBOX_OWNED)
    return RELOCATED_VENV if hidden or relocate else venv


def shell_env(spec: WorkspaceSpec, venv: str | None) -> dict[str, str]:
    """The agent shell's whole environment: nothing is inherited from the host."""
    path = ([f"{venv}/bin"] if venv else []) + list(BASE_PATH)
    env = {
        "PATH": ":".join(path), "HOME": "/tmp/home", "USER": "agent", "LOGNAME": "agent",
        "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat",
        # Python writes and reads bytecode only under a private prefix (bwrap: the environment's own
        # bytecode is its read-only first layer, sandbox/bytecode.py).
        "PYTHONPYCACHEPREFIX": "/tmp/.pycache", "PYTHONUNBUFFERED": "1", "TMPDIR": "/tmp",
        "GIT_CONFIG_NOSYSTEM": "1",
        # a copy-on-write workspace's files belong to the template's owner, not the session uid
        "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "/workspace",
    }
    if venv:
        env["VIRTUAL_ENV"] = venv
    env.update(spec.env)
    return env


def runtime_init(spec: WorkspaceSpec, config: SandboxConfig, *, mode: str, template: str, upper: str,
                 base_commit: str, venv: str | None, extra_exec_paths: list[str]) -> dict[str, Any]:
    """The first line the runtime reads (see ``sandbox/runtime.py``)."""
    lim, pol = config.limits, config.policy
    return {
        "mode": mode, "template": template, "upper": upper, "base_commit": base_commit,
        "workspace_mb": lim.workspace_mb, "tmp_mb": lim.tmp_mb, "limits": lim.model_dump(),
        "env": shell_env(spec, venv), "seccomp": pol.seccomp.value, "landlock": pol.landlock.value,
        "inet_sockets": pol.inet_sockets, "kill_background": pol.kill_background,
        "exec_paths": list(BASE_EXEC_PATHS) + ([venv] if venv else []) + list(extra_exec_paths),
        "write_paths": list(WRITE_PATHS),
    }
