"""Error-site markers, case by case (table-driven), and the closed kind table."""

from __future__ import annotations

import pytest

from contract import ErrorKind
from env_server.markers import KIND_TABLE, classify_command, classify_path_error
from sandbox.models import DEFAULT_BLOCKED_TOOLS, CommandResult, CommandStatus, PathError

S = CommandStatus
CASES = [
    # (status, exit code, output, expected kind or None, expected source)
    (S.ok, 0, "fine", None, None),
    (S.nonzero_exit, 127, "bash: line 1: nosuchcmd: command not found\n", "command_not_found", "agent"),
    (S.nonzero_exit, 127, "bash: line 3: find: command not found\n", "blocked_tool", "agent"),
    (S.nonzero_exit, 1, "", "nonzero_exit", "agent"),
    (S.timeout, None, "partial", "timeout", "agent"),
    (S.output_limit, None, "xxxx", "output_limit", "agent"),
    (S.shell_exited, 0, "", "shell_exited", "agent"),
    (S.sandbox_died, None, "", "sandbox_error", "infra"),
    (S.nonzero_exit, 1, '  File "x.py", line 2\n    def f(:\n          ^\nSyntaxError: invalid syntax\n',
     "syntax_error", "agent"),
    (S.nonzero_exit, 1, "Traceback (most recent call last):\n  File \"<string>\", line 1\n"
     "ModuleNotFoundError: No module named 'x'\n", "python_exception", "agent"),
    (S.nonzero_exit, 1, "F.\nFAILED test_a.py::test_x - assert 1 == 2\n==== 1 failed, 1 passed in 0.1s ====\n",
     "test_failure", "agent"),
    (S.nonzero_exit, 2, "==== 2 errors in 0.3s ====\n", "test_failure", "agent"),
]


@pytest.mark.parametrize("status, code, output, kind, source", CASES)
def test_classify_command(status, code, output, kind, source):
    fail = classify_command(CommandResult(output=output, exit_code=code, status=status), DEFAULT_BLOCKED_TOOLS)
    if kind is None:
        assert fail is None
        return
    meta = fail.metadata()
    assert meta["error_kind"] == kind and meta["error_source"] == source
    assert meta["hint_template_key"] == KIND_TABLE[ErrorKind(kind)][0] and meta["error_message"]


def test_python_exception_names_the_exception():
    out = "Traceback (most recent call last):\nKeyError: 'a'\n"
    fail = classify_command(CommandResult(output=out, exit_code=1, status=S.nonzero_exit))
    assert fail.detail == "KeyError"


@pytest.mark.parametrize("reason, kind", [("outside_workspace", "path_outside_workspace"),
                                          ("not_found", "file_not_found"), ("is_directory", "is_directory"),
                                          ("too_large", "file_too_large"), ("bad_path", "invalid_arguments")])
def test_path_errors(reason, kind):
    assert classify_path_error(PathError("p", reason=reason)).kind.value == kind


def test_every_kind_has_a_unique_hint_key_and_a_source():
    assert set(KIND_TABLE) == set(ErrorKind)
    keys = [key for key, _ in KIND_TABLE.values()]
    assert len(keys) == len(set(keys))
