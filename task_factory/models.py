"""Typed records of the task builder: package pins, candidates, tasks and reports."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class PackageSpec(BaseModel):
    """A pinned PyPI source distribution that tasks are synthesized from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="PyPI project name")
    version: str = Field(description="pinned version (sdist)")
    license: str = Field(description="SPDX-ish licence id, checked by hand when pinned")
    import_root: str = Field(".", description="directory (relative to the repo) put on sys.path: '.' or 'src'")
    source_files: tuple[str, ...] = Field(description="repo-relative globs of modules bugs are injected into")
    test_paths: tuple[str, ...] = Field(description="repo-relative test files or directories run by pytest")
    test_deps: tuple[str, ...] = Field((), description="pinned requirements the tests need besides pytest")

    @property
    def key(self) -> str:
        """Directory name of its repository and environment: ``<name>-<version>``."""
        return f"{self.name}-{self.version}"


class Mutation(BaseModel):
    """One procedural bug: a textual edit of one source file found through its AST."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(description="repo-relative source file")
    function: str = Field(description="qualified name of the enclosing function")
    operator: str = Field(description="name of the injection operator")
    lineno: int
    col: int
    variant: str = Field("", description="operator-specific detail that makes the id unique")

    @property
    def id(self) -> str:
        return f"{self.path}:{self.lineno}:{self.col}:{self.operator}:{self.variant}"


class TestOutcome(BaseModel):
    """Outcome of one pytest node in one run."""

    model_config = ConfigDict(extra="forbid")

    outcome: str = Field(description="passed | failed | skipped")
    message: str = Field("", description="crash message of a failure (no file paths)")
    line: int | None = Field(None, description="line of the test's file where a failure surfaced")


class RunResult(BaseModel):
    """One pytest run on the host: per-node outcomes and how the run ended."""

    model_config = ConfigDict(extra="forbid")

    exit_code: int | None
    timed_out: bool = False
    duration_s: float = 0.0
    tests: dict[str, TestOutcome] = Field(default_factory=dict)
    output_tail: str = ""

    def ids(self, outcome: str) -> set[str]:
        return {k for k, v in self.tests.items() if v.outcome == outcome}


class CandidateVerdict(BaseModel):
    """Cached verdict on one mutation: rejected (with why) or the tests it decides."""

    model_config = ConfigDict(extra="forbid")

    accepted: bool
    reason: str = ""
    fail_to_pass: list[str] = Field(default_factory=list)
    pass_to_pass: list[str] = Field(default_factory=list)
    messages: dict[str, str] = Field(default_factory=dict, description="failure message per FAIL_TO_PASS test")
    lines: dict[str, int] = Field(default_factory=dict, description="line of the test file where it failed")


class TaskProvenance(BaseModel):
    """Where a task came from; kept in build_report.json, never shown to an agent."""

    model_config = ConfigDict(extra="forbid")

    instance_id: str
    package: str
    mutation: Mutation
    entry_point: str = Field("", description="the public callable the statement names as misbehaving")
    reproducer: str = Field("", description="the statement's script: fails on the base tree, passes with the gold patch")


class PackageReport(BaseModel):
    """What the build did with one package."""

    model_config = ConfigDict(extra="forbid")

    package: str
    tasks: int = 0
    candidates_tried: int = 0
    rejected: dict[str, int] = Field(default_factory=dict, description="rejection reason -> count")
    baseline_passing: int = 0
    error: str | None = Field(None, description="why the package produced nothing (download, env, baseline)")


class BuildReport(BaseModel):
    """Result of :func:`build_tasks`; ``ok`` is False when fewer than ``min_tasks`` were built."""

    model_config = ConfigDict(extra="forbid")

    builder_version: str = Field(description="changes whenever the same inputs would give other tasks")
    out_dir: str
    tasks_file: str
    seed: int
    statement_style: str = Field("report", description="report (a user's bug report) | verbose (test id and source)")
    n_tasks: int
    min_tasks: int
    check: str = Field("none", description="each task's check by the verifier before it was kept (gold 1.0, "
                                           "empty 0.0): the sandbox backend it graded in, or none")
    packages: list[PackageReport]
    provenance: list[TaskProvenance] = Field(default_factory=list)
    duration_s: float = 0.0
    pytest_runs: int = Field(0, description="host pytest runs this build made (0 when fully cached)")

    @property
    def ok(self) -> bool:
        return self.n_tasks >= self.min_tasks


# -- release-diff mining (mine.py) ----------------------------------------------------------


class MineSpec(BaseModel):
    """A package whose consecutive releases are mined into tasks, with its release pairs pinned."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="PyPI project name")
    license: str = Field(description="SPDX-ish licence id, checked by hand when pinned")
    import_root: str = Field(".", description="directory (relative to the repo) put on sys.path: '.' or 'src'")
    library: tuple[str, ...] = Field(description="repo-relative library paths (files or folders): the patch's scope")
    test_paths: tuple[str, ...] = Field(description="repo-relative test files or directories run by pytest")
    test_deps: tuple[str, ...] = Field((), description="pinned requirements the tests need besides pytest")
    pairs: tuple[tuple[str, str], ...] = Field((), description="(earlier, later) consecutive releases to mine")

    def at(self, version: str) -> PackageSpec:
        """The pinned sdist of one release (its tree must hold ``library`` and ``test_paths``)."""
        return PackageSpec(name=self.name, version=version, license=self.license, import_root=self.import_root,
                           source_files=self.library, test_paths=self.test_paths, test_deps=self.test_deps)


class ReleaseSplit(BaseModel):
    """The change between two releases, cut into the library patch and the test patch."""

    model_config = ConfigDict(extra="forbid")

    base_commit: str = Field(description="the earlier release's tree (the task's base)")
    later_commit: str = Field(description="the later release's tree (version strings put back), never shipped")
    patch: str = Field(description="library changes: the gold patch")
    test_patch: str = Field(description="test changes: the hidden tests")
    patch_files: list[str] = Field(default_factory=list)
    test_files: list[str] = Field(default_factory=list)
    other_files: list[str] = Field(default_factory=list, description="changed, but neither (docs, packaging, CI)")
    patch_lines: int = Field(0, description="changed (+/-) lines of the patch")
    test_patch_lines: int = 0
    binary: list[str] = Field(default_factory=list, description="binary changes to library or tests")


class PairVerdict(BaseModel):
    """Cached verdict on one release pair: rejected (with why) or the tests it decides."""

    model_config = ConfigDict(extra="forbid")

    accepted: bool
    reason: str = ""
    detail: str = ""
    fail_to_pass: list[str] = Field(default_factory=list)
    pass_to_pass: list[str] = Field(default_factory=list)
    unstable: list[str] = Field(default_factory=list, description="tests left out: outcomes differed between runs")


class MineProvenance(BaseModel):
    """Where a mined task came from; kept in build_report.json, never shown to an agent."""

    model_config = ConfigDict(extra="forbid")

    instance_id: str
    package: str
    from_version: str
    to_version: str
    changelog_file: str
    changelog_heading: str
    patch_files: list[str]
    test_files: list[str]
    patch_lines: int
    unstable_tests: list[str] = Field(default_factory=list)


class PairReport(BaseModel):
    """What the miner did with one release pair."""

    model_config = ConfigDict(extra="forbid")

    package: str
    from_version: str
    to_version: str
    instance_id: str | None = Field(None, description="the task, when the pair was kept")
    reason: str | None = Field(None, description="why the pair was rejected (None: kept)")
    detail: str = ""
    fail_to_pass: int = 0
    pass_to_pass: int = 0
    duration_s: float = 0.0


class MinePackageReport(BaseModel):
    """Yield of one package: pairs tried, tasks kept, rejection reasons, time."""

    model_config = ConfigDict(extra="forbid")

    package: str
    pairs_tried: int = 0
    tasks: int = 0
    rejected: dict[str, int] = Field(default_factory=dict, description="rejection reason -> count")
    duration_s: float = 0.0


class MineReport(BaseModel):
    """Result of :func:`mine_tasks`; ``ok`` is False when fewer than ``min_tasks`` were kept."""

    model_config = ConfigDict(extra="forbid")

    miner_version: str = Field(description="changes whenever the same inputs would give other tasks")
    out_dir: str
    tasks_file: str
    n_tasks: int
    min_tasks: int
    check: str = Field(description="each task's check by the verifier before it was kept (gold 1.0, empty 0.0): "
                                   "the sandbox backend it graded in, or none")
    packages: list[MinePackageReport]
    pairs: list[PairReport]
    provenance: list[MineProvenance] = Field(default_factory=list)
    duration_s: float = 0.0
    pytest_runs: int = Field(0, description="host pytest runs this build made (0 when fully cached)")

    @property
    def ok(self) -> bool:
        return self.n_tasks >= self.min_tasks
