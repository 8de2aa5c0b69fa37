"""One verdict cache for every task source (``build``'s mutations, ``mine``'s release pairs): one
version, one key rule, one node-id rule.

A verdict (a suite run's outcomes on a candidate, a release pair's FAIL_TO_PASS and PASS_TO_PASS, a
reproducer's run, a task's check by the verifier) is cached by the content it was computed from, so a
rebuild only replays git work. The entries of one package live under
``<cache>/verdicts/<source>/<package>/<fingerprint>/``, where the fingerprint covers ``VERDICT_VERSION``
and what every verdict of that package depends on (its clean tree or release, its test requirements,
its venv, the interpreter); each entry's key covers the rest. Entries are written atomically
(``cache.write_atomic``): concurrent runs on one cache may both compute a verdict, never corrupt it.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from .cache import write_atomic

# Bump when the way verdicts are computed changes (the runner, its plugin, a rule below): it invalidates
# every cached verdict of every source. (The builder was at 4 and the miner at 3 before they shared one.)
VERDICT_VERSION = "5"

# Node ids that pass unchanged through a shell command line and a test log.
_PRINTABLE = re.compile(r"^[\x21-\x7e]+$")
_UNSAFE_CHARS = set("\\'\"`$;&|<>")


def safe_nodeid(nodeid: str) -> bool:
    """A test function's node id (``path::name``) that a task may list: printable ASCII without spaces,
    quotes, backslashes or shell metacharacters, so it passes unchanged through the grader's command
    line and log."""
    return bool(_PRINTABLE.match(nodeid)) and "::" in nodeid and not _UNSAFE_CHARS & set(nodeid)


def digest(*parts: Any, n: int = 24) -> str:
    """A short content key of ``parts`` (strings, or anything JSON can write)."""
    text = "\0".join(p if isinstance(p, str) else json.dumps(p, sort_keys=True) for p in parts)
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:n]


class VerdictCache:
    """The cached verdicts of one package of one source (``synthetic-mutation``, ``release-diff``)."""

    def __init__(self, cache_dir: Path, source: str, package: str, *fingerprint: Any) -> None:
        self.folder = cache_dir / "verdicts" / source / package / digest(VERDICT_VERSION, *fingerprint, n=16)

    def load(self, key: str) -> dict | None:
        try:
            value = json.loads((self.folder / f"{key}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    def store(self, key: str, value: dict) -> None:
        write_atomic(self.folder / f"{key}.json", json.dumps(value, sort_keys=True))
