"""``env-server serve ...``: run the environment server (task production is ``task-factory``).

The console script needs the ``env`` extra: ``main`` checks its key modules before anything imports
them (this module imports the server's settings, and through them starlette, only when a command
runs), so a ``[client]`` install's ``env-server`` says which extra to install instead of a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal, get_args, get_origin

import yaml
from pydantic.fields import FieldInfo

from contract.extras import missing_extra
from contract.overrides import apply_overrides, read_yaml_mapping, set_dotted
from sandbox import backend_names
from sandbox.backends import move_flat_keys

if TYPE_CHECKING:  # imported where used: it needs the env extra (starlette), checked by main first
    from .config import ServerConfig


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
    if not hasattr(args, "tokens"):  # a command that serves nothing
        return {}
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
    from contract.overrides import setting_keys, unknown_key_message

    from .config import ServerConfig

    parts = []
    for err in exc.errors(include_url=False, include_input=False):  # type: ignore[attr-defined]
        loc = ".".join(map(str, err["loc"]))
        if err["type"] == "extra_forbidden":  # a mistyped key: name the one it most likely meant
            parts.append(unknown_key_message(loc, setting_keys(ServerConfig)))
            continue
        msg = err["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)


# Each flag is a shortcut for one setting of ServerConfig (its dotted key); the default and the
# help come from the model, so they are written once. --config FILE and --set KEY=VALUE reach every
# setting; a flag given wins over the file, and --set wins over both.
_FLAGS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("--host", "host", {}),
    ("--port", "port", {"type": int}),
    ("--tasks", "tasks_path", {"type": Path, "metavar": "FILE"}),
    ("--backend", "sandbox.backend", {}),
    ("--max-sessions", "max_sessions", {"type": int}),
    ("--sandbox-cpu", "sandbox.limits.cpu_policy", {}),
    ("--data-dir", "data_dir", {"type": Path}),
    ("--idle-timeout", "idle_timeout_s", {"type": float, "metavar": "SECONDS"}),
    ("--max-steps", "episode.max_steps", {"type": int}),
    ("--grade-mode", "episode.grade_mode", {}),
    ("--trace-diffs", "episode.trace_diffs", {}),
    ("--fsync", "episode.trace_fsync", {"action": "store_const", "const": True}),
    ("--log-level", "log_level", {}),
    ("--warm-pool", "warm_pool", {"type": int, "metavar": "N"}),
    ("--prefetch-ahead", "prefetch_ahead", {"type": int, "metavar": "N"}),
    ("--group-size", "group_size", {"type": int, "metavar": "N"}),
    ("--image-cache-gb", "sandbox.backend.images.cache_gb", {"type": float, "metavar": "GB"}),
    ("--max-pulls", "sandbox.backend.images.max_pulls", {"type": int}),
)


def _checked_config(args: argparse.Namespace, default_backend: str | None = None) -> ServerConfig | None:
    """The settings of ``args``, or None after saying on stderr what is wrong with them."""
    from pydantic import ValidationError

    try:
        return server_config(args, default_backend)
    except ValueError as exc:  # a pydantic ValidationError too: its message, never the input (a token)
        print(f"env-server: {_settings_error(exc, ValidationError)}", file=sys.stderr)
        return None


def _serve(args: argparse.Namespace) -> int:
    from verifier.task import TaskFileError

    config = _checked_config(args)
    if config is None:
        return 2
    if args.print_config:
        print(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False), end="")
        return 0
    if config.tasks_path is None:
        print("env-server: no task file: give --tasks FILE (or tasks_path in --config)", file=sys.stderr)
        return 2
    from .app import create_app

    try:
        app = create_app(config)
    except TaskFileError as exc:
        print(f"env-server: {exc}", file=sys.stderr)
        return 2
    _run(app, config)
    return 0


def ready_line(config: ServerConfig, tasks: list[Any], port: int) -> str:
    """One line that says the server listens, where, on what, and how to reach it."""
    sources = Counter(getattr(t, "source", None) or "unlabelled" for t in tasks)
    mix = ", ".join(f"{n} {src}" for src, n in sources.most_common())
    tokens = config.auth_token or config.client_tokens or config.operator_tokens
    auth = "on" if tokens else "off (open to anyone who can connect)"
    return (f"env-server ready: http://{config.host}:{port} (/ws /mux /mcp /health) | "
            f"{len(tasks)} task{'s' if len(tasks) != 1 else ''} ({mix}) "
            f"from {config.tasks_path} | backend {config.sandbox.backend_name} | auth {auth} | traces in "
            f"{config.data_dir / 'traces'}")


def _run(app: Any, config: ServerConfig) -> None:
    """Serve until stopped; print the ready line once the sockets listen."""
    import uvicorn

    from .app import uvicorn_config

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.started and not self.should_exit:
                port = self.servers[0].sockets[0].getsockname()[1] if self.servers else config.port
                print(ready_line(config, app.state.service.tasks, port), flush=True)

    Server(uvicorn_config(app, config, config.host, config.port, config.log_level)).run()


def server_config(args: argparse.Namespace, default_backend: str | None = None) -> ServerConfig:
    """The settings of ``serve``: defaults, then ``--config``, the flags given, ``--set``, validated.

    Relative paths in a config file are taken relative to the file. ``default_backend``: the backend
    when the settings name none (the image commands': docker). ValueError (a pydantic ValidationError
    too) says what is wrong.
    """
    raw: dict[str, Any] = {}
    if args.config is not None:
        raw = read_yaml_mapping(args.config)
        for key in ("tasks_path", "data_dir"):
            if isinstance(raw.get(key), str) and not Path(raw[key]).is_absolute():
                raw[key] = str(args.config.parent / raw[key])
        _backend_section(raw, lambda: None)
        sandbox = raw.get("sandbox")
        if isinstance(sandbox, dict) and "backend" in sandbox:  # the file's flat docker keys of old: into its section
            try:
                raw["sandbox"] = move_flat_keys(sandbox)
            except ValueError as exc:
                raise ValueError(f"sandbox: {exc}") from None
    for flag, key, _ in _FLAGS:
        value = getattr(args, _dest(flag), None)  # commands other than serve take some of the flags
        if value is not None:
            _backend_section(raw, lambda: set_dotted(raw, key, value))
    for item in args.overrides:
        _backend_section(raw, lambda: apply_overrides(raw, [item]))
    sandbox = raw.setdefault("sandbox", {}) if default_backend else None
    if isinstance(sandbox, dict) and isinstance(sandbox.setdefault("backend", {}), dict):
        sandbox["backend"].setdefault("type", default_backend)
    for key, value in _identities(args).items():
        if value:
            raw[key] = value
    from .config import ServerConfig

    return ServerConfig.model_validate(raw)


def _backend_section(raw: dict[str, Any], change: Callable[[], None]) -> None:
    """Apply ``change`` (the file read, a flag, a ``--set``) to ``raw`` where a backend named bare is its
    section (``{"type": name}``), so that a key below it reaches into it (``--backend docker --set
    sandbox.backend.url=...``): naming the backend the section already is (or a section with no type
    yet) keeps its settings, naming another starts from that backend's defaults."""
    sandbox = raw.get("sandbox")
    before = sandbox.get("backend") if isinstance(sandbox, dict) else None
    change()
    sandbox = raw.get("sandbox")
    if isinstance(sandbox, dict) and isinstance(sandbox.get("backend"), str):
        name = sandbox["backend"]
        keep = isinstance(before, dict) and before.get("type", name) == name
        sandbox["backend"] = {**before, "type": name} if keep else {"type": name}


def _dest(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


def _setting(key: str) -> FieldInfo:
    """The model field a dotted key names (in a backend's section: the backend that has it)."""
    from .config import ServerConfig

    model: Any = ServerConfig
    *parents, leaf = key.split(".")
    for part in parents:
        model = _holder(model, part).model_fields[part].annotation
    return _holder(model, leaf).model_fields[leaf]


def _holder(model: Any, name: str) -> Any:
    """``model``, or the variant of it (``setting_variants``: a backend's config) that has the field ``name``."""
    variants = getattr(model, "setting_variants", None)
    return next(m for m in (model, *(variants() if variants else ())) if name in m.model_fields)


def _default(defaults: ServerConfig, key: str) -> Any:
    value: Any = defaults
    try:
        for part in key.split("."):
            value = getattr(value, part)
    except AttributeError:  # a setting of a backend other than the default one: its own default
        value = _setting(key).get_default(call_default_factory=True)
    return value.value if isinstance(value, Enum) else value


def _add_flags(serve: argparse.ArgumentParser, only: tuple[str, ...] | None = None) -> None:
    from .config import ServerConfig

    defaults = ServerConfig()
    for flag, key, extra in _FLAGS:
        if only is not None and flag not in only:
            continue
        field = _setting(key)
        kwargs = dict(extra)
        choices = get_args(field.annotation) if get_origin(field.annotation) is Literal else None
        text, default = (field.description or "").rstrip("."), _default(defaults, key)
        if key == "sandbox.backend":  # a name: that backend with its defaults (its settings: sandbox.backend.*)
            choices, default = backend_names(), defaults.sandbox.backend_name
            text = "the sandbox backend (its own settings: --set sandbox.backend.KEY=VALUE)"
        if choices and "action" not in kwargs:
            kwargs["choices"] = list(choices)
        where = f"default: {default}; setting {key}"
        kwargs["help"] = f"{text} ({where})" if text else where
        serve.add_argument(flag, default=None, **kwargs)


def _tasks_moved(args: argparse.Namespace) -> int:
    rest = " ".join(args.rest) or "build|mine|validate|reverify|import ..."
    print(f"env-server tasks: task production is its own command now: task-factory {rest}", file=sys.stderr)
    return 2


def _add_settings(parser: argparse.ArgumentParser) -> None:
    """--config FILE and --set KEY=VALUE: every setting of ServerConfig."""
    parser.add_argument("--config", type=Path, default=None, metavar="FILE",
                        help="server settings (YAML: the keys of --print-config); flags and --set override it")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                        help="one setting by its dotted key, e.g. episode.max_steps=50 or "
                             "sandbox.limits.memory_mb=2048 (repeatable; the value is read as YAML)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="env-server", description="SWE-style OpenEnv environment server")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the server")
    _add_settings(serve)
    serve.add_argument("--print-config", action="store_true",
                       help="print the resolved settings as YAML (tokens hidden) and exit")
    _add_flags(serve)
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
    serve.set_defaults(func=_serve)
    from .image_commands import add_image_commands

    add_image_commands(sub, _add_settings, _add_flags, lambda args: _checked_config(args, default_backend="docker"))
    moved = sub.add_parser("tasks", help="moved: task production is its own command, task-factory")
    moved.add_argument("rest", nargs=argparse.REMAINDER)
    moved.set_defaults(func=_tasks_moved)
    return parser


def main(argv: list[str] | None = None) -> int:
    problem = missing_extra("env-server", "env")  # before anything imports the server (or --help builds it)
    if problem:
        print(problem, file=sys.stderr)
        return 1
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
