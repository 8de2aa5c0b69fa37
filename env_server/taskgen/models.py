"""Typed records of the task builder: package pins, candidates, tasks and reports."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ..protocol import TaskRecord as _ContractTaskRecord


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


TaskRecord = _ContractTaskRecord  # the contract's task record (env_server/protocol.py)


class TaskProvenance(BaseModel):
    """Where a task came from; kept in build_report.json, never shown to an agent."""

    model_config = ConfigDict(extra="forbid")

    instance_id: str
    package: str
    mutation: Mutation


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
    n_tasks: int
    min_tasks: int
    packages: list[PackageReport]
    provenance: list[TaskProvenance] = Field(default_factory=list)
    duration_s: float = 0.0
    pytest_runs: int = Field(0, description="host pytest runs this build made (0 when fully cached)")

    @property
    def ok(self) -> bool:
        return self.n_tasks >= self.min_tasks
