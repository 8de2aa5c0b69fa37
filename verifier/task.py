"""SWE-bench task instances and the JSON/JSONL loader.

Besides SWE-bench's fields, a task says where its code and runtime live on this
server, in one of two ways:

- host-directory: ``repo_path`` (a directory), an optional ``python_env`` (a venv
  mounted read-only) and an optional docker ``image`` to run it in. Relative paths
  are taken relative to the task file.
- image-resident (SWE-bench-family instances): ``image`` already holds the
  repository at ``workdir`` (default ``/testbed``) and its environment at
  ``image_env``; only the docker backend serves these.

How it is graded: with no ``test_cmd``, the grader's own pytest run (JUnit,
canaries, outcome records); with ``test_cmd`` + ``log_parser``, the instance's own
harness command, its log read by that parser (``verifier/harness.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sandbox import backend_config_class
from sandbox.models import WorkspaceSpec

DEFAULT_WORKDIR = "/testbed"  # where SWE-bench-layout images hold the repository

TaskSource = Literal["synthetic-mutation", "release-diff", "swe-bench"]
"""Where a task's bug and fix come from, said everywhere a task is shown:
``synthetic-mutation``: a one-token mutation of real code, its fix the reverted token (SWE-smith-style);
``release-diff``: a real fix between two releases; ``swe-bench``: a SWE-bench-family instance."""


class TaskRecord(BaseModel):
    """A task instance as written to a task file: SWE-bench's fields plus where the code lives here."""

    model_config = ConfigDict(extra="forbid")

    instance_id: str
    source: TaskSource
    repo: str
    base_commit: str
    problem_statement: str
    hints_text: str = ""
    patch: str
    test_patch: str = ""
    FAIL_TO_PASS: list[str]
    PASS_TO_PASS: list[str]
    version: str
    environment_setup_commit: str
    created_at: str | None = None
    repo_path: str | None = Field(None, description="repository directory, relative to the task file "
                                                    "(host-directory tasks)")
    python_env: str | None = Field(None, description="venv directory, relative to the task file")
    image: str | None = Field(None, description="docker image; with no repo_path it holds the repository")
    workdir: str | None = Field(None, description="the repository's path inside image (default /testbed)")
    image_env: str | None = Field(None, description="environment prefix inside image, its bin/ first on PATH")
    setup_patch: str = Field("", description="applied before the episode (SWE-smith's bug patch)")
    test_cmd: str | None = Field(None, description="the instance's own test command (None: the grader's pytest)")
    log_parser: str | None = Field(None, description="parser of test_cmd's log, by swebench registry name")
    dataset: str | None = Field(None, description="dataset family it was imported from (swebench, swe-gym, ...)")


class TaskFileError(ValueError):
    """A task file could not be read; the message names the instance and field."""


class TaskInstance(BaseModel):
    model_config = ConfigDict(extra="ignore")

    instance_id: str = Field(min_length=1)
    repo: str = ""
    base_commit: str | None = None
    problem_statement: str = Field(min_length=1)
    hints_text: str = ""
    patch: str = Field("", description="the gold fix (never shown to the agent)")
    test_patch: str = Field("", description="adds/changes the hidden tests (grading only)")
    FAIL_TO_PASS: list[str] = Field(default_factory=list)
    PASS_TO_PASS: list[str] = Field(default_factory=list)
    version: str = ""
    environment_setup_commit: str = ""
    created_at: str | None = None
    source: str | None = Field(None, description="synthetic-mutation | release-diff | swe-bench (None: unlabelled)")
    repo_path: Path | None = Field(None, description="host-directory tasks: the repository on this host")
    python_env: Path | None = None
    image: str | None = None
    workdir: str | None = Field(None, description="image-resident tasks: the repository's path inside `image`")
    image_env: str | None = Field(None, description="image-resident tasks: the environment prefix inside "
                                                    "`image` whose bin/ comes first on PATH")
    setup_patch: str = Field("", description="applied to the tree before the episode (SWE-smith's bug patch)")
    test_cmd: str | None = Field(None, description="the instance's own test command, run in the workspace; "
                                                   "None: the grader's pytest run")
    log_parser: str | None = Field(None, description="the parser of test_cmd's log (swebench's registry name)")
    dataset: str | None = Field(None, description="the dataset family it was imported from")

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _json_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = json.loads(value) if value.strip() else []
            except json.JSONDecodeError as exc:
                raise ValueError(f"not a JSON list of test ids: {exc}") from None
        return value

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS")
    @classmethod
    def _non_empty_ids(cls, value: list[str]) -> list[str]:
        if any(not v.strip() for v in value):
            raise ValueError("test ids must be non-empty strings")
        return value

    @property
    def tests(self) -> list[str]:
        """Every test the grader runs: FAIL_TO_PASS first, then PASS_TO_PASS."""
        return list(dict.fromkeys(self.FAIL_TO_PASS + self.PASS_TO_PASS))

    @model_validator(mode="after")
    def _one_home(self) -> "TaskInstance":
        if self.repo_path is None and self.image is None:
            raise ValueError("a task needs repo_path (a directory here) or image (holding the repository)")
        if self.repo_path is not None and self.workdir is not None:
            raise ValueError("repo_path and workdir exclude each other: the code is on this host or in the image")
        if self.workdir is not None and not self.workdir.startswith("/"):
            raise ValueError("workdir must be an absolute path inside the image")
        if self.image_resident and self.python_env is not None:
            raise ValueError("python_env is a host directory; an image-resident task names image_env instead")
        if bool(self.test_cmd) != bool(self.log_parser):
            raise ValueError("test_cmd and log_parser go together (the command's log needs its parser)")
        return self

    @property
    def image_resident(self) -> bool:
        """The repository lives in ``image`` (at ``workdir``), not on this host."""
        return self.repo_path is None

    def workspace_spec(self) -> WorkspaceSpec:
        if self.image_resident:
            return WorkspaceSpec(image=self.image, image_workdir=self.workdir or DEFAULT_WORKDIR,
                                 image_env=self.image_env, setup_patch=self.setup_patch)
        return WorkspaceSpec(repo_path=self.repo_path, base_commit=self.base_commit,
                             python_env=self.python_env, image=self.image, setup_patch=self.setup_patch)

    def resolved(self, base: Path) -> "TaskInstance":
        """A copy with ``repo_path``/``python_env`` made absolute against ``base``."""
        if self.repo_path is None:
            return self
        update: dict[str, Any] = {"repo_path": (base / self.repo_path).resolve()}
        if self.python_env is not None:
            update["python_env"] = (base / self.python_env).resolve()
        return self.model_copy(update=update)


def _records(path: Path, text: str) -> list[tuple[str, Any]]:
    """(location, raw record) pairs of a JSON array/object or a JSONL file."""
    stripped = text.lstrip()
    if path.suffix == ".jsonl" or not stripped.startswith(("[", "{")):
        out = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                out.append((f"{path.name}:{n}", json.loads(line)))
            except json.JSONDecodeError as exc:
                raise TaskFileError(f"{path.name}:{n}: invalid JSON: {exc.msg}") from None
        return out
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        if stripped.startswith("{"):  # a JSONL file named .json
            return _records(path.with_suffix(".jsonl"), text)
        raise TaskFileError(f"{path.name}: invalid JSON: {exc.msg} (line {exc.lineno})") from None
    items = data if isinstance(data, list) else [data]
    return [(f"{path.name}[{i}]", item) for i, item in enumerate(items)]


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "(record)"
        parts.append(f"field {field!r}: {err['msg']}")
    return "; ".join(parts)


def load_tasks(path: str | Path) -> list[TaskInstance]:
    """Load tasks from a JSON array/object or JSONL file.

    Raises TaskFileError naming the record, instance and field of the first problem.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TaskFileError(f"cannot read task file {path}: {exc.strerror}") from None
    tasks: list[TaskInstance] = []
    seen: set[str] = set()
    for where, raw in _records(path, text):
        if not isinstance(raw, dict):
            raise TaskFileError(f"{where}: a task must be a JSON object, got {type(raw).__name__}")
        name = raw.get("instance_id") or "<no instance_id>"
        try:
            task = TaskInstance.model_validate(raw).resolved(path.parent.resolve())
        except ValidationError as exc:
            raise TaskFileError(f"{where}: instance {name!r}: {_describe(exc)}") from None
        if task.instance_id in seen:
            raise TaskFileError(f"{where}: instance {name!r}: field 'instance_id': duplicate")
        if task.repo_path is not None and not task.repo_path.is_dir():
            raise TaskFileError(f"{where}: instance {name!r}: field 'repo_path': "
                                f"not a directory: {task.repo_path}")
        if task.python_env is not None and not task.python_env.is_dir():
            raise TaskFileError(f"{where}: instance {name!r}: field 'python_env': "
                                f"not a directory: {task.python_env}")
        seen.add(task.instance_id)
        tasks.append(task)
    if not tasks:
        raise TaskFileError(f"{path.name}: no tasks")
    return tasks


def check_backend(tasks: list[TaskInstance], backend: str) -> None:
    """Raise TaskFileError when ``backend`` cannot serve some of ``tasks`` (image-resident ones need docker)."""
    if backend_config_class(backend).runs_image_resident:
        return
    resident = [t.instance_id for t in tasks if t.image_resident]
    if resident:
        more = f" and {len(resident) - 3} more" if len(resident) > 3 else ""
        raise TaskFileError(f"{len(resident)} image-resident task(s) ({', '.join(resident[:3])}{more}) keep their "
                            f"code inside their image: serve them with the docker backend, not {backend}")
