"""Child processes that serve (or just run): one small API for the jobs every launcher repeats.

    port = free_port()
    with ManagedProcess([sys.executable, "-m", "http.server", str(port)], log_path="srv.log",
                        url=f"http://127.0.0.1:{port}", health_path="/") as srv:
        srv.wait_healthy(timeout_s=30)    # readiness, not a sleep: fails at once if it exits
        ...                               # srv.url, srv.log_path, srv.tail()
    # leaving the block stopped its whole process group

- `free_port(host)`: a port that was free on `host` a moment ago (bind to port 0).
- `start_process(argv, log_path)`: the command in its own session (its own process group),
  stdin from /dev/null, stdout and stderr appended to the log file.
- `wait_healthy(url, proc, timeout_s, path)`: poll `GET url+path` until it answers 200; raise
  `StartupError` (with the log's tail) as soon as the process exits, or when the time is up.
- `stop_process_group(proc, grace_s)`: SIGTERM to the group, SIGKILL to whatever is left of it
  after `grace_s` (or as soon as the leader is gone), then reap the leader
  (`stop_process_groups`: several at once, one grace period).
- `log_tail(path, lines)`: the last non-blank lines of a log (carriage returns split lines).

Stdlib only; httpx is imported when a health check first runs, so importing this module (or
env_client) stays light. The env server as such a process: `env_client.local_server`.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["ManagedProcess", "StartupError", "free_port", "leader_exited", "log_tail", "probe_health",
           "signal_group", "start_process", "stop_process_group", "stop_process_groups", "wait_healthy"]

TAIL_LINES = 25
_TAIL_BYTES = 64 * 1024


class StartupError(RuntimeError):
    """A process did not become healthy: it exited first (`returncode` is set for a process),
    or the time ran out. The message ends with the last lines of its log (`log_tail`)."""

    def __init__(self, message: str, *, returncode: int | None = None, exited: bool = False,
                 log_tail: str = "") -> None:
        super().__init__(message)
        self.returncode = returncode
        self.exited = exited
        self.log_tail = log_tail


# ------------------------------------------------------------------------------------------------ ports, logs
def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` (IPv4, or IPv6 when `host` has a colon) when this returns.
    Someone else may take it before the caller binds it: servers that fail with "address
    already in use" are worth one more start on a new port (`local_env_server` does that)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def log_tail(path: str | os.PathLike[str], lines: int = TAIL_LINES) -> str:
    """The last `lines` non-blank lines of the file at `path` (its last 64 KiB; progress-bar
    carriage returns split lines); "" when there is no such file or nothing in it."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - _TAIL_BYTES))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    rows = [r.rstrip() for r in re.split(r"[\r\n]+", text) if r.strip()]
    return "\n".join(rows[-lines:]) if lines > 0 else ""


# ------------------------------------------------------------------------------------------------ process groups
def start_process(argv: Sequence[str], log_path: str | os.PathLike[str], *, env: Mapping[str, str] | None = None,
                  cwd: str | os.PathLike[str] | None = None, header: str | None = None) -> subprocess.Popen:
    """Start `argv` in a new session (so it leads its own process group), stdin from /dev/null,
    stdout and stderr appended to `log_path` (created with its folder; `header` is written
    first). `env` is the whole environment (None: this process's). OSError if it cannot run."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:  # the child keeps its own copy of the descriptor
        if header:
            log.write(header.encode("utf-8", "replace"))
            log.flush()
        return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=None if env is None else dict(env), cwd=cwd, start_new_session=True)


def leader_exited(proc: subprocess.Popen) -> bool:
    """Whether `proc` has exited, without reaping it: an unreaped leader keeps its pid, which
    is its group's id, from being reused, so the group can still be signalled safely."""
    if proc.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def signal_group(proc: subprocess.Popen, sig: int) -> None:
    """Send `sig` to the process group `proc` leads, unless `proc` was reaped already (its pid
    may belong to someone else by now). A group with nobody left in it is no error."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)


def stop_process_group(proc: subprocess.Popen, grace_s: float = 10.0) -> int | None:
    """Stop the process group `proc` leads (started by `start_process`, or any Popen with
    `start_new_session=True`): SIGTERM to the group, up to `grace_s` for the leader to exit,
    then SIGKILL to whatever is left of the group (children that outlived the leader too);
    the leader is reaped last. Returns its exit code (None if it could not be reaped)."""
    return stop_process_groups([proc], grace_s)[0]


def stop_process_groups(procs: Sequence[subprocess.Popen], grace_s: float = 10.0) -> list[int | None]:
    """`stop_process_group` for several groups at once: one grace period for all of them."""
    for proc in procs:
        signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + max(0.0, grace_s)
    while not all(leader_exited(p) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.02)
    for proc in procs:
        signal_group(proc, signal.SIGKILL)
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
    return [p.returncode for p in procs]


# ------------------------------------------------------------------------------------------------ readiness
def _describe(name: str | None, url: str, log_path: str | os.PathLike[str] | None, why: str) -> tuple[str, str]:
    tail = log_tail(log_path) if log_path is not None else ""
    msg = f"{name or 'the process'} at {url} {why}"
    if log_path is not None:
        msg += f"\n--- last lines of its log ({log_path}) ---\n{tail or '(empty)'}"
    return msg, tail


def probe_health(client: Any, url: str, proc: subprocess.Popen | threading.Thread | None = None,
                 path: str = "/health", *, log_path: str | os.PathLike[str] | None = None,
                 name: str | None = None) -> bool:
    """One readiness check with an `httpx.Client`: True when `GET url+path` answers 200 while
    `proc` (a process, a server thread, or None) still runs. Raises `StartupError` once `proc`
    has exited (a process is then stopped and reaped, its exit code in the error)."""
    import httpx

    def exited() -> bool:
        if isinstance(proc, threading.Thread):
            return not proc.is_alive()
        return proc is not None and leader_exited(proc)

    def fail() -> StartupError:
        code = stop_process_group(proc, 0) if isinstance(proc, subprocess.Popen) else None
        why = "exited" + (f" with code {code}" if code is not None else "") + " before it was healthy"
        msg, tail = _describe(name, url, log_path, why)
        return StartupError(msg, returncode=code, exited=True, log_tail=tail)

    if exited():
        raise fail()
    try:
        ok = client.get(url.rstrip("/") + path).status_code == 200
    except httpx.HTTPError:
        ok = False
    if ok and exited():  # the answer came from someone else on that port
        raise fail()
    return ok


def wait_healthy(url: str, proc: subprocess.Popen | threading.Thread | None = None, timeout_s: float = 60.0,
                 path: str = "/health", *, log_path: str | os.PathLike[str] | None = None, name: str | None = None,
                 interval_s: float = 0.05) -> float:
    """Block until `GET url+path` answers 200 (probing every `interval_s`); the seconds it took.

    Raises `StartupError` at once when `proc` exits first (see `probe_health`), or after
    `timeout_s` (the process is left running: stopping it is the caller's). Either message
    names `url` and ends with the tail of `log_path` when given."""
    import httpx

    start = time.monotonic()
    deadline = start + timeout_s
    with httpx.Client(timeout=2.0, trust_env=False) as client:
        while True:
            if probe_health(client, url, proc, path, log_path=log_path, name=name):
                return time.monotonic() - start
            left = deadline - time.monotonic()
            if left <= 0:
                msg, tail = _describe(name, url, log_path, f"was not healthy ({path}) after {timeout_s:g} s")
                raise StartupError(msg, log_tail=tail)
            time.sleep(min(interval_s, left))


# ------------------------------------------------------------------------------------------------ all of it
class ManagedProcess:
    """One command in its own process group with its output in a log file (`start_process`);
    with `url`, a server whose readiness `wait_healthy()` checks. A context manager: entering
    starts it (unless started), leaving stops its whole group (`stop_process_group`).

        with ManagedProcess(argv, log_path, url=url) as p:
            p.wait_healthy(60)        # StartupError (with the log tail) if it exits or stays down
            p.url, p.log_path, p.tail(), p.proc
    """

    def __init__(self, argv: Sequence[str], log_path: str | os.PathLike[str], *, url: str | None = None,
                 health_path: str = "/health", env: Mapping[str, str] | None = None,
                 cwd: str | os.PathLike[str] | None = None, name: str | None = None, header: str | None = None,
                 stop_grace_s: float = 10.0) -> None:
        self.argv = [str(a) for a in argv]
        self.log_path = Path(log_path)
        self.url = url
        self.health_path = health_path
        self.env = env
        self.cwd = cwd
        self.name = name or Path(self.argv[0]).name
        self.header = header
        self.stop_grace_s = stop_grace_s
        self.proc: subprocess.Popen | None = None

    def start(self) -> ManagedProcess:
        """Start the command (once)."""
        if self.proc is None:
            self.proc = start_process(self.argv, self.log_path, env=self.env, cwd=self.cwd, header=self.header)
        return self

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.returncode

    def exited(self) -> bool:
        """Whether the leader has exited (it is not reaped by asking)."""
        return self.proc is not None and leader_exited(self.proc)

    def probe(self, client: Any) -> bool:
        """One readiness check (`probe_health`) with an httpx.Client."""
        assert self.proc is not None and self.url is not None, "start() a process with a url first"
        return probe_health(client, self.url, self.proc, self.health_path, log_path=self.log_path, name=self.name)

    def wait_healthy(self, timeout_s: float = 60.0) -> float:
        """`wait_healthy` on this process: the seconds until `url + health_path` answered 200."""
        assert self.proc is not None and self.url is not None, "start() a process with a url first"
        return wait_healthy(self.url, self.proc, timeout_s, self.health_path, log_path=self.log_path,
                            name=self.name)

    def stop(self, grace_s: float | None = None) -> int | None:
        """Stop the whole process group (`stop_process_group`); the leader's exit code."""
        if self.proc is None:
            return None
        return stop_process_group(self.proc, self.stop_grace_s if grace_s is None else grace_s)

    def tail(self, lines: int = TAIL_LINES) -> str:
        """The last lines of the log (`log_tail`)."""
        return log_tail(self.log_path, lines)

    def __enter__(self) -> ManagedProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
