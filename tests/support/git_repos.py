"""Git repositories a test writes: the suite's one ``git``, and the one-commit repository most task tests
build (the bug committed, the gold patch as a diff).

``git`` runs with a fixed author, committer and date and without the machine's system or global
configuration (no signing, no hooks, no aliases), so the same files make the same commit anywhere.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

_WHEN = "2001-02-03T04:05:06Z"
_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_AUTHOR_DATE": _WHEN, "GIT_COMMITTER_DATE": _WHEN,
        "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C"}


def git_run(repo: Path, *args: str, input: str | bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """``git -C repo ARGS`` (the suite's settings above), whatever its exit status; stdout and stderr as bytes."""
    data = input.encode() if isinstance(input, str) else input
    return subprocess.run(["git", "-C", str(repo), "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false", *args],
                          input=data, capture_output=True, env={**os.environ, **_ENV})


def git(repo: Path, *args: str, input: str | bytes | None = None) -> str:
    """``git -C repo ARGS``; its stdout (undecodable bytes kept as surrogates). A failure is an
    AssertionError that quotes git's stderr."""
    run = git_run(repo, *args, input=input)
    assert run.returncode == 0, f"git {' '.join(args)} (in {repo}) exited {run.returncode}: {run.stderr.decode(errors='replace')}"
    return run.stdout.decode("utf-8", "surrogateescape")


def export_tree(repo: Path, commit: str, dest: Path, *patches: str) -> Path:
    """The files of ``commit`` (no history) written under ``dest``, then ``patches`` applied in turn; ``dest``."""
    archive = git_run(repo, "archive", commit)
    assert archive.returncode == 0, archive.stderr.decode(errors="replace")
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    for patch in patches:
        if patch.strip():
            git(dest, "apply", "--whitespace=nowarn", "-", input=patch)
    return dest


def write_files(root: Path, files: dict[str, str]) -> None:
    """Write ``files`` (relative path -> text, UTF-8) under ``root``, making their folders."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def commit_files(repo: Path, files: dict[str, str] | None = None, message: str = "base") -> str:
    """A new repository at ``repo`` (branch main) whose first commit holds ``files`` and whatever the folder
    already has; the commit's sha."""
    repo.mkdir(parents=True, exist_ok=True)
    write_files(repo, files or {})
    git(repo, "init", "-q", "-b", "main")
    return commit_all(repo, message)


def commit_all(repo: Path, message: str) -> str:
    """Commit everything the working tree has (``git add -A``); the new commit's sha."""
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def diff_to(repo: Path, changed: dict[str, str]) -> str:
    """The diff that turns the committed files into ``changed`` (a gold patch); the working tree is left as
    committed."""
    write_files(repo, changed)
    try:
        return git(repo, "diff", "--", *changed)
    finally:
        git(repo, "checkout", "-q", "--", *changed)


def added_diff(repo: Path, files: dict[str, str]) -> str:
    """The diff that adds ``files`` (new to the committed tree) to it, a test_patch that brings hidden tests; the
    working tree is left as committed."""
    write_files(repo, files)
    try:
        git(repo, "add", "-N", "--", *files)
        return git(repo, "diff", "--", *files)
    finally:
        git(repo, "rm", "-q", "--cached", "--", *files)
        for rel in files:
            (repo / rel).unlink()
