"""reverse_patch (SWE-smith's bug patch -> its fix) and new_files_patch, checked with real git."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.git_repos import commit_files, git
from support.requirements import missing

from task_factory.datasets.patches import PatchError, new_files_patch, reverse_patch


@pytest.fixture(autouse=True)
def _needsgit() -> None:
    if shutil.which("git") is None:  # fails under CI, skips elsewhere
        missing("git", "git is not on PATH")


def _snapshot(repo: Path) -> dict[str, tuple[str, bool]]:
    """path -> (content, executable) of every file but .git."""
    return {str(p.relative_to(repo)): (p.read_text(), bool(p.stat().st_mode & 0o100))
            for p in sorted(repo.rglob("*")) if p.is_file() and ".git" not in p.parts}


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    commit_files(repo, {"pkg/core.py": "".join(f"line {i}\n" for i in range(1, 41)),
                        "pkg/gone.py": "def gone():\n    return 1\n",
                        "pkg/old_name.py": "".join(f"kept {i}\n" for i in range(1, 21)),
                        "run.sh": "#!/bin/sh\necho hi\n", "noeol.txt": "first\nlast without newline"})
    return repo


def _make_bug(repo: Path) -> None:
    """Every header kind git writes: modify (two hunks), delete, add, rename+edit, mode, no-EOL."""
    core = (repo / "pkg" / "core.py").read_text().split("\n")
    core[2] = "line 3 CHANGED"
    core.insert(30, "inserted")
    del core[35]
    (repo / "pkg" / "core.py").write_text("\n".join(core))
    (repo / "pkg" / "gone.py").unlink()
    (repo / "pkg" / "new.py").write_text("def new():\n    return 2\n")
    text = (repo / "pkg" / "old_name.py").read_text().replace("kept 10\n", "kept ten\n")
    (repo / "pkg" / "old_name.py").unlink()
    (repo / "pkg" / "new_name.py").write_text(text)
    (repo / "run.sh").chmod(0o755)
    (repo / "noeol.txt").write_text("first\nlast changed, still no newline")


def test_reverse_patch_undoes_the_bug_patch_with_git_apply(repo: Path) -> None:
    original = _snapshot(repo)
    _make_bug(repo)
    git(repo, "add", "-A")
    bug = git(repo, "diff", "--cached", "-M", "HEAD")
    buggy = _snapshot(repo)
    assert "rename from" in bug and "new mode 100755" in bug and "deleted file mode" in bug
    assert "\\ No newline at end of file" in bug and bug.count("@@ -") >= 4
    git(repo, "reset", "-q", "--hard", "HEAD")
    git(repo, "apply", "-", input=bug)  # forward: the bug, as SWE-smith's setup does
    assert _snapshot(repo) == buggy
    fix = reverse_patch(bug)
    git(repo, "apply", "--check", "-", input=fix)
    git(repo, "apply", "-", input=fix)  # reverse: the gold fix
    assert _snapshot(repo) == original
    assert git(repo, "status", "--porcelain") == ""
    assert reverse_patch(fix) == bug  # git writes removals first; so does reverse_patch


def test_reverse_patch_swaps_ranges_names_and_modes() -> None:
    bug = ("diff --git a/x.py b/x.py\nnew file mode 100644\nindex 0000000..e69de29\n--- /dev/null\n+++ b/x.py\n"
           "@@ -0,0 +1,2 @@\n+a\n+b\n")
    assert reverse_patch(bug) == ("diff --git a/x.py b/x.py\ndeleted file mode 100644\nindex e69de29..0000000\n"
                                  "--- a/x.py\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-a\n-b\n")


@pytest.mark.parametrize("patch, words", [
    ("diff --git a/i.png b/i.png\nindex 1..2 100644\nGIT binary patch\nliteral 3\n", "binary"),
    ("diff --git a/i.png b/i.png\nindex 1..2 100644\nBinary files a/i.png and b/i.png differ\n", "binary"),
    ("diff --git a/a.py b/b.py\nsimilarity index 100%\ncopy from a.py\ncopy to b.py\n", "copy"),
    ("diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1,3 +1,3 @@\n a\n-b\n+c\n", "ended early"),
])
def test_reverse_patch_refuses_what_it_cannot_reverse(patch: str, words: str) -> None:
    with pytest.raises(PatchError, match=words):
        reverse_patch(patch)


def test_new_files_patch_applies(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    files = {"r2e_tests/test_1.py": "def test_a():\n    assert True\n", "r2e_tests/empty.py": "",
             "r2e_tests/helper.py": "X = 1"}
    git(tmp_path, "apply", "-", input=new_files_patch(files))
    assert {k: (tmp_path / k).read_text() for k in files} == files
