"""``env-server serve ...`` and ``env-server tasks ...`` (the latter from env_server.taskgen)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from sandbox.models import Limits, SandboxConfig

    from .app import create_app, uvicorn_config
    from .config import ServerConfig
    from .episode import EpisodeConfig
    from .task import TaskFileError

    config = ServerConfig(
        tasks_path=args.tasks, data_dir=args.data_dir, max_sessions=args.max_sessions,
        idle_timeout_s=args.idle_timeout, auth_token=args.auth_token or os.environ.get("ENV_SERVER_TOKEN") or None,
        sandbox=SandboxConfig(backend=args.backend, limits=Limits(cpu_policy=args.sandbox_cpu)),
        episode=EpisodeConfig(max_steps=args.max_steps, grade_mode=args.grade_mode, trace_diffs=args.trace_diffs,
                              trace_fsync=args.fsync))
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
    serve.add_argument("--auth-token", default=None, help="bearer token (or env ENV_SERVER_TOKEN)")
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
