"""The test suite's own layout (the rule of tests/support/__init__.py): where helpers live, what
they are called, who builds venvs, who edits sys.path."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from support import BENCH_SHIMS

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
SUPPORT = TESTS / "support"


def _modules(top: Path = TESTS) -> list[Path]:
    return sorted(p for p in top.rglob("*.py") if "__pycache__" not in p.parts)


def misnamed(paths: list[Path], top: Path = TESTS) -> list[str]:
    """Modules outside support/ that are no test, conftest, package, ``*_support.py`` helper,
    ``*_episode.py`` script or bench re-export."""
    out = []
    for path in paths:
        rel = path.relative_to(top)
        name = path.name
        if rel.parts[0] == "support" or name in ("conftest.py", "__init__.py") or name.startswith("test_"):
            continue
        if name.endswith(("_support.py", "_episode.py")) and len(rel.parts) == 2:
            continue
        if f"tests/{rel.as_posix()}" in BENCH_SHIMS:
            continue
        out.append(rel.as_posix())
    return out


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def foreign_helpers(paths: list[Path], top: Path = TESTS) -> list[str]:
    """Imports of another folder's ``*_support`` helper (by name, or through its package)."""
    owner = {p.stem: p.parent.name for p in paths if p.name.endswith("_support.py") and p.parent != top / "support"}
    folders = {p.parent.name for p in paths if p.parent.parent == top}
    out = []
    for path in paths:
        if path.parent.parent != top or path.parent.name == "support":
            continue
        for name in _imports(path):
            parts = name.split(".")
            if parts[0] in owner and owner[parts[0]] != path.parent.name:
                out.append(f"{path.relative_to(top)}: {name}")
            elif len(parts) > 1 and parts[0] in folders and parts[0] != path.parent.name and parts[1] in owner:
                out.append(f"{path.relative_to(top)}: {name}")
    return out


def sys_path_edits(paths: list[Path]) -> list[str]:
    """Code (not strings) that changes ``sys.path``: a call of one of its methods or an assignment to it."""
    out = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            target = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                target = node.func.value
            elif isinstance(node, (ast.Assign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                target = next((t.value if isinstance(t, ast.Subscript) else t for t in targets), None)
            if target is not None and ast.unparse(target) == "sys.path":
                out.append(f"{path}:{node.lineno}")
    return out


def venv_builders(paths: list[Path]) -> list[str]:
    """Modules outside support/ that take a file lock or run ``python -m venv`` (code, not strings)."""
    out = []
    for path in paths:
        if SUPPORT in path.parents:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                hit = any(a.name == "fcntl" for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                hit = node.module == "fcntl"
            elif isinstance(node, ast.List):
                words = [e.value for e in node.elts if isinstance(e, ast.Constant)]
                hit = any(words[i:i + 2] == "-m venv".split() for i in range(len(words)))
            else:
                hit = False
            if hit:
                out.append(f"{path.relative_to(ROOT)}:{node.lineno}")
                break
    return out


def test_every_module_of_the_suite_follows_the_naming_rule():
    assert misnamed(_modules()) == []


def test_folder_helper_names_are_unique_across_the_suite():
    stems = [p.stem for p in _modules() if p.name.endswith(("_support.py", "_episode.py"))]
    assert sorted(s for s in set(stems) if stems.count(s) > 1) == []


def test_a_folder_imports_no_other_folders_helpers():
    assert foreign_helpers(_modules()) == []


def test_only_support_edits_sys_path():
    assert sys_path_edits([p for p in _modules() if SUPPORT not in p.parents]) == []


def test_only_support_venvs_builds_a_venv_or_takes_a_file_lock():
    assert venv_builders(_modules()) == []


def test_bench_shims_are_one_line_re_exports_that_bench_still_imports():
    bench = "\n".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "bench").glob("*.py")))
    for rel, target in BENCH_SHIMS.items():
        path = ROOT / rel
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imports = [n for n in tree.body if isinstance(n, ast.ImportFrom)]
        assert len(imports) == 1 and imports[0].module.endswith(target.split(".", 1)[-1]), rel
        assert all(isinstance(n, (ast.Expr, ast.ImportFrom, ast.Assign)) for n in tree.body), rel
        assert re.search(rf"from [\w.]*\b{path.stem} import", bench), f"no bench script imports {rel}: delete it"


def test_the_rules_would_catch_a_stray_helper_a_path_edit_and_a_venv_builder(tmp_path):
    top = tmp_path / "tests"
    (top / "alpha").mkdir(parents=True)
    (top / "beta").mkdir()
    files = {"alpha/alphalib.py": "", "alpha/data_support.py": "", "alpha/run_episode.py": "",
             "alpha/test_x.py": "import sys\nsys.path.insert(0, 'x')\nprint('sys.path.append(1)')\n",
             "beta/test_y.py": "from data_support import X\nimport fcntl\n",
             "beta/test_z.py": "import subprocess, sys\nsubprocess.run([sys.executable, '-m', 'venv', 'v'])\n"}
    for rel, text in files.items():
        (top / rel).write_text(text)
    paths = sorted(top.rglob("*.py"))
    assert misnamed(paths, top) == ["alpha/alphalib.py"]
    assert foreign_helpers(paths, top) == ["beta/test_y.py: data_support"]
    assert sys_path_edits(paths) == [f"{top / 'alpha/test_x.py'}:2"]
    global ROOT
    old, ROOT = ROOT, tmp_path
    try:
        assert venv_builders(paths) == ["tests/beta/test_y.py:2", "tests/beta/test_z.py:2"]
    finally:
        ROOT = old
