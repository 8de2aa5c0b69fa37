"""``mine_tasks``: real historical fixes (``source: release-diff``) from consecutive releases on the index.

Per release pair (earlier, later) of a package: both sdists are unpacked; the
earlier tree is the task's base, the later release's library changes are the
gold ``patch`` and its test changes the hidden ``test_patch`` (releasediff.py);
the problem statement is the later release's changelog section, the
maintainers' own words (changelog.py). The package's suite then runs, without
network, twice (in collection order, then reversed) on base + test_patch and
twice with the patch too. FAIL_TO_PASS: tests failing in both runs without the
patch and passing in both with it; PASS_TO_PASS: tests of the touched test files
passing in all four. The chosen tests then run alone as the grader runs them,
and the verifier checks the written task (``check.py``: gold -> 1.0, empty -> 0.0,
in a sandbox). Rejected pairs keep their reason. Every verdict is cached by
content (``verdicts.py``), so a rebuild only replays git work.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pydantic import Field

from sandbox import DEFAULT_BACKEND
from verifier.task import TaskRecord

from . import gitrepo
from .cache import claim_slot, default_cache_dir
from .changelog import ChangelogSection, find_section
from .check import NO_CHECK, check_record
from .envs import base_python, cached_env, install_env, requirements
from .models import (
    MinePackageReport,
    MineProvenance,
    MineReport,
    MineSpec,
    PairReport,
    PairVerdict,
    ReleaseSplit,
    RunResult,
)
from .release_catalog import MINE_CATALOG, resolve_mine_specs
from .releasediff import split_release, ungradable
from .releases import consecutive_pairs, list_versions
from .runner import PytestRunner
from .sources import TaskgenError, download_sdist, pristine_tree
from .task_sources import CheckedOptions, TaskSource, task_id
from .verdicts import VerdictCache, digest, safe_nodeid

Log = Callable[[str], None]

DEFAULT_MIN_TASKS = 20
MAX_PATCH_LINES = 200
MAX_PATCH_FILES = 6
MAX_TEST_PATCH_LINES = 2500
MAX_FAIL_TO_PASS = 60
MAX_PASS_TO_PASS = 150
RUN_TIMEOUT_S = 600.0
# Bump when the same inputs would give different tasks (statements, ids, selection, the check).
# (Cached verdicts have their own version: verdicts.VERDICT_VERSION.)
MINER_VERSION = "3"

REASONS = ("sdist_unusable", "binary_change", "no_test_change", "no_library_change", "too_large",
           "patch_not_gradable", "no_statement", "test_patch_does_not_apply", "patch_does_not_apply",
           "timeout", "no_fail_to_pass", "flaky", "too_many_fail_to_pass", "gold_fails", "statement_leaks",
           "check_failed")


class Rejected(Exception):
    """A pair that makes no task: ``reason`` (one of REASONS) and a human detail."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail = reason, detail


def mine_tasks(out_dir: str | Path, packages: list[str | MineSpec] | None = None, *, discover: int | None = None,
               max_tasks: int | None = None, min_tasks: int | None = None, check: str = DEFAULT_BACKEND,
               max_patch_lines: int | None = None, cache_dir: str | Path | None = None,
               log: Log | None = None) -> MineReport:
    """Mine tasks into ``out_dir`` (tasks.jsonl, repos/, envs/, build_report.json).

    ``packages``: names of release_catalog.MINE_CATALOG (default: all) or MineSpec
    entries, each with its pinned pairs; ``discover`` instead takes that many of the
    newest consecutive pairs from the index (patch releases first; not reproducible
    over time). ``max_tasks`` stops
    the build once that many tasks are kept; ``min_tasks`` (default 20, or ``max_tasks``
    when smaller) decides ``report.ok``; ``max_patch_lines`` lowers the size limit
    of the gold patch (default MAX_PATCH_LINES); ``check``: the sandbox backend in which the verifier
    checks each task before it is written (gold 1.0, empty 0.0; ``check_failed`` otherwise), or ``none``.
    """
    start = time.monotonic()
    out = Path(out_dir).resolve()
    cache = Path(cache_dir).resolve() if cache_dir else default_cache_dir()
    specs = [p if isinstance(p, MineSpec) else resolve_mine_specs([p])[0] for p in packages] if packages \
        else resolve_mine_specs(None)
    say = log or (lambda _msg: None)
    out.mkdir(parents=True, exist_ok=True)
    tasks: list[TaskRecord] = []
    provenance: list[MineProvenance] = []
    package_reports: list[MinePackageReport] = []
    pair_reports: list[PairReport] = []
    runs = 0
    for spec in specs:
        if max_tasks is not None and len(tasks) >= max_tasks:
            break
        t0 = time.monotonic()
        report = MinePackageReport(package=spec.name)
        package_reports.append(report)
        try:
            pairs = consecutive_pairs(list_versions(spec.name), discover) if discover else list(spec.pairs)
            miner = _PackageMiner(spec, out, cache, check, say, max_patch_lines)
            prefetch(spec, pairs, cache)
        except TaskgenError as exc:
            report.rejected["error"] = 1
            say(f"[{spec.name}] error: {exc}")
            continue
        for earlier, later in pairs:
            if max_tasks is not None and len(tasks) >= max_tasks:
                break
            row = miner.mine(earlier, later)
            pair_reports.append(row.report)
            report.pairs_tried += 1
            if row.task is not None and row.provenance is not None:
                tasks.append(row.task)
                provenance.append(row.provenance)
                report.tasks += 1
            else:
                reason = row.report.reason or "error"
                report.rejected[reason] = report.rejected.get(reason, 0) + 1
        runs += miner.runner.runs
        report.duration_s = round(time.monotonic() - t0, 2)
        say(f"[{spec.name}] {report.tasks} task(s) from {report.pairs_tried} pair(s); rejected {report.rejected}")

    tasks_file = out / "tasks.jsonl"
    tmp = tasks_file.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(t.model_dump_json(exclude_none=True) + "\n" for t in tasks))
    tmp.replace(tasks_file)
    result = MineReport(miner_version=MINER_VERSION, out_dir=str(out), tasks_file=str(tasks_file),
                        n_tasks=len(tasks), min_tasks=min(DEFAULT_MIN_TASKS, max_tasks or DEFAULT_MIN_TASKS)
                        if min_tasks is None else min_tasks,
                        check=check, packages=package_reports, pairs=pair_reports, provenance=provenance,
                        duration_s=round(time.monotonic() - start, 2), pytest_runs=runs)
    (out / "build_report.json").write_text(result.model_dump_json(indent=2) + "\n")
    return result


class _Row:
    def __init__(self, report: PairReport, task: TaskRecord | None = None,
                 provenance: MineProvenance | None = None) -> None:
        self.report, self.task, self.provenance = report, task, provenance


class _PackageMiner:
    """Mines the pairs of one package: one test venv, one runner, one cache folder."""

    def __init__(self, spec: MineSpec, out: Path, cache: Path, check: str, say: Log,
                 max_patch_lines: int | None = None) -> None:
        self.spec, self.out, self.cache, self.check, self.say = spec, out, cache, check, say
        self.max_patch_lines = MAX_PATCH_LINES if max_patch_lines is None else max_patch_lines
        env_spec = spec.at("tests")
        reqs = requirements(env_spec)
        names = {re.split(r"[<>=!~ \[;]", r, maxsplit=1)[0].lower().replace("_", "-") for r in reqs}
        if spec.name.lower().replace("_", "-") in names:
            raise TaskgenError(f"{spec.name} is among its own test requirements: its venv would hold the fixed code")
        env = cached_env(env_spec, cache)
        self.env_rel = f"envs/{spec.name}"
        self.env_ready = False
        self.runner = PytestRunner(env, cache / "plugin", spec.import_root, spec.test_paths, offline=True,
                                   grader_ini=True, keep_going=True)
        self.verdicts = VerdictCache(cache, "release-diff", spec.name, *reqs, env.name, base_python())

    def log(self, msg: str) -> None:
        self.say(f"[{self.spec.name}] {msg}")

    def mine(self, earlier: str, later: str) -> _Row:
        t0 = time.monotonic()
        report = PairReport(package=self.spec.name, from_version=earlier, to_version=later)
        try:
            task, prov = self._mine(earlier, later, report)
        except Rejected as exc:
            report.reason, report.detail = exc.reason, exc.detail[:500]
            self.log(f"{earlier} -> {later}: rejected, {exc}"[:300])
            task = prov = None
        except TaskgenError as exc:
            report.reason, report.detail = "error", str(exc)[:500]
            self.log(f"{earlier} -> {later}: error, {exc}"[:300])
            task = prov = None
        report.duration_s = round(time.monotonic() - t0, 2)
        return _Row(report, task, prov)

    # -- one pair --------------------------------------------------------------------------
    def _mine(self, earlier: str, later: str, report: PairReport) -> tuple[TaskRecord, MineProvenance]:
        spec = self.spec
        try:
            base_tree = pristine_tree(spec.at(earlier), self.cache)
            later_tree = pristine_tree(spec.at(later), self.cache)
        except TaskgenError as exc:
            raise Rejected("sdist_unusable", str(exc)) from None
        with claim_slot(self.cache / "mine-work", f"{spec.name}-{earlier}-{later}") as work:  # this run's own
            split = split_release(base_tree, later_tree, work, spec, earlier, later)
            self.screen(split)
            section = find_section(later_tree, later)
            if section is None:
                raise Rejected("no_statement", f"no changelog section for {later} in its sdist")
            verdict = self.verdict(work, split)
        if not verdict.accepted:
            raise Rejected(verdict.reason, verdict.detail)
        report.fail_to_pass, report.pass_to_pass = len(verdict.fail_to_pass), len(verdict.pass_to_pass)
        instance_id = task_id(spec.name, earlier, later)
        statement = release_statement(spec.name, earlier, later, section)
        found = statement_leaks(statement, verdict.fail_to_pass + verdict.pass_to_pass, split)
        if found:
            raise Rejected("statement_leaks", "; ".join(found))
        repo_rel = f"repos/{spec.name}-{earlier}"
        self.write_repo(base_tree, self.out / repo_rel, split.base_commit,
                        f"Import {spec.name} {earlier} from its sdist")
        self.write_env()
        record = TaskRecord(
            instance_id=instance_id, source="release-diff", repo=f"pypi/{spec.name}", base_commit=split.base_commit,
            problem_statement=statement, patch=split.patch, test_patch=split.test_patch,
            FAIL_TO_PASS=verdict.fail_to_pass, PASS_TO_PASS=verdict.pass_to_pass, version=earlier,
            environment_setup_commit=split.base_commit, repo_path=repo_rel, python_env=self.env_rel,
        )
        self.final_check(record)
        report.instance_id = instance_id
        self.log(f"task {instance_id}: {len(verdict.fail_to_pass)} F2P, {len(verdict.pass_to_pass)} P2P, "
                 f"{split.patch_lines} patch line(s)")
        return record, MineProvenance(
            instance_id=instance_id, package=spec.name, from_version=earlier, to_version=later,
            changelog_file=section.file, changelog_heading=section.heading, patch_files=split.patch_files,
            test_files=split.test_files, patch_lines=split.patch_lines, unstable_tests=verdict.unstable)

    def screen(self, split: ReleaseSplit) -> None:
        """Reject pairs whose change cannot make a task, before running anything."""
        if split.binary:
            raise Rejected("binary_change", ", ".join(split.binary[:5]))
        if not split.test_files:
            raise Rejected("no_test_change", "the release changes no test")
        if not split.patch_files:
            raise Rejected("no_library_change", "the release changes no library code")
        limit = min(self.max_patch_lines, MAX_PATCH_LINES)
        if (split.patch_lines > limit or len(split.patch_files) > MAX_PATCH_FILES
                or split.test_patch_lines > MAX_TEST_PATCH_LINES):
            raise Rejected("too_large", f"patch {split.patch_lines} line(s) in {len(split.patch_files)} file(s), "
                                        f"tests {split.test_patch_lines} line(s); limits {limit} "
                                        f"in {MAX_PATCH_FILES}, {MAX_TEST_PATCH_LINES}")
        dropped = ungradable(split)
        if dropped:
            raise Rejected("patch_not_gradable", ", ".join(dropped[:5]))

    # -- verdicts --------------------------------------------------------------------------
    def verdict(self, work: Path, split: ReleaseSplit) -> PairVerdict:
        key = "pair-" + digest(split.base_commit, split.later_commit)
        cached = self._load(key)
        if cached is not None:
            return PairVerdict(**cached)
        self.log(f"running the suite: 2x without, 2x with the patch ({split.patch_lines} patch line(s))")
        try:
            verdict = self._judge(work, split)
        finally:
            _reset(work, split.base_commit)
        self._store(key, verdict.model_dump())
        return verdict

    def _judge(self, work: Path, split: ReleaseSplit) -> PairVerdict:
        _reset(work, split.base_commit)
        if not _apply(work, split.test_patch):
            return PairVerdict(accepted=False, reason="test_patch_does_not_apply")
        first = self.runner.run(work, timeout_s=RUN_TIMEOUT_S)
        limit = max(60.0, 5 * first.duration_s)  # a later run that takes far longer hangs
        without = [first, self.runner.run(work, timeout_s=limit, reverse=True)]
        if not _apply(work, split.patch):
            return PairVerdict(accepted=False, reason="patch_does_not_apply")
        with_ = [self.runner.run(work, timeout_s=limit, reverse=r) for r in (False, True)]
        if any(r.timed_out for r in without + with_):
            return PairVerdict(accepted=False, reason="timeout",
                               detail=f"a run took over {RUN_TIMEOUT_S if first.timed_out else limit:.0f}s")
        touched = {f for f in split.test_files if f.endswith(".py")}
        everything = set().union(*(r.tests for r in without + with_)) - {k for k in _keys(without + with_)
                                                                          if k.startswith("<collect>:")}
        candidates = sorted(t for t in everything if safe_nodeid(t))
        f2p = [t for t in candidates if all(_failed(r, t) for r in without) and all(_passed(r, t) for r in with_)]
        p2p = [t for t in candidates if all(_passed(r, t) for r in without + with_)
               and t.split("::", 1)[0] in touched | {x.split("::", 1)[0] for x in f2p}]
        unstable = [t for t in candidates if t.split("::", 1)[0] in touched
                    and (_outcome(without[0], t) != _outcome(without[1], t)
                         or _outcome(with_[0], t) != _outcome(with_[1], t))]
        if not f2p:
            flip = [t for t in unstable if any(_failed(r, t) for r in without) and any(_passed(r, t) for r in with_)]
            if flip:
                return PairVerdict(accepted=False, reason="flaky", detail=f"unstable: {flip[:5]}", unstable=unstable)
            broken = sorted(k[len("<collect>:"):] for k in with_[0].tests if k.startswith("<collect>:"))
            return PairVerdict(accepted=False, reason="no_fail_to_pass", unstable=unstable,
                               detail=f"{len(candidates)} test(s) ran; none fails without the patch and passes "
                                      f"with it" + (f"; with it, collection fails in {broken[:3]}" if broken else ""))
        passing = sum(all(_passed(r, t) for r in with_) for t in candidates)
        if len(f2p) > max(MAX_FAIL_TO_PASS, passing // 2):
            return PairVerdict(accepted=False, reason="too_many_fail_to_pass",
                               detail=f"{len(f2p)} of {passing} passing test(s) fail without the patch")
        p2p = _spread(p2p, MAX_PASS_TO_PASS)
        # The chosen tests alone, as the grader runs them: with the patch, then without.
        sel_with = self.runner.run(work, f2p + p2p, timeout_s=limit)
        _reset(work, split.base_commit)
        _apply(work, split.test_patch)
        sel_without = self.runner.run(work, f2p + p2p, timeout_s=limit)
        alone = [t for t in f2p if _failed(sel_without, t) and _passed(sel_with, t)]
        p2p = [t for t in p2p if _passed(sel_without, t) and _passed(sel_with, t)]
        dropped = sorted(set(f2p) - set(alone))
        if not alone:
            return PairVerdict(accepted=False, reason="gold_fails" if not all(_passed(sel_with, t) for t in f2p)
                               else "flaky", detail=f"alone, the chosen tests disagree: {dropped[:5]}")
        return PairVerdict(accepted=True, fail_to_pass=alone, pass_to_pass=p2p,
                           unstable=sorted(set(unstable) | set(dropped)))

    def final_check(self, record: TaskRecord) -> None:
        """The verifier's check of the written task (``check.check_record``: gold 1.0, empty 0.0; cached)."""
        if self.check == NO_CHECK:
            return
        failed = check_record(record, self.out, self.check, self.verdicts)
        if failed:
            raise Rejected("check_failed", f"{self.check}: {failed}")

    # -- output ----------------------------------------------------------------------------
    def write_repo(self, tree: Path, dest: Path, commit: str, message: str) -> None:
        """The task's repository: the base tree alone, one commit (no trace of the later release)."""
        if (dest / ".git").is_dir():
            try:
                if gitrepo.git(dest, "rev-parse", "HEAD").strip() == commit and not gitrepo.git(
                        dest, "status", "--porcelain"):
                    return
            except TaskgenError:
                pass
        made = gitrepo.init_clean(tree, dest, message)
        if made != commit:
            raise TaskgenError(f"{dest.name}: import commit {made} differs from the mined base {commit}")

    def write_env(self) -> None:
        if not self.env_ready:
            dest = self.out / self.env_rel
            marker = dest / ".taskgen-env"
            if not (marker.is_file() and marker.read_text() == self.runner.env.name):
                install_env(self.spec.at("tests"), self.cache, dest)
                marker.write_text(self.runner.env.name)
            self.env_ready = True

    # -- cache -----------------------------------------------------------------------------
    def _load(self, key: str) -> dict | None:
        return self.verdicts.load(key)

    def _store(self, key: str, value: dict) -> None:
        self.verdicts.store(key, value)


def prefetch(spec: MineSpec, pairs: list[tuple[str, str]], cache: Path, workers: int = 4) -> None:
    """Download the pairs' sdists in parallel (pip is slow per call); failures surface per pair later."""
    versions = sorted({v for pair in pairs for v in pair})

    def one(version: str) -> None:
        try:
            download_sdist(spec.at(version), cache)
        except TaskgenError:
            pass

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(one, versions))


# -- statements ----------------------------------------------------------------------------

def release_statement(package: str, earlier: str, later: str, section: ChangelogSection) -> str:
    """The task's statement: the later release's changelog section, framed in one line each side."""
    return (f"This is {package} {earlier}. The maintainers' release notes for the next release, {later}, "
            f"say:\n\n{section.text}\n\n"
            "Make the library changes these notes describe (fixes first). Tests that check them will be run; "
            "do not edit the tests.\n")


def statement_leaks(statement: str, tests: list[str], split: ReleaseSplit) -> list[str]:
    """Ways the statement gives away the hidden tests: their names, files or code (empty: none)."""
    found = []
    names = {t.split("::")[-1].split("[", 1)[0] for t in tests}
    named = sorted(n for n in names if len(n) > 5 and re.search(rf"(?<![\w.]){re.escape(n)}(?!\w)", statement))
    if named:
        found.append(f"names hidden tests {named[:3]}")
    files = [f for f in split.test_files if f in statement]
    if files:
        found.append(f"names test files {files[:3]}")
    library_lines = {ln[1:].strip() for ln in split.patch.splitlines() if ln.startswith("+")}
    for line in split.test_patch.splitlines():
        text = line[1:].strip()
        if line.startswith("+") and not line.startswith("+++") and len(text) >= 30 \
                and text not in library_lines and text in statement:
            found.append("quotes a hidden test's code")
            break
    return found


# -- helpers -------------------------------------------------------------------------------

def _reset(work: Path, commit: str) -> None:
    gitrepo.git(work, "reset", "-q", "--hard", commit)
    gitrepo.git(work, "clean", "-q", "-fdx")


def _apply(work: Path, patch: str) -> bool:
    if not patch.strip():
        return True
    try:
        gitrepo.git(work, "apply", "--whitespace=nowarn", "-", input=patch)
    except TaskgenError:
        return False
    return True


def _keys(results: list[RunResult]) -> set[str]:
    return set().union(*(r.tests for r in results))


def _outcome(result: RunResult, nodeid: str) -> str:
    """passed | failed | skipped; a test of a module that failed to collect counts as failed."""
    found = result.tests.get(nodeid)
    if found is not None:
        return found.outcome
    path = nodeid.split("::", 1)[0]
    if f"<collect>:{path}" in result.tests or any(
            k.startswith("<collect>:") and path.startswith(k[len("<collect>:"):].rstrip("/") + "/")
            for k in result.tests) or "<collect>:" in result.tests:
        return "failed"
    return "missing"


def _failed(result: RunResult, nodeid: str) -> bool:
    return _outcome(result, nodeid) == "failed"


def _passed(result: RunResult, nodeid: str) -> bool:
    return _outcome(result, nodeid) == "passed"


def _spread(items: list[str], limit: int) -> list[str]:
    """At most ``limit`` of ``items``, evenly spaced (deterministic)."""
    if len(items) <= limit:
        return items
    step = len(items) / limit
    return [items[int(i * step)] for i in range(limit)]


# -- the task source (task_sources.SOURCES["release-diff"]; `task-factory mine`) ---------------------


class MinedOptions(CheckedOptions):
    """The settings of ``task-factory mine`` (``make release-diff --set KEY=VALUE``)."""

    packages: list[str] | None = Field(None, description=f"packages to mine (default: all of {', '.join(MINE_CATALOG)})")
    discover: int | None = Field(None, description="instead of the catalog's pinned pairs, the N newest consecutive "
                                                   "pairs on the index")
    max_tasks: int | None = Field(None, description="stop once this many tasks are kept")
    min_tasks: int | None = Field(None, description=f"fail (exit 1) below this many (default {DEFAULT_MIN_TASKS})")
    max_patch_lines: int | None = Field(None, description="reject pairs whose gold patch changes more lines "
                                                          f"(default and ceiling {MAX_PATCH_LINES})")


class MinedSource(TaskSource):
    """Real historical fixes between consecutive releases (``mine_tasks``)."""

    name = label = "release-diff"
    summary = ("mine real historical fixes from consecutive releases on the package index, with hidden tests "
               "and changelog statements")
    command = "mine"
    options_class = MinedOptions
    errors = (KeyError, ValueError, TaskgenError)

    def make(self, out: str | Path, log: Log | None = None) -> MineReport:
        o = self.options
        return mine_tasks(out, packages=o.packages, discover=o.discover, max_tasks=o.max_tasks,
                          min_tasks=o.min_tasks, max_patch_lines=o.max_patch_lines, check=o.check,
                          cache_dir=o.cache_dir, log=log)

    def render(self, report: MineReport, quiet: bool = False) -> str:
        lines = [f"{'package':<16} {'pairs':>5} {'kept':>4} {'secs':>7}  rejected"]
        for p in report.packages:
            detail = ", ".join(f"{k}={v}" for k, v in sorted(p.rejected.items()))
            lines.append(f"{p.package:<16} {p.pairs_tried:>5} {p.tasks:>4} {p.duration_s:>7.1f}  {detail}")
        tried = sum(p.pairs_tried for p in report.packages)
        lines.append(f"{report.n_tasks} release-diff task(s) from {tried} pair(s) in {report.tasks_file} "
                     f"({report.duration_s:.1f}s, {report.pytest_runs} pytest run(s), check: {report.check}); "
                     f"minimum {report.min_tasks}: {'ok' if report.ok else 'NOT MET'}")
        return "\n".join(lines)
