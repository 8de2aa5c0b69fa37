"""The agent's tools: their execution against a sandbox (their schemas are the contract's, contract/actions.py).

``submit`` is listed here but handled by the episode (it needs grading).
Agent mistakes come back as a :class:`ToolOutcome` with a failure; sandbox
infrastructure errors other than bad paths propagate as exceptions.
"""

from __future__ import annotations

import shlex
from typing import Any

from pydantic import BaseModel, ValidationError

from contract import TOOL_ARGS, TOOL_SPECS, BashArgs, CreateArgs, ErrorKind, StrReplaceArgs, ViewArgs
from sandbox.base import Sandbox
from sandbox.models import PathError

from .markers import ToolFailure, classify_command, classify_path_error, failure

__all__ = ["TOOL_ARGS", "TOOL_SPECS", "ToolOutcome", "parse_arguments", "run_tool"]  # specs: the contract's

MAX_VIEW_CHARS = 64 * 1024

class ToolOutcome(BaseModel):
    output: str
    failure: ToolFailure | None = None
    files_changed: bool | None = None  # bash only: None when the sandbox cannot tell


def parse_arguments(name: str, arguments: dict[str, Any]) -> BaseModel | ToolFailure:
    """Validate a call's arguments against the tool's schema."""
    model = TOOL_ARGS.get(name)
    if model is None:
        return failure(ErrorKind.unknown_tool, f"unknown tool {name!r}; available: {', '.join(TOOL_ARGS)}",
                       detail=name)
    try:
        args = model.model_validate(arguments)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors())
        return failure(ErrorKind.invalid_arguments, f"invalid arguments for {name}: {problems}")
    for field, value in args:
        if isinstance(value, str):
            try:  # JSON can carry lone surrogates ("\ud800"), which no file or shell can hold
                value.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError as exc:
                return failure(ErrorKind.invalid_arguments, f"invalid arguments for {name}: {field}: "
                               f"not valid Unicode text (lone surrogate at index {exc.start})")
    return args


def _numbered(text: str, start: int, end: int | None) -> str:
    lines = text.splitlines()
    stop = len(lines) if end in (None, -1) else min(end, len(lines))
    out = "\n".join(f"{n:6}\t{lines[n - 1]}" for n in range(start, stop + 1))
    if len(out) > MAX_VIEW_CHARS:
        out = out[:MAX_VIEW_CHARS] + "\n[... output truncated: view a smaller line range ...]"
    return out


async def _view(sb: Sandbox, args: ViewArgs) -> ToolOutcome:
    try:
        data = await sb.read_file(args.path)
    except PathError as exc:
        if exc.reason != "is_directory":
            raise
        res = await sb.run(f"ls -la -- {shlex.quote(args.path)}", timeout_s=30)
        return ToolOutcome(output=res.output, failure=classify_command(res))
    if b"\0" in data[:8192]:
        return ToolOutcome(output=f"{args.path}: binary file ({len(data)} bytes)")
    text = data.decode("utf-8", errors="replace")
    n_lines = len(text.splitlines())
    start = args.start_line or 1
    if start > max(n_lines, 1) or (args.end_line not in (None, -1) and args.end_line < start):
        return ToolOutcome(output="", failure=failure(
            ErrorKind.invalid_arguments, f"line range {start}..{args.end_line} outside 1..{n_lines}"))
    return ToolOutcome(output=_numbered(text, start, args.end_line))


def _breaks_python(path: str, before: str, after: str) -> str | None:
    """The SyntaxError an edit introduces into a Python file that compiled before."""
    if not path.endswith(".py"):
        return None
    try:
        compile(before, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None
    try:
        compile(after, path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        return f"{exc.msg} (line {exc.lineno})"
    except ValueError as exc:
        return str(exc)
    return None


async def _str_replace(sb: Sandbox, args: StrReplaceArgs) -> ToolOutcome:
    data = await sb.read_file(args.path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return ToolOutcome(output="", failure=failure(ErrorKind.invalid_arguments,
                                                      f"{args.path} is not a UTF-8 text file"))
    count = text.count(args.old)
    if count == 0:
        return ToolOutcome(output="", failure=failure(
            ErrorKind.edit_no_match, f"`old` does not occur in {args.path}; view the file and copy it exactly"))
    if count > 1:
        lines = [text[:i].count("\n") + 1 for i in _find_all(text, args.old)]
        return ToolOutcome(output="", failure=failure(
            ErrorKind.edit_multiple_matches,
            f"`old` occurs {count} times in {args.path} (lines {', '.join(map(str, lines[:20]))}); "
            "include more context to make it unique"))
    new_text = text.replace(args.old, args.new, 1)
    broken = _breaks_python(args.path, text, new_text)
    if broken:
        return ToolOutcome(output="", failure=failure(
            ErrorKind.syntax_error, f"edit not applied: it would make {args.path} invalid Python: {broken}",
            detail="SyntaxError"))
    await sb.write_file(args.path, new_text.encode("utf-8"))
    first = text[: text.index(args.old)].count("\n") + 1
    last = first + args.new.count("\n")
    snippet = _numbered(new_text, max(1, first - 3), last + 3)
    return ToolOutcome(output=f"Edited {args.path}. Lines {max(1, first - 3)}..{last + 3} now:\n{snippet}")


def _find_all(text: str, needle: str) -> list[int]:
    out, i = [], text.find(needle)
    while i != -1:
        out.append(i)
        i = text.find(needle, i + 1)
    return out


async def run_tool(sb: Sandbox, name: str, args: BaseModel, *, blocked_tools: tuple[str, ...] = (),
                   max_timeout_s: float | None = None) -> ToolOutcome:
    """Run one parsed tool call (not ``submit``) in the sandbox."""
    try:
        if isinstance(args, BashArgs):
            timeout = args.timeout if max_timeout_s is None or args.timeout is None else min(args.timeout, max_timeout_s)
            res = await sb.run(args.command, timeout_s=timeout)
            return ToolOutcome(output=res.output, failure=classify_command(res, blocked_tools),
                               files_changed=res.files_changed)
        if isinstance(args, ViewArgs):
            return await _view(sb, args)
        if isinstance(args, StrReplaceArgs):
            return await _str_replace(sb, args)
        if isinstance(args, CreateArgs):
            data = args.content.encode("utf-8")
            await sb.write_file(args.path, data)
            return ToolOutcome(output=f"Created {args.path} ({len(data)} bytes).")
    except PathError as exc:
        return ToolOutcome(output="", failure=classify_path_error(exc))
    raise ValueError(f"tool {name!r} is not run by run_tool")
