"""Error-site markers: classify a failed tool call into a closed set of kinds.

Each :class:`ErrorKind` has one stable ``hint_template_key`` (what a trainer's
hint generator dispatches on) and one ``error_source`` (agent / env / infra,
so infrastructure failures can be dropped instead of scored). Successful calls
carry no markers.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from pydantic import BaseModel

from contract import ERROR_KIND_TABLE, ErrorKind, ErrorSource
from sandbox.models import CommandResult, CommandStatus, PathError

#: kind -> (hint_template_key, error_source): the contract's table (contract/errors.py).
KIND_TABLE: dict[ErrorKind, tuple[str, ErrorSource]] = {
    kind: (spec.hint_template_key, spec.error_source) for kind, spec in ERROR_KIND_TABLE.items()
}

_PATH_REASONS = {
    "outside_workspace": ErrorKind.path_outside_workspace,
    "not_found": ErrorKind.file_not_found,
    "is_directory": ErrorKind.is_directory,
    "too_large": ErrorKind.file_too_large,
}
_STATUS_KINDS = {
    CommandStatus.timeout: ErrorKind.timeout,
    CommandStatus.output_limit: ErrorKind.output_limit,
    CommandStatus.shell_exited: ErrorKind.shell_exited,
    CommandStatus.sandbox_died: ErrorKind.sandbox_error,
}
_NOT_FOUND = re.compile(r"(?:^|\n)(?:bash: )?(?:line \d+: )?([^\s:]+): (?:command )?not found")
_SYNTAX = re.compile(r"^\s*(SyntaxError|IndentationError|TabError)\b", re.M)
_PYTEST_FAILED = re.compile(r"^(?:FAILED |ERROR )|^=+ .*\b\d+ (?:failed|errors?)\b", re.M)
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning))\b", re.M)


class ToolFailure(BaseModel):
    """One classified failure; ``metadata()`` gives the observation's markers."""

    kind: ErrorKind
    message: str
    detail: str | None = None

    def metadata(self) -> dict[str, Any]:
        key, source = KIND_TABLE[self.kind]
        out: dict[str, Any] = {"error_kind": self.kind.value, "hint_template_key": key,
                               "error_source": source.value, "error_message": self.message}
        if self.detail:
            out["error_detail"] = self.detail
        return out


def classify_command(result: CommandResult, blocked_tools: Iterable[str] = ()) -> ToolFailure | None:
    """Classify a shell command's result; ``None`` when it succeeded."""
    if result.status is CommandStatus.ok:
        return None
    if result.status in _STATUS_KINDS:
        kind = _STATUS_KINDS[result.status]
        return ToolFailure(kind=kind, message=f"command ended with status {result.status.value}")
    text = result.output
    code = result.exit_code
    missing = _NOT_FOUND.search(text)
    if code == 127 or missing:
        name = missing.group(1) if missing else None
        if name is not None and name in set(blocked_tools):
            return ToolFailure(kind=ErrorKind.blocked_tool, detail=name,
                               message=f"{name} is not available in this environment")
        return ToolFailure(kind=ErrorKind.command_not_found, detail=name,
                           message=f"command not found: {name or '?'}")
    syntax = _SYNTAX.search(text)
    if syntax:
        return ToolFailure(kind=ErrorKind.syntax_error, detail=syntax.group(1),
                           message=f"{syntax.group(1)} (exit code {code})")
    if _PYTEST_FAILED.search(text):
        return ToolFailure(kind=ErrorKind.test_failure, message=f"tests failed (exit code {code})")
    if "Traceback (most recent call last):" in text:
        exc = _EXCEPTION.findall(text)
        name = exc[-1] if exc else None
        return ToolFailure(kind=ErrorKind.python_exception, detail=name,
                           message=f"python raised {name or 'an exception'} (exit code {code})")
    return ToolFailure(kind=ErrorKind.nonzero_exit, message=f"exit code {code}")


def classify_path_error(exc: PathError) -> ToolFailure:
    kind = _PATH_REASONS.get(exc.reason, ErrorKind.invalid_arguments)
    return ToolFailure(kind=kind, message=str(exc))


def failure(kind: ErrorKind, message: str, detail: str | None = None) -> ToolFailure:
    return ToolFailure(kind=kind, message=message, detail=detail)
