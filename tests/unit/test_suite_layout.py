"""The test suite's own layout (the rule of tests/support/__init__.py): where helpers live, what
they are called, who builds venvs, who edits sys.path."""

from __future__ import annotations

import ast
from pathlib import Path


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


# Test modules that run the machine's own git on purpose: what they test is git itself.
GIT_ITSELF = {"sandbox/test_host_git.py"}  # the hostile user configuration plain git obeys (run_git's control)


def own_git_runs(paths: list[Path], top: Path = TESTS) -> list[str]:
    """Modules outside support/ that start git themselves (``subprocess.run(["git", ...])`` and the like)
    instead of through ``support.git_repos`` (its fixed identity and date, no machine configuration)."""
    out = []
    for path in paths:
        rel = path.relative_to(top).as_posix()
        if rel.startswith("support/") or rel in GIT_ITSELF:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and ast.unparse(node.func.value) == "subprocess" and node.args
                    and isinstance(node.args[0], ast.List) and node.args[0].elts
                    and isinstance(node.args[0].elts[0], ast.Constant) and node.args[0].elts[0].value == "git"):
                out.append(f"{rel}:{node.lineno}")
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


def test_test_repositories_are_written_through_support_git_repos():
    assert own_git_runs(_modules()) == []


def _installed(name: str) -> bool:
    """A third-party module of that name is installed (``datasets``, ``docker``: not a test folder)."""
    import importlib.util

    spec = importlib.util.find_spec(name)
    places = [spec.origin] if spec and spec.origin else list(spec.submodule_search_locations or []) if spec else []
    return any("site-packages" in str(place) for place in places)


def bench_helper_imports(bench: Path, tests: Path, root: Path = ROOT) -> list[str]:
    """Imports of bench/ scripts that reach a test helper by another name than the naming rule's
    (``support.<thing>``, ``<folder>.<thing>_support``): a test module itself, or an old path."""
    packages = {p.name for p in root.iterdir() if (p / "__init__.py").is_file()}  # the project's own
    out = []
    for path in sorted(bench.glob("*.py")):
        for module in _imports(path):
            head, _, rest = module.partition(".")
            if head == "support" or rest.endswith("_support") or head in packages or _installed(head):
                continue
            if head == "tests" or (tests / head).is_dir() or (tests / f"{head}.py").is_file():
                out.append(f"{path.name}: {module}")
    return out


def test_bench_scripts_import_test_helpers_by_their_names(tmp_path):
    assert bench_helper_imports(ROOT / "bench", ROOT / "tests") == []
    for folder in ("bench", "tests/evaluation", "tests/support", "tests/trainer"):  # the rule catches an old
        (tmp_path / folder).mkdir(parents=True)                                   # path and a test module
    (tmp_path / "tests" / "taskpack.py").write_text("")
    (tmp_path / "bench" / "b.py").write_text("from taskpack import x\nfrom tests.evaluation.policy_double import y\n"
                                             "from support.taskpacks import z\nfrom trainer.toolcaller_support import w\n"
                                             "from sandbox import open_sandbox\n")
    assert bench_helper_imports(tmp_path / "bench", tmp_path / "tests") == [
        "b.py: taskpack", "b.py: tests.evaluation.policy_double"]


def test_the_rules_would_catch_a_stray_helper_a_path_edit_a_venv_builder_and_a_git_of_its_own(tmp_path):
    top = tmp_path / "tests"
    (top / "alpha").mkdir(parents=True)
    (top / "beta").mkdir()
    files = {"alpha/alphalib.py": "", "alpha/data_support.py": "", "alpha/run_episode.py": "",
             "alpha/test_x.py": "import sys\nsys.path.insert(0, 'x')\nprint('sys.path.append(1)')\n",
             "beta/test_y.py": "from data_support import X\nimport fcntl\n",
             "beta/test_z.py": "import subprocess, sys\nsubprocess.run([sys.executable, '-m', 'venv', 'v'])\n",
             "beta/test_g.py": "import subprocess\nCMD = ['git', 'log']\nsubprocess.run(['git', 'init', '-q'])\n"}
    for rel, text in files.items():
        (top / rel).write_text(text)
    paths = sorted(top.rglob("*.py"))
    assert misnamed(paths, top) == ["alpha/alphalib.py"]
    assert foreign_helpers(paths, top) == ["beta/test_y.py: data_support"]
    assert sys_path_edits(paths) == [f"{top / 'alpha/test_x.py'}:2"]
    assert own_git_runs(paths, top) == ["beta/test_g.py:3"]
    global ROOT
    old, ROOT = ROOT, tmp_path
    try:
        assert venv_builders(paths) == ["tests/beta/test_y.py:2", "tests/beta/test_z.py:2"]
    finally:
        ROOT = old
