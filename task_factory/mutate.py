"""Procedural bug injection: AST-located, minimal textual edits of function bodies.

Each operator finds AST nodes inside functions and rewrites only the source
text of that node (or the operator token between its operands), so a bug is a
one-line diff that keeps the file's formatting. Candidates come out in a
stable order; choosing among them (seeded) is the builder's job.

Operators: flip_comparison, flip_boolean, flip_arith, remove_not, off_by_one,
slice_bound, swap_args, drop_branch, drop_return_value, wrong_default.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from .models import Mutation

OPERATORS: tuple[str, ...] = (
    "flip_comparison", "flip_boolean", "flip_arith", "remove_not", "off_by_one",
    "slice_bound", "swap_args", "drop_branch", "drop_return_value", "wrong_default",
)

# comparison operator -> (token regex, replacement)
_CMP: dict[type, tuple[str, str]] = {
    ast.Lt: (r"<(?!=)", ">="), ast.Gt: (r">(?!=)", "<="), ast.LtE: (r"<=", ">"), ast.GtE: (r">=", "<"),
    ast.Eq: (r"==", "!="), ast.NotEq: (r"!=", "=="),
    ast.In: (r"(?<![\w])in(?![\w])", "not in"), ast.NotIn: (r"(?<![\w])not\s+in(?![\w])", "in"),
    ast.Is: (r"(?<![\w])is(?![\w])", "is not"), ast.IsNot: (r"(?<![\w])is\s+not(?![\w])", "is"),
}
_BOOL: dict[type, tuple[str, str]] = {ast.And: (r"(?<![\w])and(?![\w])", "or"), ast.Or: (r"(?<![\w])or(?![\w])", "and")}
_ARITH: dict[type, tuple[str, str]] = {ast.Add: (r"\+", "-"), ast.Sub: (r"-", "+")}


@dataclass(frozen=True)
class Edit:
    """Replace ``source[start:end]`` (character offsets) with ``text``."""

    start: int
    end: int
    text: str


def apply_edit(source: str, edit: Edit) -> str:
    return source[: edit.start] + edit.text + source[edit.end:]


def parses(source: str, edit: Edit) -> bool:
    """Whether ``source`` with ``edit`` applied is still valid Python."""
    try:
        ast.parse(apply_edit(source, edit))
    except SyntaxError:
        return False
    return True


def find_mutations(source: str, path: str, verify: bool = True) -> list[tuple[Mutation, Edit]]:
    """All candidate mutations of ``source`` (file ``path``), in a stable order.

    With ``verify`` each result is parsed and dropped unless valid; without it
    (cheaper for big files) callers check :func:`parses` before using one.
    """
    finder = _Finder(source, path)
    finder.scan(ast.parse(source))
    out: list[tuple[Mutation, Edit]] = []
    seen: set[str] = set()
    for mut, edit in finder.found:
        if mut.id in seen:
            continue
        if source[edit.start:edit.end] == edit.text or (verify and not parses(source, edit)):
            continue
        seen.add(mut.id)
        out.append((mut, edit))
    out.sort(key=lambda me: (me[0].lineno, me[0].col, me[0].operator, me[0].variant))
    return out


class _Finder:
    def __init__(self, source: str, path: str) -> None:
        self.source = source
        self.path = path
        self.lines = source.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))
        self.found: list[tuple[Mutation, Edit]] = []
        self.qual: list[str] = []

    # -- positions -------------------------------------------------------------------------
    def off(self, lineno: int, col: int) -> int:
        """Character offset of (1-based line, UTF-8 byte column)."""
        line = self.lines[lineno - 1]
        return self.starts[lineno - 1] + len(line.encode("utf-8")[:col].decode("utf-8", "replace"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.off(node.lineno, node.col_offset), self.off(node.end_lineno, node.end_col_offset)

    def text(self, node: ast.AST) -> str:
        a, b = self.span(node)
        return self.source[a:b]

    @staticmethod
    def one_line(*nodes: ast.AST) -> bool:
        return all(n.lineno == n.end_lineno == nodes[0].lineno for n in nodes)

    def add(self, op: str, node: ast.AST, edit: Edit, variant: str = "") -> None:
        fn = ".".join(self.qual)
        self.found.append((Mutation(path=self.path, function=fn, operator=op, lineno=node.lineno,
                                    col=node.col_offset, variant=variant), edit))

    def swap_token(self, op: str, node: ast.AST, left: ast.AST, right: ast.AST, table: dict, key: type) -> None:
        """Replace the operator token between ``left`` and ``right`` (on one line)."""
        if key not in table or left.end_lineno != right.lineno:
            return
        a = self.off(left.end_lineno, left.end_col_offset)
        b = self.off(right.lineno, right.col_offset)
        gap = self.source[a:b]
        pattern, repl = table[key]
        hits = list(re.finditer(pattern, gap))
        if len(hits) != 1 or "#" in gap:
            return
        m = hits[0]
        self.add(op, node, Edit(a + m.start(), a + m.end(), repl), variant=repl.replace(" ", "_"))

    # -- traversal -------------------------------------------------------------------------
    def scan(self, tree: ast.Module) -> None:
        self.walk_stmts(tree.body, in_function=False)

    def walk_stmts(self, body: list[ast.stmt], in_function: bool) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.qual.append(stmt.name)
                self.defaults(stmt)
                self.walk_stmts(stmt.body, in_function=True)
                self.qual.pop()
                continue
            if isinstance(stmt, ast.ClassDef):
                self.qual.append(stmt.name)
                self.walk_stmts(stmt.body, in_function=False)
                self.qual.pop()
                continue
            if in_function:
                self.statement(stmt, body)
            for field in ("body", "orelse", "finalbody"):
                sub = getattr(stmt, field, None)
                if isinstance(sub, list) and sub and isinstance(sub[0], ast.stmt):
                    self.walk_stmts(sub, in_function)
            for handler in getattr(stmt, "handlers", []) or []:
                self.walk_stmts(handler.body, in_function)
            for case in getattr(stmt, "cases", []) or []:
                self.walk_stmts(case.body, in_function)

    def statement(self, stmt: ast.stmt, parent: list[ast.stmt]) -> None:
        if isinstance(stmt, ast.If):
            self.drop_branch(stmt, parent)
        if isinstance(stmt, ast.Return) and stmt.value is not None and self.one_line(stmt):
            if not (isinstance(stmt.value, ast.Constant) and stmt.value.value is None):
                a, b = self.span(stmt)
                self.add("drop_return_value", stmt, Edit(a, b, "return"))
        for node in self.expressions(stmt):
            self.expression(node)

    @staticmethod
    def expressions(stmt: ast.stmt):
        """Expression nodes of ``stmt`` itself (not of nested statements or annotations)."""
        stack: list[ast.AST] = []
        for field, value in ast.iter_fields(stmt):
            if field in ("body", "orelse", "finalbody", "handlers", "cases", "annotation", "returns"):
                continue
            items = value if isinstance(value, list) else [value]
            stack.extend(v for v in items if isinstance(v, ast.expr))
        while stack:
            node = stack.pop()
            if isinstance(node, ast.Lambda):
                continue
            yield node
            stack.extend(c for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr))

    def expression(self, node: ast.expr) -> None:
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            self.swap_token("flip_comparison", node, node.left, node.comparators[0], _CMP, type(node.ops[0]))
        elif isinstance(node, ast.BoolOp):
            self.swap_token("flip_boolean", node, node.values[0], node.values[1], _BOOL, type(node.op))
        elif isinstance(node, ast.BinOp) and not any(_is_text(v) for v in (node.left, node.right)):
            self.swap_token("flip_arith", node, node.left, node.right, _ARITH, type(node.op))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not) and self.one_line(node, node.operand):
            a = self.off(node.lineno, node.col_offset)
            b = self.off(node.operand.lineno, node.operand.col_offset)
            self.add("remove_not", node, Edit(a, b, ""))
        elif isinstance(node, ast.Constant) and type(node.value) is int and self.text(node).isdigit():
            new = node.value - 1 if node.value > 0 else node.value + 1
            a, b = self.span(node)
            self.add("off_by_one", node, Edit(a, b, str(new)), variant=str(new))
        elif isinstance(node, ast.Slice):
            for bound, delta in ((node.lower, " + 1"), (node.upper, " - 1")):
                if isinstance(bound, (ast.Name, ast.Attribute, ast.Call)) and self.one_line(bound):
                    a, b = self.span(bound)
                    self.add("slice_bound", bound, Edit(a, b, f"({self.text(bound)}{delta})"), variant=delta.strip())
        elif isinstance(node, ast.Call):
            args = node.args
            if len(args) >= 2 and not any(isinstance(x, ast.Starred) for x in args[:2]) and self.one_line(args[0], args[1]):
                t0, t1 = self.text(args[0]), self.text(args[1])
                if t0 != t1:
                    a0, b0 = self.span(args[0])
                    a1, b1 = self.span(args[1])
                    self.add("swap_args", node, Edit(a0, b1, t1 + self.source[b0:a1] + t0))

    def drop_branch(self, stmt: ast.If, parent: list[ast.stmt]) -> None:
        """Delete a whole ``if`` block (no else/elif) from a body that keeps other statements."""
        if stmt.orelse or len(parent) < 2:
            return
        first = self.lines[stmt.lineno - 1]
        head = first.encode("utf-8")[: stmt.col_offset].decode("utf-8", "replace")
        last = self.lines[stmt.end_lineno - 1]
        tail = last.encode("utf-8")[stmt.end_col_offset:].decode("utf-8", "replace")
        if head.strip() or not first.lstrip().startswith("if") or (tail.strip() and not tail.strip().startswith("#")):
            return
        self.add("drop_branch", stmt, Edit(self.starts[stmt.lineno - 1], self.starts[stmt.end_lineno], ""))

    def defaults(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for d in [*fn.args.defaults, *(k for k in fn.args.kw_defaults if k is not None)]:
            if not isinstance(d, ast.Constant):
                continue
            if type(d.value) is bool:
                new = str(not d.value)
            elif type(d.value) is int and self.text(d).isdigit():
                new = str(d.value + 1)
            else:
                continue
            a, b = self.span(d)
            self.add("wrong_default", d, Edit(a, b, new), variant=new)


def _is_text(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)))
