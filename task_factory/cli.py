"""``task-factory build|mine|validate|reverify|monitor|import|make`` (also ``python -m task_factory ...``).

``make SOURCE`` runs any task source of the registry (``task_sources.SOURCES``) with its settings
(``--set KEY=VALUE``); ``build``, ``mine`` and ``import`` are the built-in sources' own commands, their
options turned into the same settings."""

from __future__ import annotations

import argparse
import asyncio
import sys
import textwrap
from pathlib import Path

from contract.extras import missing_extra
from sandbox import BACKENDS, DEFAULT_BACKEND, backend_names

from .build import DEFAULT_TASKS_PER_PACKAGE
from .check import check_choices
from .packages import CATALOG
from .release_catalog import MINE_CATALOG
from .sources import TaskgenError
from .statement import STYLES
from .task_sources import run_command, settings_help, source_class, source_names


def add_task_commands(sub: argparse._SubParsersAction) -> None:
    build = sub.add_parser("build", help=source_class("synthetic-mutation").summary)
    build.add_argument("--out", type=Path, required=True, help="output directory (tasks.jsonl, repos/, envs/)")
    build.add_argument("--packages", nargs="+", default=None, metavar="NAME",
                       help=f"packages to use (default: all of {', '.join(CATALOG)}); commas also separate")
    build.add_argument("--seed", type=int, default=0)
    build.add_argument("--max-tasks", type=int, default=None, help="cap on the total, spread over the packages")
    build.add_argument("--min-tasks", type=int, default=None, help="fail (exit 1) below this many (default 30)")
    build.add_argument("--tasks-per-package", type=int, default=None,
                       help=f"default {DEFAULT_TASKS_PER_PACKAGE} (or max-tasks spread evenly)")
    build.add_argument("--cache-dir", type=Path, default=None,
                       help="downloads, envs and verdicts (default $SWE_OPENENV_TASKGEN_CACHE or ~/.cache)")
    build.add_argument("--statement", choices=STYLES, default="report",
                       help="report: a user's bug report with a reproducer written from the failing assertion "
                            "(default); verbose: the failing test's id, source and error")
    _check_option(build)
    build.add_argument("--quiet", action="store_true")
    build.set_defaults(func=_build)

    mine = sub.add_parser("mine", help=source_class("release-diff").summary)
    mine.add_argument("--out", type=Path, required=True, help="output directory (tasks.jsonl, repos/, envs/)")
    mine.add_argument("--packages", nargs="+", default=None, metavar="NAME",
                      help=f"packages to mine (default: all of {', '.join(MINE_CATALOG)}); commas also separate")
    mine.add_argument("--discover", type=int, default=None, metavar="N",
                      help="instead of the catalog's pinned pairs, the N newest consecutive pairs on the index")
    mine.add_argument("--max-tasks", type=int, default=None, help="stop once this many tasks are kept")
    mine.add_argument("--min-tasks", type=int, default=None, help="fail (exit 1) below this many (default 20)")
    mine.add_argument("--max-patch-lines", type=int, default=None, metavar="N",
                      help="reject pairs whose gold patch changes more lines (default and ceiling 200)")
    _check_option(mine)
    mine.add_argument("--cache-dir", type=Path, default=None,
                      help="downloads, envs and verdicts (default $SWE_OPENENV_TASKGEN_CACHE or ~/.cache)")
    mine.add_argument("--quiet", action="store_true")
    mine.set_defaults(func=_mine)

    validate = sub.add_parser("validate", help="grade every task: gold patch -> 1.0, empty diff -> 0.0")
    validate.add_argument("file", type=Path, help="SWE-bench-format JSON/JSONL task file with local repo_path")
    _one_of(validate, "--backend", backend_names(), default=DEFAULT_BACKEND,
            help=f"the sandbox the verifier grades in (default {DEFAULT_BACKEND})")
    validate.add_argument("--concurrency", type=int, default=2)
    validate.add_argument("--statements", action="store_true",
                          help="also check each synthetic-mutation task's statement: its reproducer fails on the base "
                               "tree and passes with the gold patch, and its first line names the public entry point "
                               "the reproducer calls (host-side, with the task's venv)")
    validate.set_defaults(func=_validate)

    reverify = sub.add_parser("reverify", help="re-grade finished episodes from their traces with the current "
                                               "grader and report every reward that changes")
    reverify.add_argument("--traces", type=Path, required=True, metavar="DIR",
                          help="the server's --data-dir (its traces/ is used) or a folder of <episode_id>.jsonl")
    reverify.add_argument("--tasks", type=Path, required=True, metavar="FILE", help="the task file the server used")
    _one_of(reverify, "--backend", backend_names(), default=DEFAULT_BACKEND,
            help=f"the sandbox the verifier re-grades in (default {DEFAULT_BACKEND})")
    reverify.add_argument("--concurrency", type=int, default=2)
    reverify.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write the report as JSON")
    reverify.add_argument("--fail-on-change", action="store_true", help="exit 1 when any reward changed")
    reverify.set_defaults(func=_reverify)

    monitor = sub.add_parser("monitor", help="scan every task's gold patch with the grader's monitor: per reason, "
                                             "the gold patches it flags (false positives) and which tasks")
    monitor.add_argument("files", nargs="*", type=Path, metavar="FILE", help="task files (JSON/JSONL)")
    monitor.add_argument("--rows", nargs="+", type=Path, default=[], metavar="FILE",
                         help="SWE-bench-family dataset files (as for `import`): the rows that import are scanned")
    monitor.add_argument("--release-pairs", action="store_true",
                         help="also the library side of every release pair of the mine catalog, kept as a task or "
                              "not (the gold patch `mine` cuts for it; sdists from the cache or the index)")
    monitor.add_argument("--cache-dir", type=Path, default=None,
                         help="downloads (default $SWE_OPENENV_TASKGEN_CACHE or ~/.cache)")
    monitor.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write the scan as JSON")
    monitor.add_argument("--check-defaults", action="store_true",
                         help="exit 1 when a reason the trainer scores 0 by default (SUSPICION_TABLE) flags a "
                              "gold patch")
    monitor.set_defaults(func=_monitor)

    from task_factory.datasets.cli import add_import_command

    add_import_command(sub)
    add_make_command(sub)


def _one_of(parser: argparse.ArgumentParser, option: str, names: tuple[str, ...], **kwargs) -> None:
    """``option`` takes one of ``names``; a wrong value is one line naming them (argparse's own error
    prints the usage first), and ``host``, the task factory's removed grader, is named as such."""

    class OneOf(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None) -> None:
            if values not in names:
                gone = (" (there is no host grader: tasks are checked by the verifier in a sandbox)"
                        if values == "host" else "")
                parser.exit(2, f"{parser.prog}: {option_string} {values}: not one of {', '.join(names)}{gone}\n")
            setattr(namespace, self.dest, values)

    parser.add_argument(option, action=OneOf, metavar="{" + ",".join(names) + "}", **kwargs)


def _check_option(parser: argparse.ArgumentParser) -> None:
    _one_of(parser, "--check", check_choices(), default=DEFAULT_BACKEND,
            help="check each task before writing it: the verifier grades its gold patch (1.0) and an empty diff "
                 f"(0.0) in this sandbox (default {DEFAULT_BACKEND}); none: write it unchecked")


def _packages(args: argparse.Namespace) -> list[str] | None:
    """``--packages a b,c`` -> ``[a, b, c]`` (None: the catalog's)."""
    return [p for item in args.packages for p in item.split(",") if p] if args.packages else None


def _progress(args: argparse.Namespace):
    """Progress lines on stderr, unless ``--quiet``."""
    return None if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))


def _build(args: argparse.Namespace) -> int:
    return _run_source("synthetic-mutation", args, dict(
        packages=_packages(args), seed=args.seed, max_tasks=args.max_tasks, min_tasks=args.min_tasks,
        tasks_per_package=args.tasks_per_package, cache_dir=args.cache_dir, statement=args.statement,
        check=args.check))


def _mine(args: argparse.Namespace) -> int:
    return _run_source("release-diff", args, dict(
        packages=_packages(args), discover=args.discover, max_tasks=args.max_tasks, min_tasks=args.min_tasks,
        max_patch_lines=args.max_patch_lines, check=args.check, cache_dir=args.cache_dir))


def _run_source(name: str, args: argparse.Namespace, settings: dict) -> int:
    """A built-in source's own command: its options from the command's arguments, then what ``make`` does."""
    return run_command(name, settings, args.out, command=f"task-factory {args.tasks_command}",
                       log=_progress(args), quiet=args.quiet)


def _make(args: argparse.Namespace) -> int:
    command = f"task-factory make {args.source}"
    try:
        source = source_class(args.source).configure(args.set)
    except ValueError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return 2
    check = getattr(source.options, "check", None)
    needs = BACKENDS[check].needs_extra if check in BACKENDS else None
    problem = missing_extra(f"{command} --set check={check}", *needs) if needs else None
    if problem:
        print(problem, file=sys.stderr)
        return 1
    return run_command(source, {}, args.out, command=command, log=_progress(args), quiet=args.quiet)


def add_make_command(sub: argparse._SubParsersAction) -> None:
    """``task-factory make SOURCE --out DIR --set KEY=VALUE``: one subcommand per registered task source
    (``task_sources.SOURCES``), its settings listed from its options model."""
    make = sub.add_parser("make", help="make tasks with any registered task source: "
                                       "task-factory make SOURCE --out DIR --set KEY=VALUE ...")
    sources = make.add_subparsers(dest="source", required=True, metavar="SOURCE",
                                  title="task sources (each with its settings: task-factory make SOURCE --help)")
    for name in source_names():
        cls = source_class(name)
        also = f" (also: task-factory {cls.command})" if cls.command else ""
        one = sources.add_parser(name, help=cls.summary + also, description=cls.summary + also,
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="settings (--set KEY=VALUE, the value read as YAML):\n" + "\n".join(
                                     textwrap.fill(line, 100, initial_indent="  ", subsequent_indent="      ")
                                     for line in settings_help(cls.options_class)))
        one.add_argument("--out", type=Path, required=True, help="output directory (tasks.jsonl and the report)")
        one.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                         help="a setting of the source (listed below); repeatable")
        one.add_argument("--quiet", action="store_true", help="no progress lines")
        one.set_defaults(func=_make)


def _validate(args: argparse.Namespace) -> int:
    from verifier.task import TaskFileError

    from .validate import validate_file

    try:
        report = asyncio.run(validate_file(args.file, backend=args.backend, concurrency=args.concurrency,
                                            statements=args.statements))
    except TaskFileError as exc:
        print(f"task-factory validate: {exc}", file=sys.stderr)
        return 2
    print(report.table())
    return 0 if report.ok else 1


def _monitor(args: argparse.Namespace) -> int:
    from verifier.task import TaskFileError

    from .datasets import ReadError
    from .monitor_scan import scan_packs

    if not args.files and not args.rows and not args.release_pairs:
        print("task-factory monitor: no task file, --rows file or --release-pairs given", file=sys.stderr)
        return 2
    try:
        scan = scan_packs(args.files, args.rows, release_pairs=args.release_pairs, cache_dir=args.cache_dir)
    except (TaskFileError, ReadError, TaskgenError) as exc:
        print(f"task-factory monitor: {exc}", file=sys.stderr)
        return 2
    print(scan.table())
    if args.json is not None:
        args.json.write_text(scan.model_dump_json(indent=2) + "\n", encoding="utf-8")
    wrong = scan.false_positives()
    if args.check_defaults and wrong:
        for reason, hits in wrong.items():
            print(f"task-factory monitor: {reason} is scored 0 by default but flags {len(hits)} gold patch(es): "
                  f"{', '.join(t.instance_id for t in hits)}", file=sys.stderr)
        return 1
    return 0


def _reverify(args: argparse.Namespace) -> int:
    from verifier.task import TaskFileError

    from .reverify import ReverifyError, reverify

    if args.json is not None and not args.json.parent.is_dir():
        print(f"task-factory reverify: no such folder for --json: {args.json.parent}", file=sys.stderr)
        return 2
    try:
        report = asyncio.run(reverify(args.traces, args.tasks, backend=args.backend, concurrency=args.concurrency))
    except (ReverifyError, TaskFileError) as exc:
        print(f"task-factory reverify: {exc}", file=sys.stderr)
        return 2
    print(report.table())
    if args.json is not None:
        args.json.write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return 1 if args.fail_on_change and report.changed else 0


def build_parser() -> argparse.ArgumentParser:
    sources = "; ".join(f"{n}" + (f" (task-factory {source_class(n).command})" if source_class(n).command else "")
                        for n in source_names())
    parser = argparse.ArgumentParser(prog="task-factory", description=(
        "make task files: synthesize bugs, mine real fixes, import SWE-bench-family rows, validate, re-grade, "
        f"measure the monitor on gold patches. Task sources (task-factory make SOURCE --out DIR --set KEY=VALUE): "
        f"{sources}"))
    add_task_commands(parser.add_subparsers(dest="tasks_command", required=True))
    return parser


def _missing_extra(args: argparse.Namespace) -> str | None:
    """The one line naming the extra this command needs, when it is not installed (None: it can run).
    A backend (``--backend``, ``--check``) may need an extra (its ``needs_extra``: the Docker backend the
    Docker SDK of the ``env`` extra; bwrap none), and Parquet files need pyarrow of the ``datasets`` extra."""
    command = f"task-factory {args.tasks_command}"
    for option in ("backend", "check"):
        name = getattr(args, option, None)
        needs = BACKENDS[name].needs_extra if name in BACKENDS else None
        if needs:
            return missing_extra(f"{command} --{option} {name}", *needs)
    if any(str(f).endswith(".parquet") for f in getattr(args, "files", None) or ()):
        return missing_extra(f"{command} (Parquet)", "datasets", ("pyarrow",))
    return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    problem = _missing_extra(args)
    if problem:
        print(problem, file=sys.stderr)
        return 1
    return int(args.func(args) or 0)
