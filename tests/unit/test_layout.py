"""The layout is the architecture: which package may import which, and no import circle anywhere.

    contract   sandbox            (leaves: the wire types; the jail)
        \\      /
        verifier                  (grading, task loading, diffs)
        /      \\
  env_server  task_factory        (serving; mining, building, importing, validating)

    env_client -> contract        (the client library: the wire contract only)
    evaluation -> env_client, contract               (any model as an agent; torch-free)
    trainer_client -> evaluation, env_client, contract

Every import counts, including those inside functions: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ALLOWED: dict[str, set[str]] = {
    "contract": set(),
    "sandbox": set(),
    "verifier": {"sandbox", "contract"},
    "env_server": {"contract", "sandbox", "verifier"},
    "task_factory": {"contract", "sandbox", "verifier"},
    "env_client": {"contract"},
    "evaluation": {"contract", "env_client"},
    "trainer_client": {"contract", "env_client", "evaluation"},
}


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for top in ALLOWED:
        for path in (ROOT / top).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return mods


MODULES = _modules()


def _imports(name: str) -> set[str]:
    """Project modules ``name`` imports (``from pkg import x`` counts as importing ``pkg.x`` when that is one)."""
    path = MODULES[name]
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".")
                keep = len(parts) - node.level + (1 if is_package else 0)
                base = ".".join(parts[:keep] + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    # a module's own parent packages run first anyway: importing them is no edge
    return {m for m in out if m in MODULES and m != name and not name.startswith(m + ".")}


GRAPH = {name: _imports(name) for name in MODULES}


def _circles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in GRAPH:
        if root in index:
            continue
        work = [(root, iter(sorted(GRAPH[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(GRAPH[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_walk_sees_the_whole_project():
    assert set(ALLOWED) == {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}, \
        "a new top-level package needs its place in ALLOWED"
    assert len(MODULES) > 100 and GRAPH["env_server.app"] and GRAPH["verifier.grade"]


def test_no_import_circle_anywhere():
    assert _circles() == []


def _wrong_layers() -> list[str]:
    return sorted(f"{name} -> {dep}" for name, deps in GRAPH.items() for dep in deps
                  if dep.split(".")[0] != name.split(".")[0] and dep.split(".")[0] not in ALLOWED[name.split(".")[0]])


def test_packages_import_only_the_layers_below_them():
    assert _wrong_layers() == []


def test_the_walk_would_catch_a_circle_and_a_wrong_layer(monkeypatch):
    monkeypatch.setitem(GRAPH, "verifier.junit", GRAPH["verifier.junit"] | {"verifier.grade"})
    assert any({"verifier.grade", "verifier.junit"} <= set(circle) for circle in _circles())
    monkeypatch.setitem(GRAPH, "env_client.http", GRAPH["env_client.http"] | {"env_server.app"})
    assert "env_client.http -> env_server.app" in _wrong_layers()


# -- one grader: the task factory checks tasks with the verifier and has no grader of its own ----------

# The modules of task_factory that run pytest, and why: none of them checks a task.
RUNS_PYTEST = {
    "task_factory.runner": "build and mine find a candidate's FAIL_TO_PASS/PASS_TO_PASS before a task exists",
    "task_factory.demo_task": "the demo task's one-off build measures its tests",
}
# Who may use those runs: the two task sources, and the reproducer's process-group helper.
RUNNER_USERS = {"task_factory.build", "task_factory.mine", "task_factory.reproducer"}
_PLUGIN_MACHINERY = ("pytest", "_pytest", "pluggy")


def _hook_names() -> set[str]:
    from _pytest import hookspec

    return {name for name in vars(hookspec) if name.startswith("pytest_")}


HOOKS = _hook_names()


def _grader_signs(source: str) -> dict[str, list[str]]:
    """What makes a module a grader of its own: it imports pytest's plugin machinery, defines pytest
    hooks (as code or as a plugin's source text), runs ``python -m pytest``, or defines something
    named *grade* that is no thin call into the verifier (its body calls ``grade_submission``)."""
    found: dict[str, list[str]] = {"imports": [], "hooks": [], "runs_pytest": [], "graders": []}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found["imports"] += [n for n in names if n.split(".")[0] in _PLUGIN_MACHINERY and not node.level]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name in HOOKS:
                found["hooks"].append(node.name)
            calls = {getattr(c.func, "id", getattr(c.func, "attr", None)) for c in ast.walk(node)
                     if isinstance(c, ast.Call)}
            if "grade" in node.name.lower() and "grade_submission" not in calls:
                found["graders"].append(node.name)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and any(
                f"def {hook}(" in node.value for hook in HOOKS):
            found["hooks"].append("a plugin's source text")
        elif isinstance(node, (ast.List, ast.Tuple)):
            values = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            if any(a == "-m" and b == "pytest" for a, b in zip(values, values[1:])):
                found["runs_pytest"].append(f"line {node.lineno}")
    return {k: v for k, v in found.items() if v}


def _task_factory_graders() -> dict[str, dict[str, list[str]]]:
    out = {}
    for name in sorted(m for m in MODULES if m == "task_factory" or m.startswith("task_factory.")):
        signs = _grader_signs(MODULES[name].read_text(encoding="utf-8"))
        if name in RUNS_PYTEST:  # its runs are no check of a task: what it may not do is still checked
            signs.pop("runs_pytest", None)
            signs.pop("hooks", None)
        if signs:
            out[name] = signs
    return out


def test_the_task_factory_has_no_grader_of_its_own():
    """No second grader importable from task_factory: no pytest plugin machinery, no pytest runs or
    hooks outside the runs that find a candidate's tests, nothing named *grade* but thin calls into the
    verifier; those runs' users are the two sources; every check of a task goes through check.py,
    which grades with the verifier and does not reach the runner."""
    assert _task_factory_graders() == {}
    for name in RUNS_PYTEST:
        assert name in MODULES, f"{name} is gone: drop it from RUNS_PYTEST"
    assert {m for m, deps in GRAPH.items() if "task_factory.runner" in deps} <= RUNNER_USERS
    check = "task_factory.check"
    assert {"verifier", "verifier.grade_submission"} & GRAPH[check], "the check grades with the verifier"
    assert not {d for d in GRAPH[check] if d.startswith("task_factory.")} - {
        "task_factory.sources", "task_factory.verdicts", "task_factory.cache"}, GRAPH[check]
    assert {m for m, deps in GRAPH.items() if check in deps} >= {
        "task_factory.validate", "task_factory.build", "task_factory.mine"}
    assert "task_factory.runner" not in GRAPH["task_factory.validate"]


def test_the_grader_rule_would_catch_a_host_grader():
    host = '''
import subprocess
from _pytest.config import hookimpl

PLUGIN = "def pytest_runtest_logreport(report):\\n    pass\\n"

def host_grade(task, diff):
    return subprocess.run(["python", "-m", "pytest", *task.tests]).returncode == 0
'''
    assert _grader_signs(host) == {"imports": ["_pytest.config"], "hooks": ["a plugin's source text"],
                                   "runs_pytest": ["line 8"], "graders": ["host_grade"]}
    thin = "async def grade(task, diff, config):\n    return await grade_submission(task, diff, config)\n"
    assert _grader_signs(thin) == {}


# -- task sources: one interface, checked by the one check --------------------------------------------

GRADING = {"verifier.grade", "verifier.harness", "verifier.pytest_log", "verifier.script_check"}


def _verifier_names(name: str) -> set[str]:
    """The names ``name`` imports from the verifier (``from verifier import grade_submission``)."""
    out = set()
    for node in ast.walk(ast.parse(MODULES[name].read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "verifier":
            out.update(alias.name for alias in node.names)
    return out


def _source_modules() -> set[str]:
    from task_factory.task_sources import SOURCES

    return {"task_factory" + entry.partition(":")[0] if isinstance(entry, str) else entry.__module__
            for entry in SOURCES.values()}


def test_task_sources_grade_only_through_the_one_check():
    """The task-source interface and every registered source's module import no grader (not the
    verifier's grading modules, not grade_submission, not reverify): their tasks reach the verifier through
    check.py's check_record alone, which the interface calls. In the task factory only check.py (tasks)
    and reverify.py (finished episodes) call the grader."""
    sources = _source_modules() | {"task_factory.task_sources"}
    assert {"task_factory.build", "task_factory.mine", "task_factory.datasets.importer"} <= sources
    for name in sorted(sources):
        assert name in MODULES, name
        assert not GRAPH[name] & (GRADING | {"task_factory.reverify"}), (name, GRAPH[name] & GRADING)
        assert "grade_submission" not in _verifier_names(name), name
    assert "task_factory.check" in GRAPH["task_factory.task_sources"]
    factory = [m for m in MODULES if m.startswith("task_factory.")]
    assert {m for m in factory if "grade_submission" in _verifier_names(m) or GRAPH[m] & {"verifier.grade"}} == {
        "task_factory.check", "task_factory.reverify"}
