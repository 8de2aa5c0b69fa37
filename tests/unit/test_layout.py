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
