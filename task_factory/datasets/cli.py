"""``task-factory import FILE... --format F --out DIR``: SWE-bench-family rows -> a task file."""

from __future__ import annotations

import argparse
from pathlib import Path

from .report import FAMILIES


def add_import_command(sub: argparse._SubParsersAction) -> None:
    """Register ``import`` on the ``tasks`` subcommands."""
    imp = sub.add_parser("import", help="import SWE-bench-family dataset rows (local JSONL/JSON/Parquet) as tasks")
    imp.add_argument("files", nargs="+", type=Path, metavar="FILE", help=".jsonl, .json or .parquet file(s)")
    imp.add_argument("--format", choices=[*FAMILIES, "auto"], default="auto",
                     help="dataset family of every file (default: detected per file from its columns)")
    imp.add_argument("--out", type=Path, required=True, metavar="DIR",
                     help="output directory (tasks.jsonl, import_report.json)")
    imp.add_argument("--image-namespace", default=None, metavar="NS",
                     help="registry namespace of derived image names (default per family: swebench, "
                          "xingyaoww, swerebench); a row's own image is kept")
    imp.add_argument("--arch", default="x86_64", help="architecture part of derived image names")
    imp.add_argument("--quiet", action="store_true", help="print only the summary line")
    imp.set_defaults(func=_import)


def _import(args: argparse.Namespace) -> int:
    """The ``swe-bench`` task source (``importer.DatasetSource``) with this command's options."""
    from ..task_sources import run_command

    return run_command("swe-bench", dict(files=args.files, format=args.format, image_namespace=args.image_namespace,
                                         arch=args.arch), args.out, command="task-factory import", quiet=args.quiet)
