"""Deterministic git repositories: a clean import commit and one child commit per bug.

Author, committer, dates and config are fixed so the same tree always gets the
same commit id; bug commits are made with plumbing (no checkout) and kept
reachable by a ``refs/heads/task/<id>`` branch.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from sandbox.git import run_git

from .sources import TaskgenError

# The task repositories' own identity (not the templates'): their commit ids are the tasks' base commits.
_IDENTITY = {
    "GIT_AUTHOR_NAME": "swe-openenv taskgen", "GIT_AUTHOR_EMAIL": "taskgen@localhost",
    "GIT_COMMITTER_NAME": "swe-openenv taskgen", "GIT_COMMITTER_EMAIL": "taskgen@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}


def git(repo: Path, *args: str, env: dict[str, str] | None = None, input: str | None = None) -> str:
    """git in ``repo`` with the host's one hardening (``sandbox/git.py``); nothing of this
    process's environment (``GIT_DIR``, ``GIT_INDEX_FILE``, ...) but what ``env`` gives."""
    proc = run_git(args, repo, env=env, input=input, identity=_IDENTITY, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        raise TaskgenError(f"git {' '.join(args[:3])} in {repo.name} failed: {proc.stderr.strip()[-600:]}")
    return proc.stdout


def init_clean(src: Path, dest: Path, message: str) -> str:
    """Copy ``src`` to ``dest`` (replacing it), make it a git repo with one commit; return its id."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest, symlinks=True)
    git(dest, "init", "-q", "-b", "main")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "--no-verify", "-m", message)
    return git(dest, "rev-parse", "HEAD").strip()


def commit_change(repo: Path, parent: str, path: str, content: str, message: str) -> str:
    """Commit ``parent``'s tree with ``path`` replaced by ``content`` (no checkout); return its id."""
    blob = git(repo, "hash-object", "-w", "--stdin", input=content).strip()
    mode = git(repo, "ls-tree", parent, "--", path).split()[0]
    with tempfile.TemporaryDirectory(prefix="taskgen-index-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git(repo, "read-tree", parent, env=env)
        git(repo, "update-index", "--cacheinfo", f"{mode},{blob},{path}", env=env)
        tree = git(repo, "write-tree", env=env).strip()
    return git(repo, "commit-tree", tree, "-p", parent, "-m", message).strip()


def diff(repo: Path, a: str, b: str) -> str:
    return git(repo, "diff", "--no-color", "--no-ext-diff", a, b)


def set_branch(repo: Path, name: str, commit: str) -> None:
    git(repo, "update-ref", f"refs/heads/{name}", commit)


def commit_tree(repo: Path, parent: str, tree_dir: Path, message: str) -> str:
    """Commit the files of ``tree_dir`` (all of them, as ``git add -A`` sees them) as a child of
    ``parent`` in ``repo``, without touching ``repo``'s work tree or index; return its id."""
    with tempfile.TemporaryDirectory(prefix="taskgen-index-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index"), "GIT_DIR": str((repo / ".git").resolve()),
               "GIT_WORK_TREE": str(tree_dir.resolve())}
        git(tree_dir, "add", "-A", env=env)
        tree = git(tree_dir, "write-tree", env=env).strip()
    return git(repo, "commit-tree", tree, "-p", parent, "-m", message).strip()
