"""Releases on the package index: list a project's versions and pick consecutive pairs.

Versions come from ``pip index versions`` (the machine's pip configuration decides
which index). Only final releases count (no pre-, post- or dev releases); a pair is
two neighbours in version order, patch releases (same major.minor) first.
"""

from __future__ import annotations

import re
import subprocess
import sys

from .sources import TaskgenError

_FINAL = re.compile(r"^\d+(\.\d+)*$")


def list_versions(name: str) -> list[str]:
    """Final release versions of ``name`` on the index, oldest first."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", name, "--disable-pip-version-check"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("Available versions:")), None)
    if proc.returncode != 0 or line is None:
        raise TaskgenError(f"pip index versions {name} failed: {(proc.stderr or proc.stdout).strip()[-400:]}")
    versions = [v.strip() for v in line.split(":", 1)[1].split(",") if _FINAL.match(v.strip())]
    return sorted(set(versions), key=version_key)


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def is_patch_release(earlier: str, later: str) -> bool:
    """Same major.minor, later micro (``7.2.1 -> 7.2.2``)."""
    a, b = version_key(earlier), version_key(later)
    return len(a) >= 3 and len(b) >= 3 and a[:2] == b[:2]


def consecutive_pairs(versions: list[str], limit: int, patch_only: bool = False) -> list[tuple[str, str]]:
    """The ``limit`` newest neighbouring pairs of ``versions`` (oldest first), patch releases preferred.

    With ``patch_only`` only patch releases are taken; otherwise the newest patch
    pairs come first and minor/major steps fill what is left.
    """
    ordered = sorted(versions, key=version_key)
    pairs = list(zip(ordered, ordered[1:]))
    patch = [p for p in pairs if is_patch_release(*p)]
    chosen = patch[-limit:] if limit > 0 else []
    if not patch_only and len(chosen) < limit:
        others = [p for p in pairs if p not in patch]
        chosen += others[len(others) - (limit - len(chosen)):] if limit - len(chosen) < len(others) else others
    return sorted(chosen, key=lambda p: version_key(p[0]))
