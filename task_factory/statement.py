"""Problem statements of synthetic tasks: a user's bug report, or the verbose test-quoting form.

Both are written from ``Evidence``: the public entry point that misbehaves, a standalone
reproducer (``reproducer.py``) and what it printed on the buggy tree, all verified by the
builder (it fails there and passes on the fixed tree). ``report`` (the default) reads like an
issue a user files: which function misbehaves, the script, what it printed and what they
expected. It never quotes the test function, never names the test or its file. ``verbose``
adds the failing test's id and source. ``leaks`` checks that neither gives away where or what
the injected change is; ``reveals_tests`` that a report does not give the tests away.
"""

from __future__ import annotations

import ast
import random
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .models import Mutation
from .reproducer import Reproducer, Run, find_test_function

Style = Literal["report", "verbose"]
STYLES: tuple[str, ...] = ("report", "verbose")

_MAX_TEST_LINES = 30
_MAX_MESSAGE_LINES = 12
_PATH_RE = re.compile(r"(?:/[\w.\-]+)+\.py")
_LINE_RE = re.compile(r"\bline \d+\b")

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


# -- reading the test ----------------------------------------------------------------------

def source_of_test(repo: Path, nodeid: str) -> str | None:
    """Dedented source of the test function of ``nodeid`` (``file::[Class::]name[params]``)."""
    found = find_test_function(repo, nodeid)
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


# -- statements ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Evidence:
    """What a statement reports, as the builder verified it: the public ``entry_point`` that
    misbehaves, the ``reproducer`` (it fails on the buggy tree, passes on the fixed one), its
    ``run`` on the buggy tree and (``fixed``) on the fixed tree, where the expected value shows."""

    entry_point: str
    reproducer: Reproducer
    run: Run
    fixed: Run | None = None

    @property
    def exception(self) -> str | None:
        """The name of the exception the reproducer died of, other than its own assertion."""
        last = self.run.exception.splitlines()[-1] if self.run.exception else ""
        name = re.match(r"^([A-Za-z_][\w.]*)(?::|$)", last)
        return name.group(1) if name and name.group(1) != "AssertionError" else None

    def summary(self) -> str:
        """``entry_point`` and how it misbehaves, e.g. "`pkg.window` raises `TypeError`"."""
        where = f"`{self.entry_point}`"
        if self.exception:
            return f"{where} raises `{self.exception}`"
        if self.reproducer.check == "raises":
            return f"{where} does not raise `{self.reproducer.expected}`"
        return f"{where} gives a wrong result"

    def expectation(self) -> str:
        """What the user expected, as a sentence."""
        r = self.reproducer
        if r.check in ("equal", "is"):
            return f"I expected `{_short(self.expected_value(), 200)}`" + (" and no exception." if self.exception else ".")
        if r.check == "raises":
            return f"I expected it to raise `{r.expected}`."
        if r.check in ("true", "false"):
            return f"I expected a {r.check} result" + (" and no exception." if self.exception else ".")
        return "I expected it to run without an exception, as documented."

    def expected_value(self) -> str:
        """The expected value as the script writes it where that is a literal, else as the fixed
        code prints it (``repr``), else the script's expression."""
        written = self.reproducer.expected or ""
        try:
            ast.literal_eval(written)
            return written
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            pass
        printed = self.fixed.output.splitlines() if self.fixed is not None and self.fixed.output else []
        if self.reproducer.check == "equal" and len(printed) == 1 and len(printed[0]) <= 200:
            return printed[0]
        return written

    def body(self) -> list[str]:
        """The reproducer, what it printed, what was expected (the statement's middle)."""
        output = clean_message(self.run.output)
        return ["To reproduce:", "", "```python", self.reproducer.code, "```", "",
                "Running it prints:" if not self.run.exception or self.run.output.count("\n") else "It fails with:",
                "", "```", output, "```", "", self.expectation()]


def report_statement(package: str, version: str, fail_to_pass: list[str], evidence: Evidence,
                     rng: random.Random) -> str:
    """A user's bug report: the entry point that misbehaves, the reproducer, what it printed and
    what they expected. Never quotes the test function and never names a test or a test file."""
    parts = [rng.choice(_REPORT_OPENINGS).format(pkg=package, ver=version, summary=evidence.summary()), ""]
    parts += evidence.body()
    if len(fail_to_pass) > 1:
        parts.append("Related behaviour seems broken in the same way.")
    return "\n".join(parts) + "\n"


def verbose_statement(package: str, version: str, repo: Path, fail_to_pass: list[str], evidence: Evidence,
                      rng: random.Random) -> str:
    """The verbose form: the report's content plus the failing tests' ids and the first one's source."""
    first = fail_to_pass[0]
    parts = [rng.choice(_OPENINGS).format(pkg=package, ver=version, summary=evidence.summary()), ""]
    parts.append(f"The project's own test `{first}` fails.")
    source = source_of_test(repo, first)
    if source:
        parts += ["", "The test's code:", "", "```python", source, "```"]
    parts += [""] + evidence.body()
    others = fail_to_pass[1:]
    if others:
        parts += ["", "These tests fail too:", ""] + [f"- `{t}`" for t in others[:8]]
        if len(others) > 8:
            parts.append(f"- ... and {len(others) - 8} more")
    parts += ["", "Expected: these tests pass, matching the documented behaviour. "
                  "Please fix the library code (not the tests)."]
    return "\n".join(parts) + "\n"


def problem_statement(package: str, version: str, repo: Path, fail_to_pass: list[str], evidence: Evidence,
                      rng: random.Random, *, style: Style = "report") -> str:
    """Statement for a synthetic task in ``style`` (``report`` or ``verbose``)."""
    if style == "verbose":
        return verbose_statement(package, version, repo, fail_to_pass, evidence, rng)
    return report_statement(package, version, fail_to_pass, evidence, rng)


def reproducer_block(statement: str) -> str | None:
    """The reproducer as a statement shows it (its first ``python`` block after "To reproduce:")."""
    found = re.search(r"To reproduce:\n\n```python\n(.*?)\n```", statement, re.S)
    return found.group(1) if found else None


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."

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
