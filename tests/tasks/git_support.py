"""git in a repository a test writes, its commits dated once and for all (the same files make the same
commit): the tiny task repositories of tests/tasks."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def git(repo: Path, *args: str) -> str:
    """``git -C repo ARGS`` with a fixed author, committer and date; its stdout."""
    when = {"GIT_AUTHOR_DATE": "2001-02-03T04:05:06Z", "GIT_COMMITTER_DATE": "2001-02-03T04:05:06Z"}
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@example.com", "-c", "user.name=t",
                           "-c", "commit.gpgsign=false", *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **when}).stdout
