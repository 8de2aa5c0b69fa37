"""Canonical forms of tool-call actions, so that equivalent actions compare equal."""

from __future__ import annotations

import json
import posixpath
import shlex
from typing import Any

from pydantic import BaseModel, ConfigDict

from trainer_client.pair_records import ToolCall


class CanonicalizerConfig(BaseModel):
    """Which argument keys hold shell commands and which hold paths."""

    model_config = ConfigDict(extra="forbid")

    command_keys: frozenset[str] = frozenset({"command", "cmd"})
    path_keys: frozenset[str] = frozenset({"path", "file_path", "filename", "file"})
    workspace_root: str = "/workspace"
    """Absolute paths under this root compare equal to their relative form."""


def normalize_command(cmd: str) -> str:
    """Shell-token normalization, line by line: `ls   -la  x` == `ls -la x`, `a&&b` == `a && b`.

    Quoting is kept significant (`echo "a b"` != `echo a b`); lines that do not tokenize
    (unbalanced quotes, heredoc bodies) fall back to whitespace collapsing.
    """
    out = []
    for line in cmd.replace("\r\n", "\n").split("\n"):
        line = line.strip()
        if not line:
            continue
        try:
            lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            lexer.commenters = ""
            tokens = list(lexer)
            out.append(" ".join(shlex.quote(tok) if _needs_quote(tok) else tok for tok in tokens))
        except ValueError:
            out.append(" ".join(line.split()))
    return "\n".join(out).rstrip(";").rstrip()


def _needs_quote(tok: str) -> bool:
    return tok != shlex.quote(tok) and not set(tok) <= set("();<>|&")


def normalize_path(path: str, workspace_root: str = "/workspace") -> str:
    """`./a//b/../c.py`, `a/c.py` and `/workspace/a/c.py` all become `a/c.py`."""
    p = path.strip().replace("\\", "/")
    if not p:
        return p
    p = posixpath.normpath(p)
    root = workspace_root.rstrip("/")
    if p == root:
        return "."
    if p.startswith(root + "/"):
        p = p[len(root) + 1 :]
    return p


def _normalize_value(key: str, value: Any, cfg: CanonicalizerConfig) -> Any:
    if isinstance(value, str):
        if key in cfg.command_keys:
            return normalize_command(value)
        if key in cfg.path_keys:
            return normalize_path(value, cfg.workspace_root)
        return value.replace("\r\n", "\n")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_normalize_value(key, v, cfg) for v in value]
    if isinstance(value, dict):
        return _normalize_args(value, cfg)
    return value


def _normalize_args(args: dict[str, Any], cfg: CanonicalizerConfig) -> dict[str, Any]:
    return {k: _normalize_value(k, v, cfg) for k, v in args.items() if v is not None}


def canonical_key(action: ToolCall, cfg: CanonicalizerConfig | None = None) -> str:
    """A string equal for equivalent actions: tool name plus normalized, key-sorted arguments."""
    cfg = cfg or CanonicalizerConfig()
    args = _normalize_args(action.arguments, cfg)
    return action.tool_name.strip().lower() + " " + json.dumps(
        args, sort_keys=True, ensure_ascii=False, separators=(",", ":")
    )
