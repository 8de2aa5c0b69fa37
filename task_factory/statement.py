"""Problem statements of synthetic tasks: a user's bug report, or the verbose test-quoting form.

``report`` (the default) reads like an issue a user files: what they called, what
they saw and what they expected, with a minimal reproducer rewritten from the
failing assertion (the call under test, the few assignments it needs and the
module's imports of the names it uses). It never quotes the test function, never
names the test or its file. ``verbose`` is the older form: the failing test's id,
its source and its error. ``leaks`` checks that neither gives away where or what
the injected change is; the builder falls back to less detail when it finds a leak.
"""

from __future__ import annotations

import ast
import random
import re
import textwrap
from pathlib import Path
from typing import Literal

from .models import Mutation

Style = Literal["report", "verbose"]
STYLES: tuple[str, ...] = ("report", "verbose")

_MAX_TEST_LINES = 30
_MAX_MESSAGE_LINES = 12
_MAX_REPRO_LINES = 14
_PATH_RE = re.compile(r"(?:/[\w.\-]+)+\.py")
_LINE_RE = re.compile(r"\bline \d+\b")
_EXC_RE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Warning|Exit|Interrupt))\b:?\s*(.*)$")

_OPENINGS = (
    "I'm using {pkg} {ver} and ran into a problem: {summary}.",
    "With {pkg} {ver}, {summary}.",
    "Bug report ({pkg} {ver}): {summary}.",
)
_REPORT_OPENINGS = (
    "I'm using {pkg} {ver} and {summary}.",
    "After upgrading to {pkg} {ver}, {summary}.",
    "In {pkg} {ver}, {summary}.",
)
_EQ_METHODS = {"assertEqual", "assertEquals", "assertListEqual", "assertDictEqual", "assertTupleEqual",
               "assertSetEqual", "assertSequenceEqual", "assertMultiLineEqual", "assertIs", "assert_equal"}
_TRUE_METHODS = {"assertTrue": "True", "assertFalse": "False", "assertIsNone": "None"}


# -- reading the test ----------------------------------------------------------------------

def _test_function(repo: Path, nodeid: str) -> tuple[ast.Module, str, ast.FunctionDef | ast.AsyncFunctionDef] | None:
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


def source_of_test(repo: Path, nodeid: str) -> str | None:
    """Dedented source of the test function of ``nodeid`` (``file::[Class::]name[params]``)."""
    found = _test_function(repo, nodeid)
    if found is None:
        return None
    _module, src, node = found
    start = min([node.lineno] + [d.lineno for d in node.decorator_list])
    lines = src.splitlines()[start - 1: node.end_lineno]
    out = textwrap.dedent("\n".join(lines)).splitlines()
    if len(out) > _MAX_TEST_LINES:
        out = out[:_MAX_TEST_LINES] + ["    ..."]
    return "\n".join(out)


def clean_message(message: str) -> str:
    """Crash message without file paths or line numbers, cut to a few lines."""
    text = _LINE_RE.sub("line ?", _PATH_RE.sub("<file>", message.strip()))
    lines = text.splitlines()
    if len(lines) > _MAX_MESSAGE_LINES:
        lines = lines[:_MAX_MESSAGE_LINES] + ["..."]
    return "\n".join(line[:300] for line in lines)


# -- the reproducer ------------------------------------------------------------------------

class Reproducer:
    """A standalone snippet rewritten from one failing statement, and what it should give."""

    def __init__(self, code: str, call: str, expected: str | None, swapped: bool = False) -> None:
        self.code, self.call, self.expected = code, call, expected
        self.swapped = swapped  # the computed side is the assertion's right-hand side


def _failing_statement(fn: ast.FunctionDef | ast.AsyncFunctionDef, line: int | None) -> ast.stmt | None:
    """The statement of ``fn``'s top level holding ``line``, else its first assertion."""
    body = fn.body
    if line is not None:
        for stmt in body:
            if stmt.lineno <= line <= (stmt.end_lineno or stmt.lineno):
                return stmt
    for stmt in body:
        if isinstance(stmt, ast.Assert) or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
                                            and _method(stmt.value) in _EQ_METHODS | set(_TRUE_METHODS)):
            return stmt
    for stmt in body:  # else the first ``with pytest.raises(...)``-style block of one statement
        if isinstance(stmt, ast.With) and len(stmt.body) == 1:
            return stmt
    return None


def _method(call: ast.Call) -> str:
    return call.func.attr if isinstance(call.func, ast.Attribute) else ""


def _check(stmt: ast.stmt) -> tuple[ast.expr, str | None, bool] | None:
    """(expression a user would evaluate, the expected value's source or None, whether the computed
    side is the right-hand one) of an assertion or call."""
    if isinstance(stmt, ast.With) and len(stmt.body) == 1:  # with pytest.raises(...): the call inside
        return _check(stmt.body[0])
    if isinstance(stmt, ast.Assert):
        test = stmt.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.Is)):
            left, right = _oriented(test.left, test.comparators[0])
            return left, ast.unparse(right), left is not test.left
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return test.operand, "False", False
        return test, "True", False
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        call, name = stmt.value, _method(stmt.value)
        if name in _EQ_METHODS and len(call.args) >= 2:
            left, right = _oriented(call.args[0], call.args[1])
            return left, ast.unparse(right), left is not call.args[0]
        if name in _TRUE_METHODS and call.args:
            return call.args[0], _TRUE_METHODS[name], False
        return call, None, False
    if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
        return stmt.value, None, False
    return None


def _resolved_expected(expected: str, params: dict[str, ast.expr], known: set[str]) -> str | None:
    """The expected value's source with parametrize names replaced; None if it needs the test's context."""
    node = ast.parse(expected, mode="eval").body
    if isinstance(node, ast.Name) and node.id in params:
        return ast.unparse(params[node.id])
    return expected if _names(node) <= known else None


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
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


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


def reproducer(repo: Path, nodeid: str, line: int | None = None) -> Reproducer | None:
    """A minimal standalone reproducer for the failing test, or None when none can stand alone.

    Built from the failing statement only: its expression, the assignments of the test
    it depends on (straight-line code before it), and the module's imports of the names
    it uses. Anything else (fixtures, ``self``, helpers of the test module) means None.
    """
    found = _test_function(repo, nodeid)
    if found is None:
        return None
    module, _src, fn = found
    stmt = _failing_statement(fn, line)
    checked = _check(stmt) if stmt is not None else None
    if checked is None:
        return None
    expr, expected, swapped = checked
    imports: dict[str, ast.stmt] = {}
    for node in module.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                imports[(alias.asname or alias.name).split(".")[0]] = node
    needed = _names(expr)
    setup: list[ast.stmt] = []
    params = _param_values(module, fn, nodeid)
    for before in reversed(fn.body[: fn.body.index(stmt)]):
        if isinstance(before, ast.Assign) and all(isinstance(t, ast.Name) for t in before.targets):
            targets = {t.id for t in before.targets if isinstance(t, ast.Name)}
            if targets & needed:
                setup.insert(0, before)
                needed = (needed - targets) | _names(before.value)
    chosen = [n for n in params if n in needed]
    setup[:0] = [ast.Assign(targets=[ast.Name(id=n, ctx=ast.Store())], value=params[n], lineno=0) for n in chosen]
    needed = (needed - set(chosen)) | set().union(*(_names(params[n]) for n in chosen))
    builtin = set(dir(__builtins__)) if not isinstance(__builtins__, dict) else set(__builtins__)
    missing = {n for n in needed if n not in imports and n not in builtin}
    if missing:
        return None
    used_imports = []
    for node in module.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and node not in used_imports:
            keep = [a for a in node.names if (a.asname or a.name).split(".")[0] in needed]
            if keep:
                clone = ast.Import(names=keep) if isinstance(node, ast.Import) else ast.ImportFrom(
                    module=node.module, names=keep, level=node.level)
                used_imports.append(clone)
    if expected is not None:
        expected = _resolved_expected(expected, params, set(imports) | builtin)
    call = ast.unparse(expr)
    lines = [ast.unparse(n) for n in used_imports] + ([""] if used_imports else [])
    lines += [ast.unparse(s) for s in setup]
    if expected is None:
        lines.append(call if isinstance(stmt, ast.With) or checked[1] is None else f"print({call})")
    else:
        lines.append(f"print({call})  # I expect {expected}")
    code = "\n".join(lines)
    if len(code.splitlines()) > _MAX_REPRO_LINES or any(len(x) > 200 for x in code.splitlines()):
        return None
    return Reproducer(code, call, expected, swapped)


# -- statements ----------------------------------------------------------------------------

def _observed(message: str, swapped: bool = False) -> tuple[str, str | None]:
    """(what the user saw, as a phrase; the exception name or None) from a crash message.

    ``swapped``: the computed value is the comparison's right-hand side."""
    first = message.strip().splitlines()[0] if message.strip() else ""
    exc = _EXC_RE.match(first)
    if exc and exc.group(1) != "AssertionError":
        detail = exc.group(2).strip()
        return (f"it raises `{exc.group(1)}`" + (f" ({detail[:160]})" if detail else ""), exc.group(1))
    body = first.removeprefix("AssertionError:").strip()
    compare = re.match(r"^assert (.+?) (==|is) (.+)$", body) or re.match(r"^(.+?) (!=|is not) (.+)$", body)
    seen = compare.group(3 if swapped else 1) if compare else ""
    if compare and len(seen) <= 160 and "..." not in seen:
        return f"I get `{seen}`", None
    return "the result is wrong", None


def _summary(nodeid: str, message: str) -> str:
    name = nodeid.split("::")[-1].split("[", 1)[0]
    words = re.sub(r"^test_?", "", name).replace("_", " ").strip() or name
    first = message.strip().splitlines()[0] if message.strip() else ""
    exc = re.match(r"^([A-Za-z_][\w.]*(?:Error|Exception|Warning|Exit|Interrupt))\b", first)
    if exc and not exc.group(1).startswith("AssertionError"):
        return f"the behaviour covered by `{name}` ({words}) raises {exc.group(1)}"
    return f"the behaviour covered by `{name}` ({words}) gives a wrong result"


def verbose_statement(package: str, version: str, repo: Path, fail_to_pass: list[str], messages: dict[str, str],
                      rng: random.Random, detail: int = 2) -> str:
    """The verbose form: ``detail`` 2 = test id + test source + error, 1 = id + error, 0 = ids only."""
    first = fail_to_pass[0]
    message = clean_message(messages.get(first, ""))
    parts = [rng.choice(_OPENINGS).format(pkg=package, ver=version, summary=_summary(first, message)), ""]
    parts.append(f"The project's own test `{first}` fails.")
    source = source_of_test(repo, first) if detail >= 2 else None
    if source:
        parts += ["", "Reproducer (the test's code):", "", "```python", source, "```"]
    if message and detail >= 1:
        parts += ["", "What I get:", "", "```", message, "```"]
    others = fail_to_pass[1:]
    if others:
        parts += ["", "These tests fail too:", ""] + [f"- `{t}`" for t in others[:8]]
        if len(others) > 8:
            parts.append(f"- ... and {len(others) - 8} more")
    parts += ["", "Expected: these tests pass, matching the documented behaviour. "
                  "Please fix the library code (not the tests)."]
    return "\n".join(parts) + "\n"


def report_statement(package: str, version: str, repo: Path, fail_to_pass: list[str], messages: dict[str, str],
                     rng: random.Random, detail: int = 2, lines: dict[str, int] | None = None) -> str:
    """A user's bug report: ``detail`` 2 = reproducer + output, 1 = output only, 0 = the symptom only.

    Never quotes the test function and never names a test or a test file.
    """
    first = fail_to_pass[0]
    message = clean_message(messages.get(first, ""))
    repro = reproducer(repo, first, (lines or {}).get(first))
    seen, exc = _observed(message, repro is not None and repro.swapped)
    if repro is not None:
        summary = f"`{_short(repro.call)}` " + (f"raises `{exc}`" if exc else "does not give what I expect")
    else:
        summary = f"something raises `{exc}`" if exc else "I get a wrong result from it"
    parts = [rng.choice(_REPORT_OPENINGS).format(pkg=package, ver=version, summary=summary), ""]
    if repro is not None and detail >= 2:
        parts += ["To reproduce:", "", "```python", repro.code, "```", ""]
    if detail >= 1 and message:
        what = f"Instead, {seen}." if repro is not None and repro.expected is not None else f"Here {seen}."
        parts += [what if not exc else f"Here {seen}:", "", "```", _user_output(message), "```", ""]
    if repro is not None and repro.expected is not None:
        parts.append(f"I expected `{_short(repro.expected, 200)}`" + (" and no exception." if exc else "."))
    elif exc:
        parts.append("I expected it to work without an exception, as documented.")
    else:
        parts.append("I expected the documented behaviour.")
    if len(fail_to_pass) > 1:
        parts.append("Related behaviour seems broken in the same way.")
    parts.append("")
    return "\n".join(parts)


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _user_output(message: str) -> str:
    """The crash message as a user would see it: pytest's introspection lines (``+ where``) dropped."""
    kept = [ln for ln in message.splitlines() if ln.strip() and not re.match(r"^\s*([+-]\s|\?)", ln)
            and "where " not in ln[:12]]
    return "\n".join(kept) or message


def problem_statement(package: str, version: str, repo: Path, fail_to_pass: list[str], messages: dict[str, str],
                      rng: random.Random, detail: int = 2, *, style: Style = "report",
                      lines: dict[str, int] | None = None) -> str:
    """Statement for a synthetic task in ``style`` (``report`` or ``verbose``) at ``detail`` (2, 1, 0)."""
    if style == "verbose":
        return verbose_statement(package, version, repo, fail_to_pass, messages, rng, detail)
    return report_statement(package, version, repo, fail_to_pass, messages, rng, detail, lines)


def leaks(statement: str, mutation: Mutation, changed_lines: list[str]) -> list[str]:
    """Reasons the statement gives away where or what the injected change is (empty: none)."""
    found = []
    if re.search(rf"(?<![\w.-]){re.escape(mutation.path)}", statement):
        found.append("names the modified file")
    base = Path(mutation.path).name
    if base != "__init__.py" and re.search(rf"(?<![\w/]){re.escape(base)}", statement):
        found.append("names the modified file's basename")
    if re.search(rf"\bline {mutation.lineno}\b", statement):
        found.append("names the modified line number")
    if mutation.operator in statement:
        found.append("names the injection operator")
    for line in changed_lines:
        text = line.strip()
        if len(text) >= 12 and text in statement:
            found.append("quotes a changed source line")
            break
    return found


def reveals_tests(statement: str, repo: Path, tests: list[str]) -> list[str]:
    """Reasons a user-voice statement gives the tests away: their names, files or function source."""
    found = []
    for t in tests:
        path, name = t.split("::", 1)[0], t.split("::")[-1].split("[", 1)[0]
        if re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", statement):
            found.append(f"names the test {name}")
        if path in statement:
            found.append(f"names the test file {path}")
        source = source_of_test(repo, t) or ""
        asserts = [ln.strip() for ln in source.splitlines()
                   if ln.strip().startswith("assert ") and len(ln.strip()) >= 30]
        if re.search(rf"\bdef {re.escape(name)}\(", statement) or any(a in statement for a in asserts):
            found.append(f"quotes the test {name}")
    return sorted(set(found))
