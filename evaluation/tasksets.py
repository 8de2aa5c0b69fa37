"""Task files for the training loop: a train / held-out split by repository, and a pass-rate filter.

- `split_tasks`: every repository goes wholly to one side (no repository on both), chosen by a
  seeded hash of its name, so the same file and seed give the same split on any machine and
  adding tasks of a new repository never moves an old one;
- `filter_by_pass_rate`: keep the tasks whose measured pass rate (an evaluation's report.json)
  lies in a range, e.g. strictly between 0 and 1, the tasks whose GRPO groups have a signal.

Records are copied verbatim (the lines of the file), so every field the server reads survives.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

__all__ = ["TaskSetError", "filter_by_pass_rate", "read_task_lines", "repo_of", "split_tasks"]


class TaskSetError(Exception):
    """A task file or report that cannot be split or filtered as asked."""


def read_task_lines(path: str | Path) -> list[tuple[dict[str, Any], str]]:
    """(record, its JSON text) per task of a JSON-list or JSONL task file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        rows = json.loads(text) if text.lstrip().startswith("[") else [json.loads(x) for x in text.splitlines()
                                                                       if x.strip()]
    except (OSError, ValueError) as exc:
        raise TaskSetError(f"cannot read the task file {path}: {exc}") from None
    out = []
    for n, row in enumerate(rows, 1):
        if not isinstance(row, dict) or not isinstance(row.get("instance_id"), str):
            raise TaskSetError(f"{path}: record {n} has no instance_id")
        out.append((row, json.dumps(row)))
    return out


def repo_of(row: dict[str, Any]) -> str:
    """The repository a task belongs to: its `repo`, else its instance id's prefix (`owner__name-N`)."""
    repo = row.get("repo")
    if isinstance(repo, str) and repo:
        return repo
    return row["instance_id"].split("__")[0] if "__" in row["instance_id"] else row["instance_id"].rsplit("-", 1)[0]


def _write(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def split_tasks(tasks: str | Path, held_out: float, seed: int, train_out: str | Path,
                held_out_out: str | Path) -> dict[str, Any]:
    """Split `tasks` into train and held-out files by repository; about `held_out` of the tasks
    (at least one repository) are held out. Returns what went where."""
    if not 0 < held_out < 1:
        raise TaskSetError(f"the held-out share must lie strictly between 0 and 1, not {held_out}")
    rows = read_task_lines(tasks)
    by_repo: dict[str, list[str]] = defaultdict(list)
    for row, line in rows:
        by_repo[repo_of(row)].append(line)
    if len(by_repo) < 2:
        raise TaskSetError(f"{tasks}: all {len(rows)} tasks are of one repository ({next(iter(by_repo), '-')}); "
                           "a split with no repository on both sides needs two or more")
    order = sorted(by_repo, key=lambda r: hashlib.sha256(f"{seed}\0{r}".encode()).hexdigest())
    target = held_out * len(rows)
    held: list[str] = []
    count = 0
    for repo in order:
        if count >= target or len(held) == len(order) - 1:
            break
        held.append(repo)
        count += len(by_repo[repo])
    train = [r for r in order if r not in held]
    _write(Path(train_out), [line for r in sorted(train) for line in by_repo[r]])
    _write(Path(held_out_out), [line for r in sorted(held) for line in by_repo[r]])
    return {"train": {"tasks": len(rows) - count, "repos": sorted(train)},
            "held_out": {"tasks": count, "repos": sorted(held)}, "seed": seed}


def _rates(report: str | Path) -> dict[str, float | None]:
    path = Path(report)
    if path.is_dir():
        path = path / "report.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {iid: row.get("rate") for iid, row in data["tasks"].items()}
    except (OSError, ValueError, KeyError, AttributeError, TypeError) as exc:
        raise TaskSetError(f"{path} is not an evaluation report (report.json with per-task rates): {exc}") from None


def filter_by_pass_rate(tasks: str | Path, report: str | Path, out: str | Path, min_rate: float = 0.0,
                        max_rate: float = 1.0, strict: bool = False, keep_unmeasured: bool = False
                        ) -> dict[str, int]:
    """Write the tasks of `tasks` whose pass rate in `report` (a report.json or its directory) lies
    in [min_rate, max_rate] ((min_rate, max_rate) with `strict`); tasks the report has no rate for
    are dropped unless `keep_unmeasured`. Returns the counts."""
    if not 0 <= min_rate <= max_rate <= 1:
        raise TaskSetError(f"need 0 <= min <= max <= 1 (min={min_rate}, max={max_rate})")
    rates = _rates(report)
    kept, counts = [], {"kept": 0, "below": 0, "above": 0, "unmeasured": 0}
    for row, line in read_task_lines(tasks):
        rate = rates.get(row["instance_id"])
        if rate is None:
            counts["unmeasured"] += 1
            if keep_unmeasured:
                kept.append(line)
            continue
        if rate < min_rate or (strict and rate == min_rate):
            counts["below"] += 1
        elif rate > max_rate or (strict and rate == max_rate):
            counts["above"] += 1
        else:
            kept.append(line)
    counts["kept"] = len(kept)
    _write(Path(out), kept)
    return counts
