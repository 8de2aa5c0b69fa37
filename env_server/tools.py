"""The agent's tools: their handlers against a sandbox (the tools themselves are the contract's registry,
contract/tools.py).

A handler is registered for a tool's arguments model (``@handles(Model)``); an episode runs a call with
the handler of its tool's model. A submitting tool (``submit``) has none: the episode grades. Agent
mistakes come back as a :class:`ToolOutcome` with a failure; sandbox infrastructure errors other than
bad paths propagate as exceptions.
"""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from contract import (PROFILES, SUBSHELL_ENV, SUBSHELL_TIMEOUT_S, BashArgs, CreateArgs, ErrorKind, StrReplaceArgs,
                      SubshellBashArgs, ToolProfile, ViewArgs)
from sandbox.base import Sandbox
from sandbox.models import CommandStatus, PathError

from .markers import ToolFailure, classify_command, classify_path_error, failure

__all__ = ["HANDLERS", "ToolContext", "ToolOutcome", "handles", "missing_handlers", "parse_arguments", "run_tool"]

MAX_VIEW_CHARS = 64 * 1024


class ToolOutcome(BaseModel):
    output: str
    failure: ToolFailure | None = None
    ran_command: bool = False  # a shell command ran (it may have changed files even when it failed)
    files_changed: bool | None = None  # commands only: None when the sandbox cannot tell
    #: commands of a ``returncode``-style profile: the exit status (-1: none, e.g. timed out) and
    #: what stopped the command, as mini-swe-agent reports them
    returncode: int | None = None
    exception_info: str | None = None
    #: the patch a command submitted (a profile's sentinel line, then the patch); None: no submission
    submission: str | None = None
    #: the submission was cut at the sandbox's output limit (it cannot be graded as sent)
    submission_cut: bool = False


class ToolContext(BaseModel):
    """What a handler may need besides its arguments: the episode's sandbox policy and profile."""

    model_config = ConfigDict(frozen=True)

    blocked_tools: tuple[str, ...] = ()
    max_timeout_s: float | None = None
    profile: ToolProfile | None = None  # the episode's: whether (and how) a command may submit
    #: output an observation keeps (the sandbox's max_output_bytes), and what a command that may submit
    #: by the sentinel line keeps: its output is the patch, cut only past this (then it cannot be graded)
    output_limit: int = 64 * 1024
    submission_limit: int = 4 * 1024 * 1024


Handler = Callable[[Sandbox, Any, ToolContext], Awaitable[ToolOutcome]]
#: the handler of each arguments model (one per tool entry of the contract's registry)
HANDLERS: dict[type[BaseModel], Handler] = {}


def handles(model: type[BaseModel]) -> Callable[[Handler], Handler]:
    """Register the decorated coroutine as the handler of tools whose arguments model is ``model``."""
    def register(handler: Handler) -> Handler:
        HANDLERS[model] = handler
        return handler
    return register


def missing_handlers(profiles: dict[str, ToolProfile] | None = None) -> list[str]:
    """``profile/tool`` for every non-submitting tool of the registry no handler runs (a server refuses to start)."""
    return [f"{p.name}/{t.name}" for p in (profiles or PROFILES).values() for t in p.tools
            if not t.submits and t.args not in HANDLERS]


def parse_arguments(profile: ToolProfile, name: str, arguments: dict[str, Any]) -> BaseModel | ToolFailure:
    """Validate a call's arguments against the schema of the profile's tool ``name``."""
    tool = profile.tool(name)
    if tool is None:
        return failure(ErrorKind.unknown_tool, f"unknown tool {name!r}; available: {', '.join(profile.names)}",
                       detail=name)
    model = tool.args
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


@handles(BashArgs)
async def _bash(sb: Sandbox, args: BashArgs, ctx: ToolContext) -> ToolOutcome:
    timeout = args.timeout if ctx.max_timeout_s is None or args.timeout is None else min(args.timeout, ctx.max_timeout_s)
    res = await sb.run(args.command, timeout_s=timeout)
    return ToolOutcome(output=res.output, failure=classify_command(res, ctx.blocked_tools), ran_command=True,
                       files_changed=res.files_changed)


@handles(SubshellBashArgs)
async def _subshell_bash(sb: Sandbox, args: SubshellBashArgs, ctx: ToolContext) -> ToolOutcome:
    """mini-swe-agent's action: ``bash -c`` in a fresh subshell at /workspace with its environment
    (nothing persists between commands), its timeout; a first output line that is the profile's
    sentinel, with exit status 0, submits the rest of the output."""
    timeout = SUBSHELL_TIMEOUT_S if ctx.max_timeout_s is None else min(SUBSHELL_TIMEOUT_S, ctx.max_timeout_s)
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in SUBSHELL_ENV.items())
    may_submit = ctx.profile is not None and ctx.profile.submit_sentinel is not None
    limit = max(ctx.output_limit, ctx.submission_limit) if may_submit else ctx.output_limit
    wrapper = f"cd /workspace && exec env {env} bash -c "
    res = await sb.run(f"({wrapper}{shlex.quote(args.command)})", timeout_s=timeout, output_limit=limit)
    if wrapper in res.output:  # the shell's "Killed ( cd /workspace && exec env ..." notice: not the agent's output
        res = res.model_copy(update={"output": "".join(line for line in res.output.splitlines(keepends=True)
                                                       if wrapper not in line)})
    returncode = res.exit_code if res.exit_code is not None else -1
    exception = None
    if res.status is CommandStatus.timeout:  # as mini-swe-agent reports a timeout: no return code
        returncode = -1
        exception = f"An error occurred while executing the command: the command timed out after {timeout:g} seconds"
    elif res.status is not CommandStatus.ok and res.exit_code is None:
        exception = f"An error occurred while executing the command: it ended with status {res.status.value}"
    outcome = ToolOutcome(output=res.output, failure=classify_command(res, ctx.blocked_tools), ran_command=True,
                          files_changed=res.files_changed, returncode=returncode, exception_info=exception)
    if may_submit and res.status is CommandStatus.ok:
        outcome.submission = ctx.profile.submission(res.output, res.exit_code)
        outcome.submission_cut = outcome.submission is not None and res.truncated
    if outcome.submission is None:  # an observation keeps what any command's does
        outcome.output = cut_output(outcome.output, ctx.output_limit)
    return outcome


def cut_output(text: str, limit: int) -> str:
    """``text`` kept to ``limit`` bytes, head and tail, as the sandbox cuts a command's output."""
    data = text.encode("utf-8", "surrogateescape")
    if len(data) <= limit:
        return text
    half = limit // 2
    marker = f"\n[... output truncated: {len(data) - 2 * half} bytes omitted of {len(data)} ...]\n"
    return (data[:half].decode("utf-8", "replace") + marker + data[len(data) - half:].decode("utf-8", "replace"))


@handles(CreateArgs)
async def _create(sb: Sandbox, args: CreateArgs, ctx: ToolContext) -> ToolOutcome:
    data = args.content.encode("utf-8")
    await sb.write_file(args.path, data)
    return ToolOutcome(output=f"Created {args.path} ({len(data)} bytes).")


@handles(ViewArgs)
async def _view(sb: Sandbox, args: ViewArgs, ctx: ToolContext) -> ToolOutcome:
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


@handles(StrReplaceArgs)
async def _str_replace(sb: Sandbox, args: StrReplaceArgs, ctx: ToolContext) -> ToolOutcome:
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


async def run_tool(sb: Sandbox, args: BaseModel, ctx: ToolContext = ToolContext()) -> ToolOutcome:
    """Run one parsed tool call (not a submitting tool's) in the sandbox, with its model's handler."""
    handler = HANDLERS.get(type(args))
    if handler is None:
        raise ValueError(f"no handler runs tools with arguments {type(args).__name__}")
    try:
        return await handler(sb, args, ctx)
    except PathError as exc:
        return ToolOutcome(output="", failure=classify_path_error(exc))
