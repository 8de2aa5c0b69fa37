"""sandbox.runtime.ChangeWatcher on a plain directory (the in-sandbox code, run on the host):
what counts as a change, new and moved-in directories, and failing closed when inotify cannot
watch (the runtime then walks the tree)."""

from __future__ import annotations

import ctypes
import errno
import os
import shutil

import pytest

from sandbox import runtime


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "ws"
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "sub" / "m.py").write_text("x = 1\n")
    (root / ".git" / "objects").mkdir(parents=True)
    (root / "README").write_text("hi\n")
    return root


def test_changes_are_seen_once_and_git_metadata_is_not(tree, tmp_path):
    w = runtime.ChangeWatcher(str(tree))
    try:
        assert w.changed() is False
        (tree / "README").read_text()  # reads are not changes
        assert w.changed() is False
        (tree / "pkg" / "sub" / "m.py").write_text("x = 2\n")  # deep, existing directory
        assert w.changed() is True
        assert w.changed() is False  # reported once
        (tree / ".git" / "index").write_bytes(b"idx")
        (tree / ".git" / "objects" / "ab").mkdir()
        assert w.changed() is False  # the top-level .git is not the workspace
        os.chmod(tree / "README", 0o600)
        assert w.changed() is True
        (tree / "new" / "deeper").mkdir(parents=True)
        assert w.changed() is True
        (tree / "new" / "deeper" / "f").write_text("a")  # inside a directory created since
        assert w.changed() is True
        outside = tmp_path / "outside"
        (outside / "d").mkdir(parents=True)
        shutil.move(str(outside), str(tree / "moved"))
        assert w.changed() is True
        (tree / "moved" / "d" / "g").write_text("b")  # inside a directory moved in since
        assert w.changed() is True
        os.rename(tree / "moved", tree / "renamed")
        assert w.changed() is True
        (tree / "renamed" / "d" / "g").write_text("c")  # ... and renamed since
        assert w.changed() is True
        assert w.changed() is False
    finally:
        os.close(w.fd)


def test_a_watch_that_cannot_be_added_fails_closed(tree, monkeypatch):
    """Out of inotify watches (ENOSPC): the watcher raises, and the runtime falls back to walking."""
    real = runtime.libc.inotify_add_watch

    def exhausted(fd, path, mask):
        if path.endswith(b"/sub"):
            ctypes.set_errno(errno.ENOSPC)
            return -1
        return real(fd, path, mask)

    monkeypatch.setattr(runtime.libc, "inotify_add_watch", exhausted)
    with pytest.raises(OSError) as info:
        runtime.ChangeWatcher(str(tree))
    assert info.value.errno == errno.ENOSPC
