"""Scripts the grader runs *inside* the grading sandbox (stdlib only, Python >= 3.6).

``supervisor.py`` owns the test process: it runs as a separate, non-dumpable
subreaper, starts ``boot.py`` (pytest with the grader's plugin loaded before any
project code) with a clean environment and a pipe for outcome records, kills
every process the tests left behind, and prints one nonce-tagged summary line.
They are read here as text and staged into the sandbox; they are never imported.
"""

from __future__ import annotations

from importlib.resources import files


def script(name: str) -> str:
    """Source text of one kit script (``supervisor.py`` or ``boot.py``)."""
    return files(__package__).joinpath(name).read_text(encoding="utf-8")
