"""Issue-style problem statements: the symptom and a reproducer from the failing tests.

A statement shows what a user would see (the failing test's code and its error)
and never where the bug was injected or what the change was; ``leaks`` checks
that and the builder falls back to less detail when it finds a leak.
"""

from __future__ import annotations

import ast
import random
import re
import textwrap
from pathlib import Path

from .models import Mutation

_MAX_TEST_LINES = 30
_MAX_MESSAGE_LINES = 12
_PATH_RE = re.compile(r"(?:/[\w.\-]+)+\.py")
_LINE_RE = re.compile(r"\bline \d+\b")

_OPENINGS = (
    "I'm using {pkg} {ver} and ran into a problem: {summary}.",
    "With {pkg} {ver}, {summary}.",
    "Bug report ({pkg} {ver}): {summary}.",
)


def source_of_test(repo: Path, nodeid: str) -> str | None:
    """Dedented source of the test function of ``nodeid`` (``file::[Class::]name[params]``)."""
    parts = nodeid.split("::")
    path = repo / parts[0]
    if len(parts) < 2 or not path.is_file():
        return None
    names = [p.split("[", 1)[0] for p in parts[1:]]
    try:
        src = path.read_text(encoding="utf-8")
        scope: list[ast.stmt] = ast.parse(src).body
    except (SyntaxError, UnicodeDecodeError):
        return None
    node: ast.AST | None = None
    for name in names:
        node = next((n for n in scope if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and n.name == name), None)
        if node is None:
            return None
        scope = node.body
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    start = min([node.lineno] + [d.lineno for d in node.decorator_list])
    lines = src.splitlines()[start - 1: node.end_lineno]
    text = textwrap.dedent("\n".join(lines))
    out = text.splitlines()
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


def _summary(nodeid: str, message: str) -> str:
    name = nodeid.split("::")[-1].split("[", 1)[0]
    words = re.sub(r"^test_?", "", name).replace("_", " ").strip() or name
    first = message.strip().splitlines()[0] if message.strip() else ""
    exc = re.match(r"^([A-Za-z_][\w.]*(?:Error|Exception|Warning|Exit|Interrupt))\b", first)
    if exc and not exc.group(1).startswith("AssertionError"):
        return f"the behaviour covered by `{name}` ({words}) raises {exc.group(1)}"
    return f"the behaviour covered by `{name}` ({words}) gives a wrong result"


def problem_statement(package: str, version: str, repo: Path, fail_to_pass: list[str],
                      messages: dict[str, str], rng: random.Random, detail: int = 2) -> str:
    """Statement for a task; ``detail`` 2 = test source + error, 1 = error only, 0 = names only."""
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
