"""git on the host, hardened once: for the repositories we trust (a task's, a template, one we build).

Every host-side git call runs with this environment and these settings, whoever calls it:

* no configuration but the repository's own (and ``-c`` below): no system or global config
  (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL=/dev/null``, ``HOME=/dev/null``), no system
  attributes (``GIT_ATTR_NOSYSTEM``, ``core.attributesFile=/dev/null``), no replace refs;
  nothing inherited from the caller's environment but ``PATH`` (no ``GIT_DIR``, ``GIT_*``
  config, pager, editor or askpass of the host's);
* nothing runs on our behalf: no hooks (``core.hooksPath=/dev/null``), no fsmonitor, no
  signing, no credential helper, no terminal prompt (``GIT_TERMINAL_PROMPT=0``), stdin closed;
* no transport at all (``protocol.allow=never``): host git never fetches;
* a fixed identity and date (``GIT_IDENTITY``), so a tree's commit depends on the tree only;
  no line-ending conversion (``core.autocrlf=false``); messages in the C locale;
* no search above the directory it runs in (``GIT_CEILING_DIRECTORIES``): git there sees that
  directory's repository or none, never an enclosing one.

``run_git(args, cwd)`` runs one command so; ``git_env`` / ``git_argv`` are the same for a
caller that needs its own ``Popen``; ``shell_git_setup()`` is the same identity and hardening
as shell text, for git run inside a sandbox (the grader rebuilds the graded tree's history
there exactly as a template's was built here).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence

__all__ = ["GIT_IDENTITY", "GitError", "HARDENED_CONFIG", "HARDENED_ENV", "git_argv", "git_env", "run_git",
           "shell_git_setup"]

# Who made a template's one commit, and when: fixed, so a tree's commit depends on the tree only
# (the grader rebuilds the graded tree's history the same way, see shell_git_setup).
GIT_IDENTITY: dict[str, str] = {
    "GIT_AUTHOR_NAME": "swe-openenv", "GIT_AUTHOR_EMAIL": "base@swe-openenv.invalid",
    "GIT_COMMITTER_NAME": "swe-openenv", "GIT_COMMITTER_EMAIL": "base@swe-openenv.invalid",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
}

HARDENED_ENV: dict[str, str] = {
    "HOME": os.devnull, "LC_ALL": "C",
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_ATTR_NOSYSTEM": "1",
    "GIT_NO_REPLACE_OBJECTS": "1", "GIT_TERMINAL_PROMPT": "0",
}
"""The environment of every host git call (on top of ``PATH``), before the identity."""

HARDENED_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", os.devnull), ("core.fsmonitor", "false"), ("core.attributesFile", os.devnull),
    ("core.autocrlf", "false"), ("commit.gpgsign", "false"), ("credential.helper", ""),
    ("protocol.allow", "never"),
)
"""``-c`` settings of every host git call (they win over the repository's own config)."""


class GitError(RuntimeError):
    """A git command failed: its ``command`` (the arguments after ``git``), ``cwd``,
    ``returncode`` and ``stderr`` (text)."""

    def __init__(self, args: Sequence[str], cwd: str, returncode: int, stderr: str) -> None:
        super().__init__(f"git {' '.join(args)} failed in {cwd}: {stderr.strip()}")
        self.command = list(args)
        self.cwd = cwd
        self.returncode = returncode
        self.stderr = stderr


def git_env(cwd: str | os.PathLike[str] | None = None, *, identity: Mapping[str, str] | None = None,
            env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a hardened git call: ``PATH``, ``HARDENED_ENV``, the identity
    (``GIT_IDENTITY`` unless given), a ceiling just above ``cwd`` when given, then ``env``
    (e.g. ``GIT_INDEX_FILE``, ``GIT_DIR``) last."""
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **HARDENED_ENV,
            **(GIT_IDENTITY if identity is None else identity)}
    if cwd is not None:
        full["GIT_CEILING_DIRECTORIES"] = os.path.dirname(os.path.realpath(cwd))
    full.update(env or {})
    return full


def git_argv(args: Sequence[str], config: Sequence[tuple[str, str]] = ()) -> list[str]:
    """``git -c k=v ... ARGS``: ``HARDENED_CONFIG``, then the caller's ``config``."""
    argv = ["git"]
    for key, value in (*HARDENED_CONFIG, *config):
        argv += ["-c", f"{key}={value}"]
    return argv + [str(a) for a in args]


def run_git(args: Sequence[str], cwd: str | os.PathLike[str], *, input: bytes | str | None = None,
            env: Mapping[str, str] | None = None, identity: Mapping[str, str] | None = None,
            config: Sequence[tuple[str, str]] = (), timeout: float | None = None, text: bool = False,
            check: bool = True) -> subprocess.CompletedProcess:
    """Run ``git ARGS`` in ``cwd`` (a repository we trust) with the hardening of this module;
    stdout and stderr are captured (str with ``text``, else bytes). ``env`` adds to the hardened
    environment, ``identity`` replaces ``GIT_IDENTITY``, ``config`` adds ``-c`` settings.
    With ``check`` a non-zero exit raises ``GitError``."""
    feed: dict[str, object] = {"input": input} if input is not None else {"stdin": subprocess.DEVNULL}
    argv = git_argv(["-C", os.fspath(cwd), *args], config)  # -C: a missing folder is git's error, not ours
    proc = subprocess.run(argv, env=git_env(cwd, identity=identity, env=env), capture_output=True, text=text,
                          timeout=timeout, **feed)  # type: ignore[call-overload]
    if check and proc.returncode != 0:
        err = proc.stderr if text else proc.stderr.decode(errors="replace")
        raise GitError(args, str(cwd), proc.returncode, err)
    return proc


def shell_git_setup(identity: Mapping[str, str] | None = None) -> str:
    """Shell text that gives the git commands after it (in the same shell) this module's
    identity and hardening: ``export`` of ``HARDENED_ENV`` and the identity, and a ``git``
    function adding ``HARDENED_CONFIG``. For a shell in a sandbox: PATH is left alone."""
    exports = {**HARDENED_ENV, **(GIT_IDENTITY if identity is None else identity)}
    words = " ".join(f"{k}={shlex.quote(v)}" for k, v in exports.items())
    config = " ".join(f"-c {shlex.quote(f'{k}={v}')}" for k, v in HARDENED_CONFIG)
    return f'export {words}; git() {{ command git {config} "$@"; }}'
