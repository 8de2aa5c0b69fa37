"""``env-server serve ...`` and ``env-server tasks ...`` (the latter from env_server.taskgen)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path


def _named_tokens(values: list[str] | None, flag: str) -> dict[str, str]:
    """``NAME=TOKEN`` flag values as {name: token}; ValueError (naming no token) when malformed."""
    out: dict[str, str] = {}
    for value in values or []:
        name, sep, token = value.partition("=")
        if not sep or not name or not token:
            raise ValueError(f"{flag} wants NAME=TOKEN (got a value without a name or a token)")
        if name in out:
            raise ValueError(f"{flag}: the name {name!r} is given twice")
        out[name] = token
    return out


def _identities(args: argparse.Namespace) -> dict[str, object]:
    """The token settings of ``serve``: flags, the tokens file and the environment (ValueError if bad)."""
    from .auth import load_tokens_file

    clients: dict[str, str] = {}
    operators: dict[str, str] = {}
    tokens_file = args.tokens or os.environ.get("ENV_SERVER_TOKENS_FILE") or None
    if tokens_file:
        clients, operators = load_tokens_file(Path(tokens_file))
    for table, extra, flag in ((clients, _named_tokens(args.client_token, "--client-token"), "--client-token"),
                               (operators, _named_tokens(args.operator_token, "--operator-token"),
                                "--operator-token")):
        clash = sorted(set(table) & set(extra))
        if clash:
            raise ValueError(f"{flag}: the name {clash[0]!r} is also in the tokens file")
        table.update(extra)
    return {"auth_token": args.auth_token or os.environ.get("ENV_SERVER_TOKEN") or None,
            "client_tokens": clients, "operator_tokens": operators}


def _settings_error(exc: ValueError, validation_error: type) -> str:
    """What is wrong with the settings, without the values given (pydantic prints them by default)."""
    if not isinstance(exc, validation_error):
        return str(exc)
    parts = []
    for err in exc.errors(include_url=False, include_input=False):  # type: ignore[attr-defined]
        loc = ".".join(map(str, err["loc"]))
        msg = err["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn
    from pydantic import ValidationError

    from sandbox.models import Limits, SandboxConfig

    from .app import create_app, uvicorn_config
    from .config import ServerConfig
    from .episode import EpisodeConfig
    from .task import TaskFileError

    try:
        config = ServerConfig(
            tasks_path=args.tasks, data_dir=args.data_dir, max_sessions=args.max_sessions,
            idle_timeout_s=args.idle_timeout, **_identities(args),
            sandbox=SandboxConfig(backend=args.backend, limits=Limits(cpu_policy=args.sandbox_cpu)),
            episode=EpisodeConfig(max_steps=args.max_steps, grade_mode=args.grade_mode, trace_diffs=args.trace_diffs,
                                  trace_fsync=args.fsync))
    except ValueError as exc:  # a pydantic ValidationError too: its message, never the input (a token)
        print(f"env-server: {_settings_error(exc, ValidationError)}", file=sys.stderr)
        return 2
    try:
        app = create_app(config)
    except TaskFileError as exc:
        print(f"env-server: {exc}", file=sys.stderr)
        return 2
    uvicorn.Server(uvicorn_config(app, config, args.host, args.port, args.log_level)).run()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="env-server", description="SWE-style OpenEnv environment server")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the server")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--tasks", type=Path, required=True, help="JSON/JSONL task file")
    serve.add_argument("--backend", choices=["bwrap", "docker"], default="bwrap")
    serve.add_argument("--max-sessions", type=int, default=64)
    serve.add_argument("--sandbox-cpu", choices=["idle", "batch", "normal"], default="idle",
                       help="CPU policy of the sandboxes: 'idle' (default) gives them only CPU time this server "
                            "does not want, so one busy session never slows the others' replies; 'normal' "
                            "when CPU-heavy processes of equal priority share the machine (see docs/deploy.md)")
    serve.add_argument("--data-dir", type=Path, default=Path("data"))
    serve.add_argument("--idle-timeout", type=float, default=600.0, help="seconds before detached sessions close")
    serve.add_argument("--auth-token", default=None,
                       help="one bearer token for everyone (or env ENV_SERVER_TOKEN): an operator named "
                            "'operator', who sees every episode; prefer --tokens to separate clients")
    serve.add_argument("--tokens", type=Path, default=None, metavar="FILE",
                       help="JSON/YAML {clients: {NAME: TOKEN}, operators: {NAME: TOKEN}} (or env "
                            "ENV_SERVER_TOKENS_FILE); a client sees and drives only its own episodes and "
                            "sessions, an operator all of them; TOKEN may be sha256:<hex> of the token")
    serve.add_argument("--client-token", action="append", metavar="NAME=TOKEN",
                       help="a client's token (repeatable; visible in the process list: prefer --tokens)")
    serve.add_argument("--operator-token", action="append", metavar="NAME=TOKEN",
                       help="an operator's token (repeatable; visible in the process list: prefer --tokens)")
    serve.add_argument("--max-steps", type=int, default=100)
    serve.add_argument("--grade-mode", choices=["resolved", "pass_rate"], default="resolved")
    serve.add_argument("--trace-diffs", choices=["all", "edits"], default="all")
    serve.add_argument("--fsync", action="store_true", help="fsync every trace record")
    serve.add_argument("--log-level", default="warning")
    serve.set_defaults(func=_serve)
    try:  # provided by env_server.taskgen (issue 4) when present
        taskgen = importlib.import_module("env_server.taskgen.cli")
    except ImportError:
        taskgen = None
    if taskgen is not None and hasattr(taskgen, "add_subcommands"):
        taskgen.add_subcommands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
