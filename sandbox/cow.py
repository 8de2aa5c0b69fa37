"""Copy-on-write session workspaces through the engine: an overlay volume per session.

A session that copies its template pays for the whole tree (time and tmpfs memory:
about 2 s and 100 MB for Django). Where the engine's host can mount overlayfs, the
docker backend instead asks the engine for a ``local`` volume of type ``overlay``:
the shared template read-only below, a per-session upper directory (owned by the
session uid) on the engine host, mounted ``nosuid,nodev`` at ``/workspace``. Only
what the agent changes is ever written.

The template's files are owned by this host's user, not by the session uid, so a
template used this way is made world-writable once (its parent folders stay
private to this host's user; inside the container only the mounted tree counts).
Mode bits git tracks (the executable bit) do not change.

The upper directory is not a size-limited tmpfs: :meth:`CowWorkspace.used_bytes`
lets the backend hold it to ``workspace_mb`` after every command, and RLIMIT_FSIZE
caps each file meanwhile.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

SHARED_MARK = ".swe-cow-shared"
_share_lock = threading.Lock()


def share_template(template: Path) -> None:
    """Make ``template`` writable through an overlay by any session uid (once per template)."""
    mark = template.parent / SHARED_MARK
    with _share_lock:
        if mark.exists():
            return
        for dirpath, dirnames, filenames in os.walk(template):
            for name in dirnames + filenames + [""]:
                full = os.path.join(dirpath, name) if name else dirpath
                st = os.lstat(full)
                if stat.S_ISLNK(st.st_mode):
                    continue
                extra = 0o777 if stat.S_ISDIR(st.st_mode) else 0o666
                if st.st_mode & extra != extra:
                    os.chmod(full, st.st_mode | extra)
        mark.write_text("1\n")


@dataclass
class CowWorkspace:
    """One session's overlay volume and its upper/work directories on the engine host."""

    client: Any
    volume: str
    root: Path

    @classmethod
    def create(cls, client: Any, template: Path, uid: int, cache: Path, labels: dict[str, str],
               host_path: Callable[[Path], str]) -> "CowWorkspace":
        """Create the volume (blocking). The engine mounts it when the container starts."""
        share_template(template)
        name = f"swe-ws-{secrets.token_hex(8)}"
        root = cache / "cow" / name
        (root / "upper").mkdir(parents=True, mode=0o700)
        (root / "work").mkdir(mode=0o700)
        os.chown(root / "upper", uid, uid)
        opts = (f"lowerdir={host_path(template)},upperdir={host_path(root / 'upper')},"
                f"workdir={host_path(root / 'work')},nosuid,nodev")
        try:
            client.api.create_volume(name=name, driver="local", labels=labels,
                                     driver_opts={"type": "overlay", "device": "overlay", "o": opts})
        except Exception:
            shutil.rmtree(root, ignore_errors=True)
            raise
        return cls(client, name, root)

    def mount(self) -> Any:
        from docker.types import Mount

        return Mount("/workspace", self.volume, type="volume")

    def used_bytes(self) -> int:
        """Bytes the session wrote (the upper layer holds only what changed)."""
        total = 0
        for dirpath, _dirnames, filenames in os.walk(self.root / "upper"):
            for name in filenames:
                try:
                    total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
                except OSError:
                    pass
        return total

    def remove(self) -> None:
        """Remove the volume (after its container) and the session's directories."""
        import docker.errors

        try:
            self.client.api.remove_volume(self.volume, force=True)
        except docker.errors.NotFound:
            pass
        shutil.rmtree(self.root, ignore_errors=True)
