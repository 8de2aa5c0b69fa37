"""``task-factory import FILE... --format F --out DIR``: SWE-bench-family rows -> a task file."""

from __future__ import annotations

import argparse
import sys
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
    from .families import ImportOptions
    from .importer import import_files
    from .readers import ReadError

    try:
        report = import_files(args.files, args.out, family=args.format,
                              options=ImportOptions(image_namespace=args.image_namespace, arch=args.arch))
    except (ReadError, OSError) as exc:
        print(f"task-factory import: {exc}", file=sys.stderr)
        return 2
    table = report.table()
    print(table.splitlines()[-1] if args.quiet else table)
    return report.exit_code
