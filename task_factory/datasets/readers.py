"""Read local dataset files into (location, row) pairs: JSONL, JSON (array or object), Parquet.

No hub access: only files on disk. A line of a JSONL file that is not JSON becomes an
:class:`BadRow` (reported as a rejected row); a file that cannot be read at all raises
:class:`ReadError` (the command exits 2).
"""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ReadError(ValueError):
    """An input file could not be read at all."""


@dataclass(frozen=True)
class BadRow:
    """A row that is not a JSON object (or not JSON at all)."""

    message: str


@dataclass
class RowsFile:
    path: Path
    rows: list[tuple[str, dict[str, Any] | BadRow]]
    columns: set[str]


def _plain(value: Any) -> Any:
    """Parquet values as JSON would have them (timestamps -> ISO strings)."""
    if isinstance(value, (_dt.datetime, _dt.date)):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _jsonl(path: Path, text: str) -> list[tuple[str, dict[str, Any] | BadRow]]:
    rows: list[tuple[str, dict[str, Any] | BadRow]] = []
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        where = f"{path.name}:{n}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            rows.append((where, BadRow(f"invalid JSON: {exc.msg} (column {exc.colno})")))
            continue
        rows.append((where, item if isinstance(item, dict) else BadRow(f"not a JSON object: {type(item).__name__}")))
    return rows


def _json(path: Path, text: str) -> list[tuple[str, dict[str, Any] | BadRow]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        if text.lstrip().startswith("{") and "\n" in text.strip():  # JSONL named .json
            return _jsonl(path, text)
        raise ReadError(f"{path}: invalid JSON: {exc.msg} (line {exc.lineno})") from None
    items = data if isinstance(data, list) else [data]
    return [(f"{path.name}[{i}]", item if isinstance(item, dict) else BadRow(f"not a JSON object: "
                                                                              f"{type(item).__name__}"))
            for i, item in enumerate(items)]


def _parquet(path: Path) -> tuple[list[tuple[str, dict[str, Any] | BadRow]], set[str]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ReadError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow)") from None
    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise ReadError(f"{path}: not a readable Parquet file: {exc}") from None
    rows = [(f"{path.name}[{i}]", _plain(item)) for i, item in enumerate(table.to_pylist())]
    return rows, set(table.schema.names)


def read_rows(path: str | Path) -> RowsFile:
    """Every row of one local file; raises ReadError when the file cannot be read."""
    path = Path(path)
    if not path.is_file():
        raise ReadError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        rows, columns = _parquet(path)
        return RowsFile(path, rows, columns)
    if suffix not in (".jsonl", ".json", ".ndjson"):
        raise ReadError(f"{path}: unsupported file type {suffix or '(none)'} (use .jsonl, .json or .parquet)")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ReadError(f"{path}: cannot read: {exc}") from None
    rows = _json(path, text) if suffix == ".json" else _jsonl(path, text)
    columns = {k for _, row in rows if isinstance(row, dict) for k in row}
    return RowsFile(path, rows, columns)
