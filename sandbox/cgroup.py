"""Per-session cgroups (pids and memory), where the host lets us create them.

Used by the bwrap backend as a layer under the rlimits: RLIMIT_NPROC does not
bind a sandbox whose uid maps to host root, a pids cgroup does. Docker gives
its containers cgroups of its own.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PARENT = "swe-openenv"
_swept = False


class SessionCgroup:
    """The cgroup directories of one session (v1: one per controller; v2: one)."""

    def __init__(self, dirs: list[Path]) -> None:
        self.dirs = dirs

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    @staticmethod
    def sweep_stale() -> None:
        """Remove empty session cgroups left by a server that died (rmdir fails on busy ones). A session
        cgroup is named after the process that made it (``s-<pid>-<id>``, ``name``): one whose process
        lives is left alone, since it is empty between its creation and its jail joining it (while the
        jail starts). Names of the older form (no pid) are swept when empty."""
        for parent in (ROOT / PARENT, ROOT / "pids" / PARENT, ROOT / "memory" / PARENT):
            if parent.is_dir():
                for d in parent.glob("s-*"):
                    parts = d.name.split("-", 2)
                    if len(parts) == 3 and parts[1].isdigit() and _alive(int(parts[1])):
                        continue
                    try:
                        d.rmdir()
                    except OSError:
                        pass

    @staticmethod
    def name(session_id: str) -> str:
        """The cgroup name of a session this process starts: ``s-<this pid>-<session id>``."""
        return f"s-{os.getpid()}-{session_id}"

    @classmethod
    def create(cls, name: str, pids: int, memory_mb: int) -> "SessionCgroup | None":
        """Create and configure the cgroup; None when the host does not allow it."""
        global _swept
        if not _swept:
            _swept = True
            cls.sweep_stale()
        made: list[Path] = []
        try:
            if (ROOT / "cgroup.controllers").exists():  # unified (v2)
                parent = ROOT / PARENT
                parent.mkdir(exist_ok=True)
                (ROOT / "cgroup.subtree_control").write_text("+pids +memory")
                (parent / "cgroup.subtree_control").write_text("+pids +memory")
                d = parent / name
                d.mkdir()
                made.append(d)
                (d / "pids.max").write_text(str(pids))
                (d / "memory.max").write_text(str(memory_mb * 1024 * 1024))
                (d / "memory.swap.max").write_text("0") if (d / "memory.swap.max").exists() else None
            else:  # v1: a directory per controller
                for ctrl, files in (("pids", {"pids.max": str(pids)}),
                                    ("memory", {"memory.limit_in_bytes": str(memory_mb * 1024 * 1024)})):
                    d = ROOT / ctrl / PARENT / name
                    d.mkdir(parents=True)
                    made.append(d)
                    for fname, value in files.items():
                        (d / fname).write_text(value)
        except OSError:
            cls(made).remove()
            return None
        return cls(made)

    def pids(self) -> set[int]:
        found: set[int] = set()
        for d in self.dirs:
            try:
                found.update(int(p) for p in (d / "cgroup.procs").read_text().split())
            except OSError:
                pass
        return found

    def kill_all(self) -> None:
        for d in self.dirs:
            kill_file = d / "cgroup.kill"
            if kill_file.exists():
                try:
                    kill_file.write_text("1")
                except OSError:
                    pass
        for _ in range(5):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass

    def remove(self) -> None:
        for d in reversed(self.dirs):
            try:
                d.rmdir()
            except OSError:
                pass


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (on this host's pid namespace)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    return True
