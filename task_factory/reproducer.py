"""Reproducers: a standalone script rewritten from a failing test, and its run on a tree.

``write(repo, nodeid, line)`` rewrites the failing statement of a test into the short script a
user pastes into a bug report: the test module's imports of the names it uses, the test's
assignments it depends on (a ``parametrize`` case resolved from the id), the call, and a check
that fails when the behaviour is wrong::

    from pkg import window

    data = []
    result = window(data, 2)
    print(repr(result))
    assert result == []

An expected exception (``pytest.raises`` / ``assertRaises``) becomes a ``try``/``else`` that
fails when none is raised. Anything the script cannot hold on its own (fixtures, ``self``,
helpers of the test module, loops) means no reproducer.

``run(code, ...)`` executes a script on a tree with the task's interpreter, without network,
and reports its exit status, what a user sees (what it printed and the exception line, never
a traceback's file paths) and the callables the call goes through, resolved at run time (a
bound method names its object's class). ``entry_point`` picks the first public one of the
package. The builder keeps a task only when its script fails on the buggy tree, passes on the
fixed one and goes through a public entry point (``build.py``).
"""

from __future__ import annotations

import ast
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from .runner import no_network_prefix, run_in_group

# Bump when a script, or how it is run or read, changes: the builder's cached runs are keyed on it.
VERSION = "1"
Check = Literal["equal", "is", "true", "false", "raises", "no_error"]

MAX_LINES = 28
MAX_LINE_CHARS = 200
_MAX_OUTPUT_LINES = 8
_EQ_METHODS = {"assertEqual", "assertEquals", "assertListEqual", "assertDictEqual", "assertTupleEqual",
               "assertSetEqual", "assertSequenceEqual", "assertMultiLineEqual", "assert_equal"}
_IS_METHODS = {"assertIs"}
_TRUE_METHODS: dict[str, Check] = {"assertTrue": "true", "assertFalse": "false"}
_RAISES = {"raises", "assertRaises"}
_BUILTINS = set(dir(__import__("builtins")))


@dataclass(frozen=True)
class Reproducer:
    """A standalone script (``code``) that fails while the behaviour under test is wrong.

    ``call``: the expression under test; ``callees``: the sources of the callables it calls,
    outermost first (only those evaluable without calling anything); ``check``: what the
    script asserts of the call's result; ``expected``: the expected value (``equal``/``is``)
    or exception (``raises``) as a user would write it, else None.
    """

    code: str
    call: str
    callees: tuple[str, ...]
    check: Check
    expected: str | None


class Callee(BaseModel):
    """A callable of the call, resolved at run time: ``name`` is the dotted name a user
    imports it by (the package's top level where it is exported there), None if unknown."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    source: str
    module: str | None = None
    name: str | None = None


class Run(BaseModel):
    """One run of a script: ``exit_code`` None when it timed out; ``output`` what it printed
    (cut) followed by the exception line when it raised; ``callees`` as resolved."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    exit_code: int | None
    output: str = ""
    exception: str = ""
    callees: tuple[Callee, ...] = ()

    @property
    def failed(self) -> bool:
        return self.exit_code not in (0, None)

    @property
    def passed(self) -> bool:
        return self.exit_code == 0


# -- writing -------------------------------------------------------------------------------

def find_test_function(repo: Path, nodeid: str) -> tuple[ast.Module, str, ast.FunctionDef | ast.AsyncFunctionDef] | None:
    """(module AST, module source, function node) of ``nodeid`` (``file::[Class::]name[params]``)."""
    parts = nodeid.split("::")
    path = repo / parts[0]
    if len(parts) < 2 or not path.is_file():
        return None
    names = [p.split("[", 1)[0] for p in parts[1:]]
    try:
        src = path.read_text(encoding="utf-8")
        module = ast.parse(src)
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return None
    scope: list[ast.stmt] = module.body
    node: ast.AST | None = None
    for name in names:
        node = next((n for n in scope if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and n.name == name), None)
        if node is None:
            return None
        scope = node.body
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    return module, src, node


def _method(call: ast.Call) -> str:
    return call.func.attr if isinstance(call.func, ast.Attribute) else ""


def _failing_statement(fn: ast.FunctionDef | ast.AsyncFunctionDef, line: int | None) -> ast.stmt | None:
    """The statement of ``fn``'s top level holding ``line``, else its first check (an ``assert``,
    a ``with pytest.raises``, an assertion method)."""
    if line is not None:
        for stmt in fn.body:
            if stmt.lineno <= line <= (stmt.end_lineno or stmt.lineno):
                return stmt
    for stmt in fn.body:
        if isinstance(stmt, (ast.Assert, ast.With)) or (
                isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
                and _method(stmt.value).startswith("assert")):
            return stmt
    return None


def _raises_of(item: ast.withitem | ast.Call) -> ast.expr | None:
    """The exception expression of ``pytest.raises(E, ...)`` / ``self.assertRaises(E)``."""
    call = item.context_expr if isinstance(item, ast.withitem) else item
    if isinstance(call, ast.Call) and _method(call) in _RAISES and call.args:
        return call.args[0]
    return None


def _check(stmt: ast.stmt) -> tuple[ast.expr, Check, ast.expr | None] | None:
    """(the expression under test, the check, the expected value or exception) of one statement."""
    if isinstance(stmt, ast.With):
        exc = _raises_of(stmt.items[0]) if len(stmt.items) == 1 else None
        if exc is None or len(stmt.body) != 1:
            return None
        inner = stmt.body[0]
        value = inner.value if isinstance(inner, (ast.Expr, ast.Assign)) else None
        return (value, "raises", exc) if isinstance(value, ast.Call) else None
    if isinstance(stmt, ast.Assert):
        test = stmt.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.Is)):
            left, right = _oriented(test.left, test.comparators[0])
            return left, "equal" if isinstance(test.ops[0], ast.Eq) else "is", right
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return test.operand, "false", None
        return test, "true", None
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        call, name = stmt.value, _method(stmt.value)
        if name in _EQ_METHODS | _IS_METHODS and len(call.args) >= 2:
            left, right = _oriented(call.args[0], call.args[1])
            return left, "is" if name in _IS_METHODS else "equal", right
        if name in _TRUE_METHODS and call.args:
            return call.args[0], _TRUE_METHODS[name], None
        if name == "assertIsNone" and call.args:
            return call.args[0], "is", ast.Constant(value=None)
        if name in _RAISES and len(call.args) >= 2:  # self.assertRaises(E, func, *args)
            return ast.Call(func=call.args[1], args=call.args[2:], keywords=call.keywords), "raises", call.args[0]
        if name.startswith("assert"):
            return None
        return call, "no_error", None
    if isinstance(stmt, ast.Assign) and any(isinstance(n, ast.Call) for n in ast.walk(stmt.value)):
        return stmt.value, "no_error", None  # the failure surfaced while computing it: it raises
    return None


def _oriented(left: ast.expr, right: ast.expr) -> tuple[ast.expr, ast.expr]:
    """(computed side, expected side) of an equality: the side that calls something is computed."""
    def calls(node: ast.expr) -> bool:
        return any(isinstance(n, ast.Call) for n in ast.walk(node))

    if (not calls(left) and calls(right)) or (_is_literal(left) and not _is_literal(right)):
        return right, left
    return left, right


def _is_literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _names(node: ast.AST) -> set[str]:
    """The free names ``node`` reads: loads, less what its comprehensions and lambdas bind."""
    loads = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    bound: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.comprehension):
            bound |= {t.id for t in ast.walk(n.target) if isinstance(t, ast.Name)}
        elif isinstance(n, ast.Lambda):
            bound |= _arg_names(n.args)
        elif isinstance(n, ast.NamedExpr) and isinstance(n.target, ast.Name):
            bound.add(n.target.id)
    return loads - bound


def _arg_names(args: ast.arguments) -> set[str]:
    """The names an argument list binds (``*args`` and ``**kwargs`` included)."""
    return {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
            if a is not None}


def _param_values(module: ast.Module, fn: ast.FunctionDef | ast.AsyncFunctionDef,
                  nodeid: str) -> dict[str, ast.expr]:
    """Argument name -> value expression of ``nodeid``'s ``parametrize`` case, where it can be told.

    Only literal argument lists (inline, or a module-level constant, or its ``.items()``)
    whose values have pytest's plain ids (str, numbers, bool, None) are understood.
    """
    case = nodeid.rsplit("[", 1)[1][:-1] if nodeid.endswith("]") and "[" in nodeid else None
    if case is None:
        return {}
    constants = {t.id: n.value for n in module.body if isinstance(n, ast.Assign)
                 for t in n.targets if isinstance(t, ast.Name)}
    for deco in fn.decorator_list:
        if not (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute)
                and deco.func.attr == "parametrize" and len(deco.args) >= 2):
            continue
        try:
            names = ast.literal_eval(deco.args[0])
        except (ValueError, SyntaxError):
            continue
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        values = deco.args[1]
        if isinstance(values, ast.Name):
            values = constants.get(values.id, values)
        elif (isinstance(values, ast.Call) and isinstance(values.func, ast.Attribute) and values.func.attr == "items"
              and isinstance(values.func.value, ast.Name)):
            table = constants.get(values.func.value.id)
            values = ast.Tuple(elts=[ast.Tuple(elts=[k, v]) for k, v in zip(table.keys, table.values)]) \
                if isinstance(table, ast.Dict) and None not in table.keys else values
        if not isinstance(values, (ast.List, ast.Tuple)):
            continue
        for entry in values.elts:
            parts = list(entry.elts) if len(names) > 1 and isinstance(entry, (ast.Tuple, ast.List)) else [entry]
            if len(parts) != len(names):
                continue
            try:
                ids = [_plain_id(ast.literal_eval(p)) for p in parts]
            except (ValueError, TypeError, SyntaxError):
                continue
            if None not in ids and "-".join(ids) == case:  # type: ignore[arg-type]
                return dict(zip(names, parts))
    return {}


def _plain_id(value: object) -> str | None:
    if isinstance(value, str):
        return value if value.isascii() and value.isprintable() else None
    if value is None or isinstance(value, (bool, int, float)):
        return str(value)
    return None


def _callees(expr: ast.expr) -> tuple[str, ...]:
    """Sources of the callables ``expr`` calls, outermost first, each evaluable without a call."""
    found: list[str] = []
    for node in ast.walk(expr):
        if isinstance(node, ast.Call) and not any(isinstance(n, ast.Call) for n in ast.walk(node.func)):
            src = ast.unparse(node.func)
            if src not in found:
                found.append(src)
    return tuple(found)


def script_callees(code: str) -> tuple[str, ...]:
    """The callees (see ``_callees``) of every call a script makes, in source order."""
    found: list[str] = []
    for stmt in ast.parse(code).body:
        for source in _callees(stmt):  # type: ignore[arg-type]
            if source not in found:
                found.append(source)
    return tuple(found)


def write(repo: Path, nodeid: str, line: int | None = None) -> Reproducer | None:
    """The reproducer of the failing test ``nodeid`` (failing at ``line`` of its file), or None
    when the failing statement cannot stand alone."""
    found = find_test_function(repo, nodeid)
    if found is None:
        return None
    module, _src, fn = found
    stmt = _failing_statement(fn, line)
    checked = _check(stmt) if stmt is not None else None
    if checked is None:
        return None
    expr, check, expected = checked
    imports: dict[str, ast.stmt] = {}
    for node in module.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                imports[(alias.asname or alias.name).split(".")[0]] = node
    needed = _names(expr) | (_names(expected) if expected is not None else set())
    setup, needed = _setup(fn.body[: fn.body.index(stmt)], needed)
    params = {**_defaults(fn), **_param_values(module, fn, nodeid)}
    chosen = [n for n in params if n in needed]
    setup[:0] = [ast.Assign(targets=[ast.Name(id=n, ctx=ast.Store())], value=params[n], lineno=0) for n in chosen]
    needed = (needed - set(chosen)) | set().union(*(_names(params[n]) for n in chosen))
    helpers, needed = _helpers(module, {n for n in needed if n not in imports and n not in _BUILTINS}, needed)
    if {n for n in needed if n not in imports and n not in _BUILTINS and n not in _defined(helpers)}:
        return None  # needs the test's context (self, fixtures, names it cannot copy)
    used_imports: list[ast.stmt] = []
    for node in module.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            keep = [a for a in node.names if (a.asname or a.name).split(".")[0] in needed]
            if keep:
                used_imports.append(ast.Import(names=keep) if isinstance(node, ast.Import) else ast.ImportFrom(
                    module=node.module, names=keep, level=node.level))
    if any(isinstance(n, ast.ImportFrom) and n.level for n in used_imports):
        return None  # a relative import only works inside the test package
    expr, setup = _inlined(expr, setup)
    taken = needed | _defined(helpers + setup)
    result = next(n for n in ("result", "result_", "got", "got_") if n not in taken)
    call = ast.unparse(expr)
    lines = [ast.unparse(n) for n in used_imports] + ([""] if used_imports else [])
    for helper in helpers:  # definitions first, each followed by a blank line
        lines += [ast.unparse(helper), ""]
    lines += [ast.unparse(s) for s in setup]
    shown: str | None = None
    if check == "raises":
        assert expected is not None
        shown = ast.unparse(expected)
        lines += ["try:", f"    {result} = {call}", f"except {shown} as exc:", "    print(repr(exc))", "else:",
                  f"    raise AssertionError(f'expected {_fstring_safe(shown)}, got {{{result}!r}}')"]
    else:
        lines += [f"{result} = {call}", f"print(repr({result}))"]
        if check in ("equal", "is"):
            assert expected is not None
            shown = ast.unparse(params[expected.id]) if isinstance(expected, ast.Name) and expected.id in params \
                else ast.unparse(expected)
            lines.append(f"assert {result} {'==' if check == 'equal' else 'is'} {ast.unparse(expected)}")
        elif check == "true":
            lines.append(f"assert {result}")
        elif check == "false":
            lines.append(f"assert not {result}")
    code = "\n".join(lines)
    if len(code.splitlines()) > MAX_LINES or any(len(x) > MAX_LINE_CHARS for x in code.splitlines()):
        return None
    try:
        compile(code, "<reproducer>", "exec")
    except SyntaxError:
        return None
    return Reproducer(code=code, call=call, callees=_callees(expr), check=check, expected=shown)


def _inlined(expr: ast.expr, setup: list[ast.stmt]) -> tuple[ast.expr, list[ast.stmt]]:
    """``actual = f(x); ...; assertEqual(actual, y)``: the call itself is what is checked (so the
    script's last line shows what misbehaves): a checked bare name's last assignment moves into
    the check when no later setup statement reads the name."""
    if not isinstance(expr, ast.Name):
        return expr, setup
    for i in range(len(setup) - 1, -1, -1):
        stmt = setup[i]
        if expr.id in _defined([stmt]):
            if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                    and not any(expr.id in _names(later) for later in setup[i + 1:])):
                return stmt.value, setup[:i] + setup[i + 1:]
            break
    return expr, setup


def _is_assertion(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Assert) or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
                                            and _method(stmt.value).startswith("assert"))


def _root(target: ast.expr) -> str | None:
    """The name a target writes into: ``x`` of ``x``, ``x[1]``, ``x.a.b``."""
    while isinstance(target, (ast.Subscript, ast.Attribute)):
        target = target.value
    return target.id if isinstance(target, ast.Name) else None


def _defined(stmts: list[ast.stmt]) -> set[str]:
    """Names the statements bind (assignments, definitions)."""
    out: set[str] = set()
    for stmt in stmts:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(stmt.name)
        targets = stmt.targets if isinstance(stmt, ast.Assign) else \
            [stmt.target] if isinstance(stmt, (ast.AugAssign, ast.AnnAssign)) else []
        out |= {t.id for t in targets if isinstance(t, ast.Name)}
    return out


def _setup(before: list[ast.stmt], needed: set[str]) -> tuple[list[ast.stmt], set[str]]:
    """The straight-line statements of ``before`` (the test's body up to the failing statement) that
    the needed names depend on: assignments to them, and writes into or calls on their objects
    (``cache[1] = 1``, ``cache.timer.tick()``). Earlier checks are left out. Returns the kept
    statements in order and the names still needed."""
    kept: list[ast.stmt] = []
    for stmt in reversed(before):
        if _is_assertion(stmt):
            continue
        if isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets):
            targets = {t.id for t in stmt.targets if isinstance(t, ast.Name)}
            if targets & needed:
                kept.insert(0, stmt)
                needed = (needed - targets) | _names(stmt.value)
            continue
        if isinstance(stmt, (ast.Assign, ast.AugAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            roots = {_root(t) for t in targets}
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            roots = {_root(stmt.value.func)}
        else:
            continue
        if roots & needed:
            kept.insert(0, stmt)
            needed |= _names(stmt)
    return kept, needed


def _defaults(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, ast.expr]:
    """Argument name -> default value of the test function (``def test_x(self, key=hashkey)``)."""
    args = fn.args.posonlyargs + fn.args.args
    out = {a.arg: d for a, d in zip(args[len(args) - len(fn.args.defaults):], fn.args.defaults)}
    out.update({a.arg: d for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults) if d is not None})
    return out


def _helpers(module: ast.Module, missing: set[str], needed: set[str]) -> tuple[list[ast.stmt], set[str]]:
    """Module-level definitions of the test module the script needs (helper classes, functions,
    constants), with what they need in turn, in module order. Never a test (``test*``/``Test*``)."""
    defs = {}
    for node in module.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs[node.name] = node
        elif isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            defs.update({t.id: node for t in node.targets})  # type: ignore[union-attr]
    chosen: list[ast.stmt] = []
    todo = sorted(missing)
    while todo:
        name = todo.pop()
        node = defs.get(name)
        if node is None or node in chosen or name.lower().startswith("test"):
            continue
        chosen.append(node)
        inner = _names(node) - _defined([node])
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            inner -= set().union(*(_arg_names(n) for n in ast.walk(node) if isinstance(n, ast.arguments)))
            inner -= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        needed |= inner
        todo += sorted(n for n in inner if n in defs and n not in _BUILTINS)
    order = {id(n): i for i, n in enumerate(module.body)}
    return sorted(chosen, key=lambda n: order[id(n)]), needed


def _fstring_safe(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}").replace("'", "")


# -- running -------------------------------------------------------------------------------

# Runs the script as ``python script.py`` would (its own __main__ namespace, the traceback of an
# uncaught exception on stderr), then resolves the callee sources in what the script defined.
_WRAPPER = r'''
import json, sys, traceback
script, callees_file, out_file, packages = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(",")
sys.argv = [script]
ns = {"__name__": "__main__", "__file__": script, "__builtins__": __builtins__}
status, exc_line = 0, ""
try:
    with open(script) as f:
        exec(compile(f.read(), script, "exec"), ns)
except SystemExit as e:
    status = e.code if isinstance(e.code, int) else 1
except BaseException as e:
    status = 1
    traceback.print_exception(type(e), e, e.__traceback__.tb_next)
    exc_line = "".join(traceback.format_exception_only(type(e), e)).strip()
sys.stdout.flush()

def named(obj):
    func, owner = getattr(obj, "__func__", None), getattr(obj, "__self__", None)
    if func is not None and owner is not None and not isinstance(owner, type(sys)):
        cls = owner if isinstance(owner, type) else type(owner)
        return cls.__module__, cls.__qualname__ + "." + getattr(func, "__name__", "?")
    module = getattr(obj, "__module__", None)
    if module is None and getattr(obj, "__self__", None) is not None and isinstance(obj.__self__, type(sys)):
        module = obj.__self__.__name__
    return module, getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)

def exported(module, qual):
    for pkg in packages:
        if module != pkg and not (module or "").startswith(pkg + "."):
            continue
        top, target = sys.modules.get(pkg), sys.modules.get(module)
        found = top
        for part in qual.split("."):
            found = getattr(found, part, None) if found is not None else None
        here = target
        for part in qual.split("."):
            here = getattr(here, part, None) if here is not None else None
        return (pkg if found is not None and found is here else module) + "." + qual
    return None

out = []
for source in json.load(open(callees_file)):
    try:
        obj = eval(source, ns)
        module, qual = named(obj)
        out.append({"source": source, "module": module,
                    "name": exported(module, qual) if isinstance(module, str) and isinstance(qual, str) else None})
    except BaseException:
        out.append({"source": source, "module": None, "name": None})
with open(out_file, "w") as f:
    json.dump({"callees": out, "exception": exc_line}, f)
sys.exit(status)
'''


def run(code: str, python: Path, tree: Path, *, import_root: str = ".", callees: tuple[str, ...] = (),
        packages: tuple[str, ...] = (), timeout_s: float = 30.0) -> Run:
    """Run ``code`` with ``python`` as a user would from ``tree`` (its ``import_root`` importable),
    with no network where the host allows it; resolve ``callees`` against ``packages``."""
    with tempfile.TemporaryDirectory(prefix="reproducer-") as tmp:
        script, wrapper = Path(tmp) / "reproduce.py", Path(tmp) / "wrapper.py"
        callees_file, out_file = Path(tmp) / "callees.json", Path(tmp) / "out.json"
        script.write_text(code + "\n", encoding="utf-8")
        wrapper.write_text(_WRAPPER, encoding="utf-8")
        callees_file.write_text(json.dumps(list(callees)))
        env = {"PATH": f"{python.parent}{os.pathsep}{os.defpath}", "HOME": tmp, "LANG": "C.UTF-8",
               "PYTHONPATH": str((tree / import_root).resolve()), "PYTHONDONTWRITEBYTECODE": "1",
               "PYTHONHASHSEED": "0", "PYTHONPYCACHEPREFIX": str(Path(tmp) / "pycache")}
        cmd = [*no_network_prefix(), str(python), str(wrapper), str(script), str(callees_file), str(out_file),
               ",".join(packages)]
        code_, out, _err = run_in_group(cmd, tree, env, timeout_s)
        try:
            data = json.loads(out_file.read_text())
        except (OSError, ValueError):
            data = {"callees": [], "exception": ""}
    printed = out.decode("utf-8", "replace").strip().splitlines()
    if len(printed) > _MAX_OUTPUT_LINES:
        printed = printed[:_MAX_OUTPUT_LINES] + ["..."]
    exception = str(data.get("exception", "")).strip()
    shown = [_cut(line, MAX_LINE_CHARS) for line in printed] + ([_cut(exception.splitlines()[-1], 300)]
                                                                if exception else [])
    output = "\n".join(shown)
    return Run(exit_code=code_, output=output, exception=exception,
               callees=tuple(Callee.model_validate(c) for c in data.get("callees", [])))


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def entry_point(run_: Run, packages: tuple[str, ...]) -> str | None:
    """The first callee of ``run_`` that is the package's and public (no segment starting with
    ``_``, nothing local to a function), as the dotted name a user imports it by."""
    return next((c.name for c in run_.callees if c.name and is_public(c.name, packages)), None)


def is_public(name: str, packages: tuple[str, ...]) -> bool:
    """Whether the dotted ``name`` is one of ``packages``' and public: no segment starting with
    ``_``, nothing local to a function."""
    ours = any(name == p or name.startswith(p + ".") for p in packages)
    return ours and "<locals>" not in name and not any(part.startswith("_") for part in name.split("."))


def package_names(paths: list[str], import_root: str = ".") -> tuple[str, ...]:
    """Top-level import names of the repo-relative module ``paths`` (``src/pkg/x.py`` -> ``pkg``)."""
    root = "" if import_root in ("", ".") else import_root.strip("/") + "/"
    names = []
    for p in paths:
        rel = p.removeprefix(root)
        top = rel.split("/", 1)[0].removesuffix(".py")
        if top and top not in names:
            names.append(top)
    return tuple(names)
