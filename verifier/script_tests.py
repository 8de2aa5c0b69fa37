"""Hidden tests as plain Python, for the script check (``script_check.py``) of tests whose calls it cannot record.

A FAIL_TO_PASS test whose calls the recorder cannot write as source (a class the test defines,
a callback that closes over its state, ``mock``) still has a body a plain script can run: the
test module's own source, with

- ``pytest`` replaced by a small stand-in bound to a private name (``raises``, ``warns``,
  ``approx``, ``mark``, ``fixture``, ``skip``, ``fail``, ``importorskip``), so no ``pytest``
  module is imported;
- every test function, test method and test class renamed (no frame of the run is named
  ``test...``), a ``__main__`` block left out;
- the test called directly (a unittest case through ``setUp``/``tearDown``, a plain class
  through ``setup_method``/``teardown_method``).

Only tests without fixtures or parameters are written this way; the script check then checks that the
test runs to its end on the submission, as it does on the fixed tree and does not on the buggy one
(``script_check.expect`` keeps only such tests).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

PYTEST_NAMES = ("pytest", "_pytest", "py")

# The stand-in for the pytest module's helpers a test body uses (bound to `_pt` in the script).
SHIM = '''\
class _Raised:
    def __init__(self, expected, match=None):
        self.expected, self.match, self.value, self.type = expected, match, None, None

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is None:
            raise AssertionError("DID NOT RAISE %r" % (self.expected,))
        if not issubclass(kind, self.expected):
            return False
        if self.match is not None:
            import re
            if not re.search(self.match, str(value)):
                raise AssertionError("%r does not match %r" % (str(value), self.match))
        self.value, self.type = value, kind
        return True


class _Warned:
    def __init__(self, expected=Warning, match=None):
        import warnings
        self.expected, self.match, self._catch = expected, match, warnings.catch_warnings(record=True)

    def __enter__(self):
        import warnings
        self.list = self._catch.__enter__()
        warnings.simplefilter("always")
        return self.list

    def __exit__(self, kind, value, tb):
        self._catch.__exit__(kind, value, tb)
        if kind is None and not any(issubclass(w.category, self.expected) for w in self.list):
            raise AssertionError("DID NOT WARN %r" % (self.expected,))
        return False


class _Approx:
    def __init__(self, expected, rel=None, abs=None):
        self.expected, self.rel, self.abs = expected, rel, abs

    def _close(self, a, b):
        import math
        if isinstance(b, dict):
            return isinstance(a, dict) and a.keys() == b.keys() and all(self._close(a[k], b[k]) for k in b)
        if isinstance(b, (list, tuple)):
            return len(a) == len(b) and all(self._close(x, y) for x, y in zip(a, b))
        rel = 1e-6 if self.rel is None and self.abs is None else (self.rel or 0.0)
        tol = max(rel * abs(b), 1e-12 if self.abs is None else self.abs)
        return a == b or (math.isfinite(b) and abs(a - b) <= tol)

    def __eq__(self, other):
        try:
            return self._close(other, self.expected)
        except TypeError:
            return False

    __hash__ = None


class _Skipped(Exception):
    pass


class _Mark:
    def __getattr__(self, name):
        def mark(*args, **kwargs):
            if len(args) == 1 and callable(args[0]) and not kwargs:
                return args[0]
            return lambda f: f
        return mark


class _PT:
    mark = _Mark()

    @staticmethod
    def raises(expected, *args, match=None, **kwargs):
        if args:
            with _Raised(expected, match) as info:
                args[0](*args[1:], **kwargs)
            return info
        return _Raised(expected, match)

    @staticmethod
    def warns(expected=Warning, *args, match=None, **kwargs):
        return _Warned(expected, match)

    @staticmethod
    def approx(expected, rel=None, abs=None):
        return _Approx(expected, rel, abs)

    @staticmethod
    def fixture(*args, **kwargs):
        if len(args) == 1 and callable(args[0]):
            return args[0]
        return lambda f: f

    @staticmethod
    def skip(*args, **kwargs):
        raise _Skipped()

    @staticmethod
    def fail(msg="", *args, **kwargs):
        raise AssertionError(msg)

    @staticmethod
    def importorskip(name, *args, **kwargs):
        import importlib
        try:
            return importlib.import_module(name)
        except ImportError:
            raise _Skipped()


_pt = _PT()


class _PyLib:
    test = _pt


_pylib = _PyLib()
'''


@dataclass
class TestScript:
    """A test module made plain, and how to run each of its tests."""

    block: str  # the module's source, made plain
    calls: dict[str, list[str]]  # test id -> the statements that run it


class _Rename(ast.NodeTransformer):
    def __init__(self, names: dict[str, str]) -> None:
        self.names = names

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.names:
            node.id = self.names[node.id]
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if node.attr in self.names and node.attr.startswith("test"):
            node.attr = self.names[node.attr]
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        self.generic_visit(node)
        node.name = self.names.get(node.name, node.name)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        self.generic_visit(node)
        node.name = self.names.get(node.name, node.name)
        return node


def _plain_imports(node: ast.stmt) -> list[ast.stmt] | None:
    """An import statement without pytest (None: keep it as it is)."""
    if isinstance(node, ast.Import):
        kept, out = [], []
        for alias in node.names:
            if alias.name.split(".")[0] in PYTEST_NAMES:
                if alias.asname:
                    out.append(ast.parse(f"{alias.asname} = _pt").body[0])
            else:
                kept.append(alias)
        if len(kept) == len(node.names):
            return None
        return ([ast.Import(names=kept)] if kept else []) + out
    if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PYTEST_NAMES \
            and not node.level:
        if node.module != "pytest":
            return []
        return [ast.parse(f"{a.asname or a.name} = getattr(_pt, {a.name!r}, None)").body[0] for a in node.names]
    return None


def _main_guard(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and "__name__" in ast.unparse(node.test) and "__main__" in ast.unparse(node.test)


def _absolute(node: ast.stmt, package: str) -> ast.stmt:
    """``from . import x`` in a test package's module, as ``from <package> import x``."""
    if isinstance(node, ast.ImportFrom) and node.level:
        parts = package.split(".") if package else []
        if node.level - 1 > len(parts) or not parts:
            return node
        base = parts[:len(parts) - (node.level - 1)]
        module = ".".join(base + ([node.module] if node.module else []))
        return ast.ImportFrom(module=module, names=node.names, level=0)
    return node


def plain(source: str, tests: list[str], prefix: str = "", path: str = "") -> TestScript | None:
    """``source`` (one test module, at ``path`` in the workspace) made plain, with a way to run each
    test of ``tests`` (node ids of that module) that takes no fixture and no parameter. None when
    nothing can run so."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    package = ".".join(path.split("/")[:-1])
    body: list[ast.stmt] = []
    relative = False
    for node in tree.body:
        if _main_guard(node):
            continue
        if isinstance(node, ast.ImportFrom) and node.level:
            relative = True
            node = _absolute(node, package)
        swapped = _plain_imports(node)
        body.extend([node] if swapped is None else swapped)
    if relative:  # the test package is imported from the workspace, as `python -c` there would
        body[:0] = ast.parse("import sys\nsys.path.insert(0, '/workspace')").body
    tree.body = body
    # a name a string spells (``TestCase('test')``, ``getattr(self, 'test_x')``) keeps it
    spelled = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    names: dict[str, str] = {"pytest": "_pt"}
    if any(isinstance(node, ast.Import) and any(a.name == "py" and not a.asname for a in node.names)
           for node in ast.parse(source).body):
        names["py"] = "_pylib"  # py.test.raises, as older suites write it
    n = 0
    for node in ast.walk(tree):
        if getattr(node, "name", None) in spelled:
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test") \
                and node.name not in names:
            n += 1
            names[node.name] = f"case_{prefix}{n}"
        elif isinstance(node, ast.ClassDef) and node.name.lower().startswith("test") and node.name not in names:
            n += 1
            names[node.name] = f"Case{prefix}{n}"
    top = {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    calls: dict[str, list[str]] = {}
    for test in tests:
        parts = test.split("::")[1:]
        if not parts or "[" in test:
            continue
        node = top.get(parts[0])
        if len(parts) == 1 and isinstance(node, ast.FunctionDef) and _no_params(node, 0):
            calls[test] = [f"{names.get(parts[0], parts[0])}()"]
        elif len(parts) == 2 and isinstance(node, ast.ClassDef):
            method = next((m for m in node.body if isinstance(m, ast.FunctionDef) and m.name == parts[1]), None)
            if method is None or not _no_params(method, 1):
                continue
            cls, meth = names.get(parts[0], parts[0]), names.get(parts[1], parts[1])
            unit = any("TestCase" in ast.unparse(b) for b in node.bases)
            if unit:
                calls[test] = [f"{cls}.setUpClass()", f"_case = {cls}({meth!r})", "_case.setUp()",
                               f"try:\n        _case.{meth}()\n    finally:\n        _case.tearDown()",
                               f"{cls}.tearDownClass()"]
            else:
                calls[test] = [f"_case = {cls}()",
                               f"getattr(_case, 'setup_method', lambda m: None)(_case.{meth})",
                               f"try:\n        _case.{meth}()\n    finally:\n"
                               f"        getattr(_case, 'teardown_method', lambda m: None)(_case.{meth})"]
    if not calls:
        return None
    tree = _Rename(names).visit(tree)
    ast.fix_missing_locations(tree)
    try:
        block = ast.unparse(tree)
    except (ValueError, RecursionError):
        return None
    return TestScript(block=block, calls=calls)


def _no_params(fn: ast.FunctionDef, skip: int) -> bool:
    args = fn.args
    return (len(args.posonlyargs) + len(args.args) <= skip and not args.kwonlyargs and args.vararg is None
            and args.kwarg is None)
