"""``build_tasks``: synthesize validated bug-fix tasks (``source: synthetic-mutation``) from pinned PyPI sdists.

Per package: unpack the sdist as a git repo (clean commit), build its test venv,
run its suite twice (stable passing tests), then try seeded mutations one at a
time. A mutation becomes a task when, over two runs, some stable tests fail
(FAIL_TO_PASS) while the other tests of their files pass (PASS_TO_PASS), and the
gold patch (bug commit -> clean commit) applied with ``git apply`` makes them all
pass. The written task is then checked by the verifier (``check.py``: gold patch 1.0, empty diff
0.0, in a sandbox). Every verdict is cached (``verdicts.py``), so a rebuild only replays git work.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import math
import random
import re
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import Field

from sandbox import DEFAULT_BACKEND
from verifier.task import TaskRecord

from . import gitrepo
from .cache import claim_slot, default_cache_dir
from .check import NO_CHECK, check_record
from .envs import cached_env, install_env, requirements
from .models import BuildReport, CandidateVerdict, Mutation, PackageReport, PackageSpec, RunResult, TaskProvenance
from .mutate import Edit, apply_edit, find_mutations, parses
from .packages import CATALOG, resolve_packages
from .runner import PytestRunner
from .sources import TaskgenError, pristine_tree
from . import reproducer
from .statement import Evidence, Style, leaks, problem_statement, reveals_tests
from .task_sources import CheckedOptions, TaskSource, task_id
from .verdicts import VerdictCache, digest, safe_nodeid

DEFAULT_MIN_TASKS = 30
DEFAULT_TASKS_PER_PACKAGE = 6
MAX_FAIL_TO_PASS = 25
MAX_PASS_TO_PASS = 120
ATTEMPTS_PER_TASK = 8
# Bump when the same inputs would give different tasks (ordering, statements, ids, the check).
# (Cached verdicts have their own version: verdicts.VERDICT_VERSION.)
BUILDER_VERSION = "11"
# Failing tests tried, in order, for a reproducer the statement can carry.
REPRODUCER_TRIES = 6
# Why no statement could be written, from the earliest stage to the latest; a candidate is
# rejected for the latest stage any of its failing tests reached.
STATEMENT_REJECTIONS = ("no_reproducer", "reproducer_passes_on_bug", "reproducer_fails_on_fix",
                        "no_public_entry_point", "statement_leaks")

Log = Callable[[str], None]


def build_tasks(out_dir: str | Path, packages: list[str] | None = None, seed: int = 0,
                max_tasks: int | None = None, min_tasks: int | None = None, *,
                tasks_per_package: int | None = None, cache_dir: str | Path | None = None,
                log: Log | None = None, statement_style: Style = "report", check: str = DEFAULT_BACKEND) -> BuildReport:
    """Build tasks into ``out_dir`` (tasks.jsonl, repos/, envs/, build_report.json).

    ``max_tasks`` caps the total (spread evenly over the packages; a package that falls short is
    made up by the others, one more task each in turn, up to ``max_tasks`` or else ``min_tasks``);
    ``min_tasks`` (default: 30, or ``max_tasks`` when smaller) decides ``report.ok``;
    ``statement_style``: ``report`` (a user's bug report) or ``verbose`` (test id, source, error);
    ``check``: the sandbox backend in which the verifier checks each task before it is kept (gold 1.0,
    empty 0.0; ``check_failed`` otherwise), or ``none``.
    """
    start = time.monotonic()
    out = Path(out_dir).resolve()
    cache = Path(cache_dir).resolve() if cache_dir else default_cache_dir()
    specs = resolve_packages(packages)
    if max_tasks is not None and max_tasks < 1:
        raise ValueError("max_tasks must be >= 1")
    quota = tasks_per_package or (math.ceil(max_tasks / len(specs)) if max_tasks else DEFAULT_TASKS_PER_PACKAGE)
    if min_tasks is None:
        min_tasks = min(DEFAULT_MIN_TASKS, max_tasks or DEFAULT_MIN_TASKS)
    say = log or (lambda _msg: None)
    out.mkdir(parents=True, exist_ok=True)

    tasks: list[TaskRecord] = []
    provenance: list[TaskProvenance] = []
    reports: list[PackageReport] = []
    # Each package makes up to its quota; then packages that reached theirs make one more each, in
    # turn, until the goal (max_tasks, else min_tasks) is met: one package's low yield (tests that
    # give few reproducers, mutations its tests miss) is made up by the others.
    goal = max_tasks if max_tasks is not None else min_tasks
    built: list[tuple[_PackageBuilder, PackageReport]] = []
    streams: list[tuple[_PackageBuilder, PackageReport, object]] = []

    def pull(builder: _PackageBuilder, report: PackageReport, stream) -> bool:
        try:
            record, prov = next(stream)
        except StopIteration:
            return False
        except TaskgenError as exc:
            report.error = str(exc)
            say(f"[{builder.spec.key}] error: {exc}")
            return False
        tasks.append(record)
        provenance.append(prov)
        return True

    for spec in specs:
        left = quota if max_tasks is None else min(quota, max_tasks - len(tasks))
        report = PackageReport(package=spec.key)
        reports.append(report)
        if left <= 0:
            continue
        builder = _PackageBuilder(spec, out, cache, seed, say, statement_style, check)
        builder.attempt_cap = left * ATTEMPTS_PER_TASK
        stream = builder.build(report)
        built.append((builder, report))
        made = 0
        while made < left and pull(builder, report, stream):
            made += 1
        if made == left:
            streams.append((builder, report, stream))
    while len(tasks) < goal and streams:
        for entry in list(streams):
            if len(tasks) >= goal:
                break
            builder, report, stream = entry
            builder.attempt_cap += ATTEMPTS_PER_TASK
            if pull(builder, report, stream):
                builder.log(f"one more task to make up the goal of {goal}")
            else:
                streams.remove(entry)
    for _builder, _report, stream in streams:
        stream.close()
    for builder, report in built:
        if report.error is None:
            builder.log(f"{report.tasks} task(s) from {report.candidates_tried} candidate(s); "
                        f"rejected {report.rejected}")
    runs = sum(b.runs for b, _ in built)

    tasks_file = out / "tasks.jsonl"
    tmp = tasks_file.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(t.model_dump_json() + "\n" for t in tasks))
    tmp.replace(tasks_file)
    result = BuildReport(builder_version=BUILDER_VERSION, out_dir=str(out), tasks_file=str(tasks_file), seed=seed,
                         statement_style=statement_style,
                         n_tasks=len(tasks), check=check,
                         min_tasks=min_tasks, packages=reports, provenance=provenance,
                         duration_s=round(time.monotonic() - start, 2), pytest_runs=runs)
    (out / "build_report.json").write_text(result.model_dump_json(indent=2) + "\n")
    return result


class _PackageBuilder:
    """Builds the tasks of one package (one repo, one venv, one cache folder)."""

    def __init__(self, spec: PackageSpec, out: Path, cache: Path, seed: int, say: Log,
                 statement_style: Style = "report", check: str = DEFAULT_BACKEND) -> None:
        self.spec, self.out, self.cache, self.seed, self.say = spec, out, cache, seed, say
        self.statement_style, self.check = statement_style, check
        self.runner: PytestRunner | None = None
        self.attempt_cap = ATTEMPTS_PER_TASK  # candidates judged at most (build_tasks raises it per task asked)

    @property
    def runs(self) -> int:
        return self.runner.runs if self.runner else 0

    def log(self, msg: str) -> None:
        self.say(f"[{self.spec.key}] {msg}")

    # -- setup -----------------------------------------------------------------------------
    def build(self, report: PackageReport):
        """The package's tasks, one at a time, while candidates last and fewer than ``attempt_cap``
        were judged (the caller raises the cap to ask for more). The work tree the candidates are
        judged in is this build's own (``cache.claim_slot``) until the stream ends or is closed."""
        with claim_slot(self.cache / "work", self.spec.key) as work:
            yield from self._build(report, work)

    def _build(self, report: PackageReport, work: Path):
        spec = self.spec
        pristine = pristine_tree(spec, self.cache)
        install_env(spec, self.cache, self.out / "envs" / spec.key)
        self.runner = PytestRunner(cached_env(spec, self.cache), self.cache / "plugin", spec.import_root,
                                   spec.test_paths)
        self.repo = self.out / "repos" / spec.key
        self.clean = gitrepo.init_clean(pristine, self.repo, f"Import {spec.name} {spec.version} from its sdist")
        self.work = work
        work_clean = gitrepo.init_clean(pristine, self.work, f"Import {spec.name} {spec.version} from its sdist")
        if work_clean != self.clean:
            raise TaskgenError("work tree and repository disagree on the clean commit")
        self.verdicts = VerdictCache(self.cache, "synthetic-mutation", spec.key, self.clean, requirements(spec),
                                     str(self.runner.env.name))
        stable, duration = self.baseline()
        report.baseline_passing = len(stable)
        if not stable:
            raise TaskgenError("no test passes on the clean tree")
        self.timeout = max(20.0, 6 * duration)
        test_text = self.test_text()
        rng = random.Random(f"{self.seed}|{spec.key}")  # candidate order only
        used_functions: set[str] = set()
        made = 0
        for mut, edit, path_src in self.candidates(rng, test_text):
            if report.candidates_tried >= self.attempt_cap:
                break
            if mut.function in used_functions:
                continue
            report.candidates_tried += 1
            verdict = self.judge(mut, edit, path_src, stable)
            if not verdict.accepted:
                report.rejected[verdict.reason] = report.rejected.get(verdict.reason, 0) + 1
                continue
            task = self.make_task(mut, edit, path_src, verdict)
            if isinstance(task, str):
                report.rejected[task] = report.rejected.get(task, 0) + 1
                continue
            used_functions.add(mut.function)
            made += 1
            report.tasks = made
            self.log(f"task {task[0].instance_id}: {len(verdict.fail_to_pass)} F2P, {len(verdict.pass_to_pass)} P2P")
            yield task

    def baseline(self) -> tuple[set[str], float]:
        """Tests passing in two runs of the clean tree (cached), and one run's duration."""
        cached = self._load("baseline")
        if cached is not None:
            return set(cached["stable"]), float(cached["duration"])
        self.log("baseline: running the test suite twice")
        r1 = self.runner.run(self.work, timeout_s=600)
        r2 = self.runner.run(self.work, timeout_s=600)
        if r1.timed_out or not r1.tests:
            raise TaskgenError(f"baseline run failed: {r1.output_tail[-600:]}")
        stable = {t for t in r1.ids("passed") & r2.ids("passed") if safe_nodeid(t)}
        self._store("baseline", {"stable": sorted(stable), "duration": max(r1.duration_s, r2.duration_s)})
        return stable, max(r1.duration_s, r2.duration_s)

    def test_text(self) -> str:
        chunks = []
        for tp in self.spec.test_paths:
            p = self.work / tp
            files = [p] if p.is_file() else sorted(p.rglob("*.py"))
            chunks += [f.read_text(encoding="utf-8", errors="replace") for f in files]
        return "\n".join(chunks)

    def candidates(self, rng: random.Random, test_text: str):
        """Mutations in a seeded order: functions the tests name first, operators interleaved."""
        by_key: dict[tuple[bool, str], list[tuple[Mutation, Edit, str]]] = {}
        files = sorted({str(p.relative_to(self.work)) for pattern in self.spec.source_files
                        for p in self.work.glob(pattern) if p.is_file()})
        named: dict[str, bool] = {}
        for rel in files:
            if not fnmatch.fnmatch(rel, "*.py"):
                continue
            src = (self.work / rel).read_text(encoding="utf-8")
            for mut, edit in find_mutations(src, rel, verify=False):
                name = mut.function.split(".")[-1]
                if name not in named:
                    named[name] = bool(name) and re.search(rf"\b{re.escape(name)}\b", test_text) is not None
                by_key.setdefault((named[name], mut.operator), []).append((mut, edit, src))
        for mut, edit, src in seeded_order(by_key, rng):
            if parses(src, edit):
                yield mut, edit, src

    # -- verdicts --------------------------------------------------------------------------
    def judge(self, mut: Mutation, edit: Edit, src: str, stable: set[str]) -> CandidateVerdict:
        key = "cand-" + hashlib.sha256(f"{mut.id}|{edit}".encode()).hexdigest()[:20]
        cached = self._load(key)
        if cached is not None:
            return CandidateVerdict(**cached)
        target = self.work / mut.path
        try:
            target.write_text(apply_edit(src, edit), encoding="utf-8")
            verdict = self._judge(stable)
        finally:
            target.write_text(src, encoding="utf-8")
        self._store(key, verdict.model_dump())
        return verdict

    def _judge(self, stable: set[str]) -> CandidateVerdict:
        r1 = self.runner.run(self.work, timeout_s=self.timeout)
        if r1.timed_out:
            return CandidateVerdict(accepted=False, reason="timeout")
        if any(k.startswith("<collect>:") for k in r1.tests) or not r1.tests:
            return CandidateVerdict(accepted=False, reason="collection_error")
        failed = stable & r1.ids("failed")
        if not failed:
            return CandidateVerdict(accepted=False, reason="no_failing_test")
        if len(failed) > MAX_FAIL_TO_PASS or len(failed) * 2 > len(stable):
            return CandidateVerdict(accepted=False, reason="too_many_failures")
        files = {t.split("::", 1)[0] for t in failed}
        p2p = sorted(t for t in stable & r1.ids("passed") if t.split("::", 1)[0] in files)
        if len(p2p) > MAX_PASS_TO_PASS:  # evenly spaced, deterministic subset
            step = len(p2p) / MAX_PASS_TO_PASS
            p2p = [p2p[int(i * step)] for i in range(MAX_PASS_TO_PASS)]
        r2 = self.runner.run(self.work, sorted(failed) + p2p, timeout_s=self.timeout)
        f2p = sorted(t for t in failed if t in r2.ids("failed"))
        p2p = [t for t in p2p if t in r2.ids("passed")]
        if r2.timed_out or not f2p:
            return CandidateVerdict(accepted=False, reason="flaky")
        return CandidateVerdict(accepted=True, fail_to_pass=f2p, pass_to_pass=p2p,
                                messages={t: r1.tests[t].message for t in f2p},
                                lines={t: r1.tests[t].line for t in f2p if r1.tests[t].line is not None})

    def gold_passes(self, patch: str, mut: Mutation, buggy: str, src: str, tests: list[str]) -> bool:
        """Apply the gold patch to the buggy tree with ``git apply``; all ``tests`` must pass."""
        key = "gold-" + hashlib.sha256(patch.encode()).hexdigest()[:20]
        cached = self._load(key)
        if cached is not None:
            return bool(cached["ok"])
        target = self.work / mut.path
        try:
            target.write_text(buggy, encoding="utf-8")
            gitrepo.git(self.work, "apply", "--whitespace=nowarn", "-", input=patch)
            reverted = target.read_text(encoding="utf-8") == src
            result: RunResult = self.runner.run(self.work, tests, timeout_s=self.timeout)
            ok = reverted and not result.timed_out and all(
                result.tests.get(t) is not None and result.tests[t].outcome == "passed" for t in tests)
        except TaskgenError:
            ok = False
        finally:
            target.write_text(src, encoding="utf-8")
        self._store(key, {"ok": ok})
        return ok

    # -- output ----------------------------------------------------------------------------
    def make_task(self, mut: Mutation, edit: Edit, src: str,
                  verdict: CandidateVerdict) -> tuple[TaskRecord, TaskProvenance] | str:
        """The task of an accepted mutation, or why it was dropped ("gold_failed", a ``STATEMENT_REJECTIONS``
        reason, or "check_failed": the verifier does not grade its gold patch 1.0 and an empty diff 0.0)."""
        spec = self.spec
        buggy = apply_edit(src, edit)
        bug = gitrepo.commit_change(self.repo, self.clean, mut.path, buggy, f"{spec.name} {spec.version}")
        patch = gitrepo.diff(self.repo, bug, self.clean)
        if not self.gold_passes(patch, mut, buggy, src, verdict.fail_to_pass + verdict.pass_to_pass):
            return "gold_failed"
        instance_id = task_id(spec.name, spec.version, digest(patch, n=8))
        gitrepo.set_branch(self.repo, f"task/{instance_id}", bug)
        changed = [line[1:] for line in patch.splitlines()
                   if line[:1] in "+-" and not line.startswith(("+++", "---"))]
        written = self.write_statement(mut, buggy, src, verdict, changed, instance_id)
        if isinstance(written, str):
            return written
        statement, evidence = written
        record = TaskRecord(
            instance_id=instance_id, source="synthetic-mutation", repo=f"pypi/{spec.name}", base_commit=bug, problem_statement=statement,
            patch=patch, FAIL_TO_PASS=verdict.fail_to_pass, PASS_TO_PASS=verdict.pass_to_pass,
            version=spec.version, environment_setup_commit=bug,
            repo_path=f"repos/{spec.key}", python_env=f"envs/{spec.key}",
        )
        if self.check != NO_CHECK:
            failed = check_record(record, self.out, self.check, self.verdicts)
            if failed:
                self.log(f"{instance_id}: the verifier's check fails ({self.check}): {failed}"[:300])
                return "check_failed"
        return record, TaskProvenance(instance_id=instance_id, package=spec.key, mutation=mut,
                                      entry_point=evidence.entry_point, reproducer=evidence.reproducer.code)

    def write_statement(self, mut: Mutation, buggy: str, src: str, verdict: CandidateVerdict,
                        changed: list[str], instance_id: str) -> tuple[str, Evidence] | str:
        """The statement and its evidence, or why none could be written (``STATEMENT_REJECTIONS``).

        Tries the failing tests in order: a test's reproducer must fail on the buggy tree, pass
        on the fixed one and go through a public entry point of the package, and the statement
        must not give away the change or (in a report) the tests.
        """
        reached = -1
        packages = reproducer.package_names(list(self.spec.source_files), self.spec.import_root)
        for test in verdict.fail_to_pass[:REPRODUCER_TRIES]:
            stage = self._statement_for(test, mut, buggy, src, verdict, changed, instance_id, packages)
            if not isinstance(stage, str):
                return stage
            reached = max(reached, STATEMENT_REJECTIONS.index(stage))
        reason = STATEMENT_REJECTIONS[max(reached, 0)]
        self.log(f"{instance_id}: no statement with a working reproducer ({reason}); skipped")
        return reason

    def _statement_for(self, test: str, mut: Mutation, buggy: str, src: str, verdict: CandidateVerdict,
                       changed: list[str], instance_id: str, packages: tuple[str, ...]) -> tuple[str, Evidence] | str:
        repro = reproducer.write(self.work, test, verdict.lines.get(test))
        if repro is None:
            return "no_reproducer"
        on_bug, on_fix = (self.run_reproducer(repro, mut, tree_src, packages) for tree_src in (buggy, src))
        if not on_bug.failed:
            return "reproducer_passes_on_bug"
        if not on_fix.passed:
            return "reproducer_fails_on_fix"
        entry = reproducer.entry_point(on_fix, packages) or reproducer.entry_point(on_bug, packages)
        if entry is None:
            return "no_public_entry_point"
        evidence = Evidence(entry_point=entry, reproducer=repro, run=on_bug, fixed=on_fix)
        statement = problem_statement(self.spec.name, self.spec.version, self.work, verdict.fail_to_pass, evidence,
                                      random.Random(f"{self.seed}|{instance_id}"), style=self.statement_style)
        found = leaks(statement, mut, changed)
        if self.statement_style == "report":
            found += reveals_tests(statement, self.work, verdict.fail_to_pass + verdict.pass_to_pass)
        if found:
            self.log(f"{instance_id}: statement from {test} leaks ({'; '.join(found)})")
            return "statement_leaks"
        return statement, evidence

    def run_reproducer(self, repro: reproducer.Reproducer, mut: Mutation, tree_src: str,
                       packages: tuple[str, ...]) -> reproducer.Run:
        """``repro`` run on the work tree with ``mut.path`` holding ``tree_src`` (cached)."""
        key = "repro-" + hashlib.sha256(json.dumps(
            [reproducer.VERSION, mut.path, tree_src, repro.code, repro.callees, packages]).encode()).hexdigest()[:20]
        cached = self._load(key)
        if cached is not None:
            return reproducer.Run.model_validate(cached)
        target = self.work / mut.path
        original = target.read_text(encoding="utf-8")
        try:
            target.write_text(tree_src, encoding="utf-8")
            run = reproducer.run(repro.code, self.runner.env / "bin" / "python", self.work,
                                 import_root=self.spec.import_root, callees=repro.callees, packages=packages,
                                 timeout_s=min(30.0, self.timeout))
        finally:
            target.write_text(original, encoding="utf-8")
        if run.exit_code is not None:  # a timeout is not cached: the machine may have been busy
            self._store(key, run.model_dump(mode="json"))
        return run

    # -- cache -----------------------------------------------------------------------------
    def _load(self, key: str) -> dict | None:
        return self.verdicts.load(key)

    def _store(self, key: str, value: dict) -> None:
        self.verdicts.store(key, value)


def seeded_order(groups: dict[tuple[bool, str], list], rng: random.Random):
    """Items of ``groups`` (keyed by (tests name the function, operator)): the named group
    first, each shuffled by ``rng``, operators interleaved round-robin in a shuffled order."""
    for named in (True, False):
        lists = [list(groups[k]) for k in sorted(groups) if k[0] == named]
        for g in lists:
            rng.shuffle(g)
        rng.shuffle(lists)
        while any(lists):
            for g in lists:
                if g:
                    yield g.pop()


# -- the task source (task_sources.SOURCES["synthetic-mutation"]; `task-factory build`) -------------


class SyntheticOptions(CheckedOptions):
    """The settings of ``task-factory build`` (``make synthetic-mutation --set KEY=VALUE``)."""

    packages: list[str] | None = Field(None, description=f"packages to use (default: all of {', '.join(CATALOG)})")
    seed: int = Field(0, description="the seed of the mutations tried and the statements' wording")
    max_tasks: int | None = Field(None, description="cap on the total, spread over the packages")
    min_tasks: int | None = Field(None, description=f"fail (exit 1) below this many (default {DEFAULT_MIN_TASKS})")
    tasks_per_package: int | None = Field(None, description=f"default {DEFAULT_TASKS_PER_PACKAGE} "
                                                             "(or max_tasks spread evenly)")
    statement: Style = Field("report", description="report: a user's bug report with a reproducer written from "
                                                   "the failing assertion; verbose: the failing test's id, source "
                                                   "and error")


class SyntheticSource(TaskSource):
    """Synthetic one-token mutations of real code (``build_tasks``)."""

    name = label = "synthetic-mutation"
    summary = "synthesize bug-fix tasks (synthetic mutations of real code) from pinned PyPI sdists"
    command = "build"
    options_class = SyntheticOptions
    errors = (KeyError, ValueError, TaskgenError)

    def make(self, out: str | Path, log: Log | None = None) -> BuildReport:
        o = self.options
        return build_tasks(out, packages=o.packages, seed=o.seed, max_tasks=o.max_tasks, min_tasks=o.min_tasks,
                           tasks_per_package=o.tasks_per_package, cache_dir=o.cache_dir, log=log,
                           statement_style=o.statement, check=o.check)

    def render(self, report: BuildReport, quiet: bool = False) -> str:
        lines = [f"{'package':<24} {'tasks':>5} {'tried':>5}  rejected / error"]
        for p in report.packages:
            detail = p.error or ", ".join(f"{k}={v}" for k, v in sorted(p.rejected.items()))
            lines.append(f"{p.package:<24} {p.tasks:>5} {p.candidates_tried:>5}  {detail}")
        lines.append(f"{report.n_tasks} task(s) in {report.tasks_file} ({report.duration_s:.1f}s, "
                     f"{report.pytest_runs} pytest run(s), check: {report.check}); minimum {report.min_tasks}: "
                     f"{'ok' if report.ok else 'NOT MET'}")
        return "\n".join(lines)
