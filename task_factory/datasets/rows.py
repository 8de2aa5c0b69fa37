"""One dataset row being read: the problems found in it (``Issues``) and the typed field readers."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Issues:
    """Problems of one row, as (field, message, severity)."""

    items: list[tuple[str, str, str]] = field(default_factory=list)

    def error(self, where: str, message: str) -> None:
        self.items.append((where, message, "error"))

    def warn(self, where: str, message: str) -> None:
        self.items.append((where, message, "warning"))

    @property
    def ok(self) -> bool:
        return not any(sev == "error" for _, _, sev in self.items)


# ---------------------------------------------------------------- field readers


def text(row: dict[str, Any], key: str, issues: Issues, *, required: bool = True) -> str:
    """A string field; missing/None is an error when required, else ""."""
    value = row.get(key)
    if value is None:
        if required:
            issues.error(key, "missing")
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and key == "version":
        issues.warn(key, f"a number ({value!r}), not a string: read as {str(value)!r} (\"3.10\" would read as 3.1)")
        return str(value)
    if not isinstance(value, str):
        issues.error(key, f"expected a string, got {type(value).__name__}")
        return ""
    if required and not value.strip():
        issues.error(key, "empty")
    return value


def test_ids(row: dict[str, Any], key: str, issues: Issues) -> list[str]:
    """FAIL_TO_PASS / PASS_TO_PASS: a list of strings or a JSON-encoded one."""
    value = row.get(key)
    if value is None:
        issues.error(key, "missing")
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except json.JSONDecodeError as exc:
            issues.error(key, f"not a JSON list of test ids: {exc.msg} (column {exc.colno})")
            return []
    if not isinstance(value, (list, tuple)):
        issues.error(key, f"expected a list of test ids, got {type(value).__name__}")
        return []
    bad = [v for v in value if not isinstance(v, str) or not v.strip()]
    if bad:
        issues.error(key, f"{len(bad)} entr(y/ies) not a non-empty string, e.g. {bad[0]!r}")
        return []
    return list(value)
