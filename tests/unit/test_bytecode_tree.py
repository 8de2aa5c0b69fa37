"""The read-only first layer of a jail's pycache prefix (``sandbox/bytecode.py``), built on the host."""

from __future__ import annotations

import os
from pathlib import Path

from sandbox.bytecode import bytecode_tree, environment_roots


def _module(folder: Path, name: str, pyc: bool = True, source: bool = True) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    if source:
        (folder / f"{name}.py").write_text("x = 1\n")
    if pyc:
        (folder / "__pycache__").mkdir(exist_ok=True)
        (folder / "__pycache__" / f"{name}.cpython-311.pyc").write_bytes(b"\0" * 16)


def test_links_each_pyc_beside_its_source_where_the_sandbox_sees_it(tmp_path):
    venv, base = tmp_path / "venv", tmp_path / "base"
    sp = venv / "lib/python3.11/site-packages"
    _module(sp / "pytest_like", "main")
    _module(sp, "orphan", source=False)  # bytecode without its source: never used, never linked
    _module(sp, "fresh", pyc=False)  # a source never compiled: nothing to link
    std = base / "lib/python3.11"
    _module(std / "json", "__init__")
    _module(std / "site-packages" / "server_own", "secretish")  # the interpreter's own packages stay out
    roots = environment_roots(venv, "/opt/env", base)
    tree = bytecode_tree(tmp_path / "cache", roots)
    assert tree is not None
    links = sorted(str(p.relative_to(tree)) for p in tree.rglob("*.pyc"))
    assert links == sorted([f"{str(std)[1:]}/json/__init__.cpython-311.pyc",
                            "opt/env/lib/python3.11/site-packages/pytest_like/main.cpython-311.pyc"]), links
    assert os.readlink(tree / "opt/env/lib/python3.11/site-packages/pytest_like/main.cpython-311.pyc") == \
        "/opt/env/lib/python3.11/site-packages/pytest_like/__pycache__/main.cpython-311.pyc"
    # the same roots: the same tree; a new module in the environment: a new tree
    assert bytecode_tree(tmp_path / "cache", roots) == tree
    _module(sp, "added")
    again = bytecode_tree(tmp_path / "cache", environment_roots(venv, "/opt/env", base))
    assert again != tree and (again / "opt/env/lib/python3.11/site-packages/added.cpython-311.pyc").is_symlink()


def test_no_bytecode_no_layer(tmp_path):
    venv = tmp_path / "venv"
    _module(venv / "lib/python3.11/site-packages", "plain", pyc=False)
    assert bytecode_tree(tmp_path / "cache", environment_roots(venv, "/opt/env", None)) is None


def test_the_jail_links_the_same_tree_where_no_overlay_is_mounted(tmp_path):
    """docker: the runtime links, into the prefix, what bwrap's layer holds (``runtime.link_environment_bytecode``):
    the venv's packages and its base interpreter's standard library (named by ``pyvenv.cfg``), nothing else."""
    from sandbox.runtime import link_environment_bytecode

    venv, base = tmp_path / "venv", tmp_path / "base"
    sp = venv / "lib/python3.11/site-packages"
    _module(sp / "pytest_like", "main")
    _module(sp, "orphan", source=False)
    std = base / "lib/python3.11"
    _module(std / "json", "__init__")
    _module(std / "site-packages" / "server_own", "secretish")
    (base / "bin").mkdir()
    (venv / "pyvenv.cfg").write_text(f"home = {base}/bin\nversion = 3.11.2\n")
    prefix = tmp_path / "prefix"
    assert link_environment_bytecode(str(venv), str(prefix)) == 2
    links = sorted(str(p.relative_to(prefix)) for p in prefix.rglob("*.pyc"))
    assert links == sorted([f"{str(std)[1:]}/json/__init__.cpython-311.pyc",
                            f"{str(sp)[1:]}/pytest_like/main.cpython-311.pyc"]), links
    assert os.readlink(prefix / str(sp)[1:] / "pytest_like/main.cpython-311.pyc") == \
        f"{sp}/pytest_like/__pycache__/main.cpython-311.pyc"
    # the same links as the host-built layer would hold for a venv seen at its own path
    layer = bytecode_tree(tmp_path / "cache", environment_roots(venv, str(venv), base))
    assert sorted(str(p.relative_to(layer)) for p in layer.rglob("*.pyc")) == links
    # a prefix that cannot take them: the sandbox still starts (Python compiles what is not linked)
    (tmp_path / "file").write_text("")
    assert link_environment_bytecode(str(venv), str(tmp_path / "file" / "prefix")) == 0
