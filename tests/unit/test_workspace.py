"""The scrubbed workspace template: purge, squash, verification, caching."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from support.git_repos import commit_all, commit_files

from sandbox.models import HardeningPolicy, SandboxConfig, WorkspaceError, WorkspaceSpec
from sandbox.workspace import git, prepare_template, purge, verify_scrubbed


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str, str]:
    r = tmp_path / "repo"
    base = commit_files(r, {"pkg/mod.py": "def f():\n    return 1\n"})
    (r / "pkg" / "mod.py").write_text("def f():\n    return 'SECRET_FIX'\n")
    future = commit_all(r, "the fix")
    return r, base, future


def test_template_holds_base_tree_in_a_single_commit(repo, tmp_path):
    r, base, _ = repo
    t = prepare_template(WorkspaceSpec(repo_path=r, base_commit=base), SandboxConfig(cache_dir=tmp_path / "c"))
    assert (t.path / "pkg" / "mod.py").read_text() == "def f():\n    return 1\n"
    assert git(t.path, "rev-list", "--all").split() == [t.base_commit]
    # the later commit's content is nowhere in the object store
    objects = git(t.path, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)").split()
    blobs = [git(t.path, "cat-file", "-p", o) for o in objects if git(t.path, "cat-file", "-t", o).strip() == "blob"]
    assert not any("SECRET_FIX" in b for b in blobs)


def test_template_is_cached_per_commit(repo, tmp_path):
    r, base, future = repo
    cfg = SandboxConfig(cache_dir=tmp_path / "c")
    a = prepare_template(WorkspaceSpec(repo_path=r, base_commit=base), cfg)
    b = prepare_template(WorkspaceSpec(repo_path=r, base_commit=base), cfg)
    c = prepare_template(WorkspaceSpec(repo_path=r, base_commit=future), cfg)
    assert a.path == b.path and a.path != c.path
    assert "SECRET_FIX" in (c.path / "pkg" / "mod.py").read_text()


def test_purge_removes_bytecode_caches_and_code_archives_but_keeps_data_archives(tmp_path):
    t = tmp_path / "t"
    (t / "pkg" / "__pycache__").mkdir(parents=True)
    (t / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"x")
    (t / "ghost.pyc").write_bytes(b"x")
    (t / ".mypy_cache").mkdir()
    (t / ".pytest_cache").mkdir()
    (t / "keep.py").write_text("x = 1\n")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("pkg/mod.py", "SECRET")
    (t / "dist.whl").write_bytes(buf.getvalue())
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as zf:
        zf.writestr("data.csv", "a,b\n")
    (t / "fixture.zip").write_bytes(data.getvalue())
    removed = purge(t, HardeningPolicy())
    assert sorted(p.name for p in t.rglob("*")) == ["fixture.zip", "keep.py", "pkg"]
    assert "dist.whl" in removed and "ghost.pyc" in removed


def test_plain_directory_becomes_a_one_commit_repo(tmp_path):
    d = tmp_path / "plain"
    d.mkdir()
    (d / "a.py").write_text("print(1)\n")
    t = prepare_template(WorkspaceSpec(repo_path=d), SandboxConfig(cache_dir=tmp_path / "c"))
    assert git(t.path, "log", "--format=%s").split() == ["base"]


def test_verify_rejects_extra_refs_and_dangling_objects(repo, tmp_path):
    r, base, _ = repo
    t = prepare_template(WorkspaceSpec(repo_path=r, base_commit=base), SandboxConfig(cache_dir=tmp_path / "c"))
    git(t.path, "hash-object", "-w", "--stdin", input=b"dangling secret")
    with pytest.raises(WorkspaceError, match="unreachable"):
        verify_scrubbed(t.path, t.base_commit)


def test_bad_inputs_are_clear_errors(tmp_path, repo):
    r, _, _ = repo
    cfg = SandboxConfig(cache_dir=tmp_path / "c")
    with pytest.raises(WorkspaceError, match="not a directory"):
        prepare_template(WorkspaceSpec(repo_path=tmp_path / "missing"), cfg)
    with pytest.raises(WorkspaceError, match="rev-parse"):
        prepare_template(WorkspaceSpec(repo_path=r, base_commit="deadbeef"), cfg)


def test_purge_sniffs_content_whatever_the_name(tmp_path):
    import bz2
    import gzip
    import importlib.util
    import lzma
    import marshal

    t = tmp_path / "t"
    t.mkdir()
    src = b"def secret():\n    return 42\n"
    (t / "core.py.gz").write_bytes(gzip.compress(src))
    (t / "core.py.bz2").write_bytes(bz2.compress(src))
    (t / "core.py.xz").write_bytes(lzma.compress(src))
    (t / "core.dat").write_bytes(importlib.util.MAGIC_NUMBER + b"\0" * 12 + marshal.dumps(compile(src, "x", "exec")))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("pkg/core.py", src)
    (t / "fixture.dat").write_bytes(buf.getvalue())
    (t / "table.csv.gz").write_bytes(gzip.compress(b"a,b\n1,2\n"))  # data: stays
    (t / "notes.txt").write_text("from here on, import nothing\n")  # plain text: stays
    purge(t, HardeningPolicy())
    assert sorted(p.name for p in t.iterdir()) == ["notes.txt", "table.csv.gz"]
