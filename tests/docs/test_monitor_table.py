"""docs/grading.md's table of monitor reasons is the contract's `SUSPICION_TABLE`: the same reasons in
the same order, each with what it flags and the trainer's default policy (`env.suspicion_policy`)."""

from __future__ import annotations

import re
from pathlib import Path

from contract import SUSPICION_TABLE

GRADING = Path(__file__).resolve().parents[2] / "docs" / "grading.md"


HEADER = "| reason | what it flags | trainer default | gold patches flagged |"


def monitor_rows() -> list[list[str]]:
    """The rows of the table under HEADER in the section "The monitor"."""
    section = GRADING.read_text(encoding="utf-8").split("## The monitor", 1)[1].split("\n## ", 1)[0]
    table = section.split(HEADER + "\n", 1)[1].split("\n\n", 1)[0]
    return [[cell.strip() for cell in line.strip().split("|")[1:-1]] for line in table.splitlines()[1:]]


def test_the_docs_table_is_the_contract_table() -> None:
    rows = monitor_rows()
    assert [r[0] for r in rows] == [f"`{reason.value}`" for reason in SUSPICION_TABLE]
    for row, (reason, spec) in zip(rows, SUSPICION_TABLE.items()):
        assert row[1] == spec.flags, reason
        assert row[2] == f"`{spec.default_policy.value}`", reason
        assert re.fullmatch(r"\d+/\d+", row[3]), f"{reason}: gold patches flagged / total, measured: {row[3]!r}"
