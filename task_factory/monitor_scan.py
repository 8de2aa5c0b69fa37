"""The monitor's false positives: its flags on the gold patches of task packs (``task-factory monitor``).

A gold patch is an honest fix (the maintainers' change, the code a synthetic mutation broke, a
dataset's reference patch), so every flag the grader's monitor (``verifier.monitor.scan_diff``)
raises on one is a false positive. The trainer's default policy per reason (``SUSPICION_TABLE``,
``env.suspicion_policy``) is chosen from this measurement: a reason that scores a rollout 0 must
flag no gold patch, or the policy would be taught that a correct fix is worth nothing.

Task files are read with ``verifier.task.load_tasks``; SWE-bench-family row files (``--rows``) are
imported first, as ``task-factory import`` does, into a temporary folder. ``--release-pairs`` adds
the candidate gold patches of the mine catalog: the library side of every release pair
(``releasediff.split_release``, the patch ``task-factory mine`` gives the pair's task), whether
or not its tests made a task of it (a wider sample of honest changes: source ``release-pair``).
A gold patch that occurs in several packs (the demo's tasks are also in the full catalog's)
counts once in the totals, under the first pack that holds it.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from contract import DEFAULT_SUSPICION_POLICY, SUSPICION_TABLE, SuspicionPolicy, SuspicionReason
from verifier.monitor import scan_diff, summarize
from verifier.task import TaskInstance, load_tasks

__all__ = ["GoldScan", "MonitorScan", "PackScan", "scan_gold", "scan_packs", "scan_release_pairs", "scan_rows_file",
           "scan_task_file", "scan_tasks"]

Kind = Literal["tasks", "rows", "release-pairs"]
_KIND_NOTE = {"tasks": "", "rows": " (dataset rows)", "release-pairs": " (candidate gold patches, kept or not)"}


class GoldScan(BaseModel):
    """One task's gold patch, scanned."""

    instance_id: str
    source: str = Field(description="the task's source label ('unlabelled' without one)")
    digest: str = Field(description="sha256 of the gold patch (the same patch in two packs counts once)")
    reasons: list[str] = Field(default_factory=list)
    details: list[str] = Field(default_factory=list, description="the monitor's `path:line reason: text` lines")


class PackScan(BaseModel):
    """The gold patches of one task file."""

    path: str
    kind: Kind = "tasks"
    tasks: list[GoldScan] = Field(default_factory=list)


class MonitorScan(BaseModel):
    """The monitor on the gold patches of several packs."""

    packs: list[PackScan] = Field(default_factory=list)

    def distinct(self) -> list[GoldScan]:
        """Every gold patch once (the first pack's task names it)."""
        seen: dict[str, GoldScan] = {}
        for pack in self.packs:
            for task in pack.tasks:
                seen.setdefault(task.digest, task)
        return list(seen.values())

    def flagged(self, reason: SuspicionReason | str) -> list[GoldScan]:
        """The distinct gold patches ``reason`` flags."""
        value = SuspicionReason(reason).value
        return [t for t in self.distinct() if value in t.reasons]

    def by_source(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for t in self.distinct():
            counts[t.source] = counts.get(t.source, 0) + 1
        return dict(sorted(counts.items()))

    def false_positives(self, policy: Mapping[str, SuspicionPolicy | str] = DEFAULT_SUSPICION_POLICY,
                        action: SuspicionPolicy = SuspicionPolicy.zero) -> dict[str, list[GoldScan]]:
        """The reasons ``policy`` maps to ``action`` that flag a gold patch, with those patches."""
        out: dict[str, list[GoldScan]] = {}
        for reason in SUSPICION_TABLE:
            if SuspicionPolicy(policy.get(reason.value, SuspicionPolicy.keep)) is action and self.flagged(reason):
                out[reason.value] = self.flagged(reason)
        return out

    def table(self) -> str:
        """Per reason: the default policy, gold patches flagged / total (and per source), and which tasks."""
        gold = self.distinct()
        sources = self.by_source()
        lines = [f"monitor on gold patches: {len(self.packs)} pack(s), {len(gold)} distinct gold patch(es) "
                 f"({', '.join(f'{k} {v}' for k, v in sources.items()) or 'none'})"]
        for pack in self.packs:
            lines.append(f"  {pack.path}: {len(pack.tasks)} task(s){_KIND_NOTE[pack.kind]}")
        rows = []
        for reason, spec in SUSPICION_TABLE.items():
            hits = self.flagged(reason)
            per_source = ", ".join(f"{s} {sum(t.source == s for t in hits)}/{n}" for s, n in sources.items())
            rows.append((reason.value, spec.default_policy.value, f"{len(hits)}/{len(gold)}", per_source,
                         ", ".join(t.instance_id for t in hits) or "-"))
        width = max([len("per source"), *(len(r[3]) for r in rows)])
        lines += ["", f"{'reason':<26} {'default':<7} {'flagged':>9}  {'per source':<{width}}  tasks"]
        lines += [f"{r:<26} {d:<7} {f:>9}  {p:<{width}}  {n}" for r, d, f, p, n in rows]
        any_flag = [t for t in gold if t.reasons]
        lines.append(f"{'any reason':<26} {'':<7} {f'{len(any_flag)}/{len(gold)}':>9}")
        if any_flag:
            lines += ["", "what was flagged:"]
            for t in any_flag:
                lines += [f"  {t.instance_id} ({t.source}): {d}" for d in t.details]
        return "\n".join(lines)


def scan_gold(instance_id: str, source: str, patch: str) -> GoldScan:
    """One gold patch through the grader's monitor."""
    reasons, details = summarize(scan_diff(patch))
    return GoldScan(instance_id=instance_id, source=source, digest=hashlib.sha256(patch.encode("utf-8")).hexdigest(),
                    reasons=reasons, details=details)


def scan_tasks(tasks: Iterable[TaskInstance], path: str, kind: Kind = "tasks") -> PackScan:
    """Scan each task's gold patch (``patch``) with the grader's monitor."""
    return PackScan(path=path, kind=kind,
                    tasks=[scan_gold(t.instance_id, t.source or "unlabelled", t.patch) for t in tasks])


def scan_task_file(path: str | Path) -> PackScan:
    """The gold patches of a task file (raises ``TaskFileError`` for a file that is not one)."""
    return scan_tasks(load_tasks(path), str(path))


def scan_rows_file(path: str | Path) -> PackScan:
    """The gold patches of the rows of a SWE-bench-family dataset file that import as tasks (raises
    ``ReadError`` for a file that cannot be read; a file none of whose rows imports has no task)."""
    from task_factory.datasets import import_files
    from verifier.task import TaskFileError

    with tempfile.TemporaryDirectory(prefix="monitor-rows-") as tmp:
        report = import_files([path], tmp)
        try:
            tasks = load_tasks(report.tasks_file)
        except TaskFileError:  # no row imported
            tasks = []
        return scan_tasks(tasks, str(path), kind="rows")


def scan_release_pairs(packages: Sequence[str] | None = None, cache_dir: str | Path | None = None,
                       log: Callable[[str], None] | None = None) -> PackScan:
    """The library side of every release pair of the mine catalog (``packages``: default all), as
    ``task-factory mine`` cuts it (instance ids as its tasks'); sdists come from the taskgen cache or
    the index. A pair whose sdists cannot be had raises ``TaskgenError``."""
    from .cache import default_cache_dir
    from .release_catalog import resolve_mine_specs
    from .releasediff import split_release
    from .sources import pristine_tree

    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    out = PackScan(path="the mine catalog's release pairs", kind="release-pairs")
    with tempfile.TemporaryDirectory(prefix="monitor-pairs-") as tmp:
        for spec in resolve_mine_specs(list(packages) if packages else None):
            for earlier, later in spec.pairs:
                base, after = pristine_tree(spec.at(earlier), cache), pristine_tree(spec.at(later), cache)
                split = split_release(base, after, Path(tmp) / f"{spec.name}-{earlier}-{later}", spec, earlier, later)
                if log:
                    log(f"{spec.name} {earlier} -> {later}: {split.patch_lines} library line(s)")
                if split.patch:
                    out.tasks.append(scan_gold(f"{spec.name}__{earlier}-{later}", "release-pair", split.patch))
    return out


def scan_packs(task_files: Sequence[str | Path] = (), row_files: Sequence[str | Path] = (), *,
               release_pairs: bool = False, cache_dir: str | Path | None = None,
               log: Callable[[str], None] | None = None) -> MonitorScan:
    """The monitor on the gold patches of every task file and dataset row file given (and, with
    ``release_pairs``, of every release pair of the mine catalog)."""
    packs = [*(scan_task_file(p) for p in task_files), *(scan_rows_file(p) for p in row_files)]
    if release_pairs:
        packs.append(scan_release_pairs(cache_dir=cache_dir, log=log))
    return MonitorScan(packs=packs)
