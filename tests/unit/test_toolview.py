"""The tool view hides blocked binaries and their hard-link aliases and symlinks."""

from __future__ import annotations

import os
from pathlib import Path

from sandbox.toolview import tool_view


def test_blocked_tool_its_alias_and_symlink_are_absent_from_the_farm(tmp_path: Path):
    root = tmp_path / "usr"
    bindir = root / "bin"
    bindir.mkdir(parents=True)
    (bindir / "unzip").write_bytes(b"\x7fELF unzip")
    os.link(bindir / "unzip", bindir / "zipinfo-alias")  # same inode, other name
    os.symlink("unzip", bindir / "uz")
    (bindir / "cat").write_bytes(b"\x7fELF cat")
    (bindir / "sub").mkdir()
    other = root / "lib"
    other.mkdir()
    (other / "libc.so").write_bytes(b"lib")

    view = tool_view(("unzip",), tmp_path / "cache", roots=(str(root),))
    assert [dst for _, dst in view.farms] == [str(bindir)]  # only the directory with a hit
    farm = Path(view.farms[0][0])
    assert sorted(os.listdir(farm)) == ["cat", "sub"]
    assert os.stat(farm / "cat").st_ino == os.stat(bindir / "cat").st_ino  # hard link, no copy
    assert view.rebinds == (str(bindir / "sub"),)
    assert set(view.blocked_found) == {str(bindir / n) for n in ("unzip", "zipinfo-alias", "uz")}
