"""sandbox/git.py: host git ignores whatever the host's environment and config say.

A hostile global config (a hook path, an fsmonitor command, an alias, signing, another
identity) and repository hooks work with plain git here (the control), and do nothing
through `run_git` or `shell_git_setup` (the grader's in-sandbox form of the same hardening).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sandbox.git import GIT_IDENTITY, GitError, run_git, shell_git_setup


@pytest.fixture
def hostile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME whose ~/.gitconfig (also named by GIT_CONFIG_GLOBAL and found through
    XDG_CONFIG_HOME) runs a hook and an fsmonitor that leave marker files, defines an alias
    and asks for signed commits by someone else. Returns the folder the markers land in."""
    marks = tmp_path / "marks"
    marks.mkdir()
    home = tmp_path / "home"
    hooks = home / "hooks"
    hooks.mkdir(parents=True)
    for hook in ("pre-commit", "post-commit", "post-checkout", "post-index-change"):
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {marks}/hook-{hook}\n")
        (hooks / hook).chmod(0o755)
    monitor = home / "fsmonitor.sh"
    monitor.write_text(f"#!/bin/sh\ntouch {marks}/fsmonitor\n")
    monitor.chmod(0o755)
    config = (f"[user]\n\tname = Mallory\n\temail = mallory@evil.invalid\n"
              f"[core]\n\thooksPath = {hooks}\n\tfsmonitor = {monitor}\n"
              f"[alias]\n\tpwn = !touch {marks}/alias\n"
              f"[commit]\n\tgpgsign = false\n")
    (home / ".gitconfig").write_text(config)
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".config" / "git" / "config").write_text(config)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", f"'core.hooksPath={hooks}'")
    for key in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL",
                "GIT_AUTHOR_DATE", "GIT_COMMITTER_DATE"):
        monkeypatch.delenv(key, raising=False)
    return marks


def _tree(root: Path) -> Path:
    root.mkdir()
    (root / "a.py").write_text("print('a')\n")
    (root / "sub").mkdir()
    (root / "sub" / "b.txt").write_text("b\r\nline two\n")
    return root


def _commit_with_run_git(repo: Path) -> str:
    run_git(["init", "-q", "--initial-branch=main"], repo)
    run_git(["add", "--all", "--force", "."], repo)
    run_git(["commit", "-q", "-m", "base"], repo)
    return run_git(["rev-parse", "HEAD"], repo, text=True).stdout.strip()


def test_plain_git_obeys_the_hostile_config(hostile, tmp_path):
    """The control: without the hardening, the same environment runs the hook, the fsmonitor
    and the alias, and commits as Mallory."""
    repo = _tree(tmp_path / "plain")
    def plain_git(*args: str) -> subprocess.CompletedProcess:  # the machine's git, its configuration obeyed
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True)

    plain_git("init", "-q")
    plain_git("add", "-A")
    plain_git("commit", "-q", "-m", "base")
    plain_git("status")
    plain_git("pwn")
    assert {"hook-pre-commit", "hook-post-commit", "alias"} <= {p.name for p in hostile.iterdir()}
    assert plain_git("log", "-1", "--format=%an").stdout.strip() == "Mallory"


def test_run_git_ignores_the_hostile_config_and_hooks(hostile, tmp_path):
    repo = _tree(tmp_path / "repo")
    run_git(["init", "-q"], repo)
    local_hooks = repo / ".git" / "hooks"  # the repository's own hooks do not run either
    for hook in ("pre-commit", "post-commit"):
        (local_hooks / hook).write_text(f"#!/bin/sh\ntouch {hostile}/local-{hook}\n")
        (local_hooks / hook).chmod(0o755)
    run_git(["add", "-A"], repo)
    run_git(["commit", "-q", "-m", "base"], repo)
    run_git(["status"], repo)
    with pytest.raises(GitError, match="is not a git command"):
        run_git(["pwn"], repo)
    assert list(hostile.iterdir()) == []
    who = run_git(["log", "-1", "--format=%an <%ae> %ad %cn", "--date=iso-strict"], repo, text=True).stdout.strip()
    assert who == "swe-openenv <base@swe-openenv.invalid> 2000-01-01T00:00:00+00:00 swe-openenv"


def test_run_git_ignores_git_variables_of_the_caller(hostile, tmp_path, monkeypatch):
    """GIT_DIR / GIT_INDEX_FILE of the host's environment never redirect a call; `env=` does."""
    other = _tree(tmp_path / "other")
    subprocess.run(["git", "init", "-q", str(other)], check=True, capture_output=True)
    repo = _tree(tmp_path / "repo")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(tmp_path / "stray-index"))
    base = _commit_with_run_git(repo)
    assert run_git(["rev-list", "--all"], repo, text=True).stdout.split() == [base]
    assert not (tmp_path / "stray-index").exists()
    assert run_git(["rev-parse", "--absolute-git-dir"], repo, text=True).stdout.strip() == str(repo / ".git")
    told = run_git(["rev-parse", "--absolute-git-dir"], repo, env={"GIT_DIR": str(other / ".git")}, text=True)
    assert told.stdout.strip() == str(other / ".git")


def test_the_commit_depends_on_the_tree_only(hostile, tmp_path):
    """Same tree, same commit id (GIT_IDENTITY's fixed author and date), here and through
    shell_git_setup in a shell (how the grader rebuilds the graded tree's history)."""
    a = _commit_with_run_git(_tree(tmp_path / "a"))
    b = _commit_with_run_git(_tree(tmp_path / "b"))
    assert a == b
    c = _tree(tmp_path / "c")
    script = (f"cd {c} && ({shell_git_setup()}; git init --quiet --initial-branch=main && git add --all --force . "
              "&& git commit --quiet -m base && git status --short && git pwn; git rev-parse HEAD)")
    proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], **{k: v for k, v in os.environ.items()
                                                              if k.startswith(("GIT_", "HOME", "XDG_"))}})
    assert proc.stdout.strip() == a, proc.stderr
    assert "is not a git command" in proc.stderr
    assert list(hostile.iterdir()) == []
    assert set(GIT_IDENTITY) <= set(shell_git_setup().split("; ")[0].replace("=", " ").split())


def test_no_search_above_the_folder_and_no_transport(tmp_path):
    repo = _tree(tmp_path / "repo")
    _commit_with_run_git(repo)
    inner = repo / "sub"  # inside the work tree, but not a repository of its own
    with pytest.raises(GitError, match="not a git repository"):
        run_git(["status"], inner)
    with pytest.raises(GitError, match="not allowed"):
        run_git(["clone", "-q", f"file://{repo}", str(tmp_path / "copy")], tmp_path)
    assert not (tmp_path / "copy").exists()
    missing = run_git(["status"], tmp_path / "nowhere", check=False)
    assert missing.returncode != 0 and b"nowhere" in missing.stderr


async def test_the_grader_rebuilds_the_templates_commit_in_the_sandbox(bwrap, hostile, tmp_path):
    """In a bwrap session, the grader's history rebuild (verifier/grade.py: shell_git_setup and
    _REBUILD_GIT) gives the workspace the very commit the template was built with here, and
    setup_patch goes through run_git (git apply) as well."""
    from sandbox import SandboxConfig, open_sandbox
    from sandbox.models import WorkspaceSpec
    from sandbox.workspace import prepare_template
    from verifier.grade import _REBUILD_GIT

    repo = _tree(tmp_path / "task")
    base = _commit_with_run_git(repo)
    patch = "--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-print('a')\n+print('patched')\n"
    spec = WorkspaceSpec(repo_path=repo, base_commit=base, setup_patch=patch)
    config = SandboxConfig(backend="bwrap", cache_dir=tmp_path / "cache")
    template = prepare_template(spec, config)
    assert (template.path / "a.py").read_text() == "print('patched')\n"
    sb = await open_sandbox(spec, config)
    try:
        res = await sb.run(f"cd /workspace && git rev-parse HEAD && ({shell_git_setup()}; {_REBUILD_GIT}) "
                           "&& git rev-parse HEAD", timeout_s=120)
    finally:
        await sb.close()
    assert res.ok and res.output.split() == [template.base_commit] * 2, res.output
    assert list(hostile.iterdir()) == []
