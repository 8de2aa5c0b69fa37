"""Task sources behind one interface: a task source is a class, registered by name in ``SOURCES``.

A source (``TaskSource``) is its name, the ``source`` label its records carry (one of
``verifier.task.TaskSource``), a one-line summary, and its settings: a pydantic model
(``options_class``, a ``SourceOptions``) whose fields, types and descriptions are the settings
``task-factory make NAME --set KEY=VALUE`` takes and ``task-factory make NAME --help`` lists. It
yields finished tasks in the task schema (``verifier.task.TaskRecord``, its repository under the output
folder) from ``tasks``; ``make`` runs them through what every source shares:

- **one id rule** (``task_id``): the ids the factory makes are ``<project>__<part>-<part>...``; a
  task whose id breaks the rule, or repeats one, is dropped (``bad_id``, ``duplicate_id``);
- **one check** (``check.check_record``): the verifier, the server's grader, grades the gold patch
  (1.0) and an empty diff (0.0) in a sandbox of the ``check`` backend (``check_failed`` otherwise):
  no source grades anything itself;
- **one verdict cache** (``verdicts.VerdictCache``, under ``verdicts/<name>/<repo>/``): a check is cached
  by the task's content and the grader's version, so a rerun grades nothing;
- **one lock discipline** (``cache.py``): the task file and the report appear whole
  (``write_atomic``), so runs on one cache and one output folder never see a part.

The built-in sources keep their own pipelines and override ``make`` (each checks its tasks with the
same ``check_record`` before writing them, keeps its verdicts in the same cache and claims its work
trees with ``cache.claim_slot``): ``release-diff`` (``mine.py``, also ``task-factory mine``),
``synthetic-mutation`` (``build.py``, ``task-factory build``) and ``swe-bench`` (``datasets/importer.py``,
``task-factory import``; image-resident rows, checked by ``task-factory validate --backend docker``).
Entries are ``"module:Class"`` until first used, so reading the names imports no source.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import UnionType
from typing import Any, ClassVar, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from contract.overrides import apply_overrides, setting_keys, unknown_key_message
from contract.registry import resolve
from sandbox import DEFAULT_BACKEND
from verifier.task import TaskRecord
from verifier.task import TaskSource as TaskLabel

from .cache import default_cache_dir, write_atomic
from .check import NO_CHECK, check_choices, check_record
from .sources import TaskgenError
from .verdicts import VerdictCache

Log = Callable[[str], None]

# -- the one id rule -------------------------------------------------------------------------------

_PIECE = re.compile(r"^[^\s/]+$")
ID_RULE = re.compile(r"^[^\s/]+__[^\s/]+$")


def task_id(project: str, *parts: str) -> str:
    """The instance id of a task the factory makes: ``<project>__<part>-<part>...``.

    ``task_id("six", "1.16.0", "1.17.0")`` is ``six__1.16.0-1.17.0`` (a release pair),
    ``task_id("toolz", "1.0.0", digest(patch, n=8))`` ``toolz__1.0.0-1a2b3c4d`` (a mutation, by its gold
    patch), ``task_id("pandas", commit[:12])`` ``pandas__bbd4e1c7f2a9`` (an R2E-Gym row without an id of
    its own). A project's ``/`` becomes ``__`` (``pallets/flask`` -> ``pallets__flask__...``); the
    project and every part must be non-empty, without blanks or ``/``: ids name branches and files.
    A dataset row's own id is kept as it is (it names the row in its dataset)."""
    project = project.replace("/", "__")
    for piece in (project, *parts):
        if not isinstance(piece, str) or not _PIECE.match(piece):
            raise ValueError(f"task id: {piece!r} cannot be part of an id (empty, a blank or a /)")
    if not parts:
        raise ValueError(f"task id: {project!r} needs at least one part after the project")
    return f"{project}__{'-'.join(parts)}"


def is_task_id(instance_id: str) -> bool:
    """Whether ``instance_id`` has the shape ``task_id`` makes (``<project>__<rest>``, no blanks or /)."""
    return bool(ID_RULE.match(instance_id))


# -- settings ---------------------------------------------------------------------------------------


class SourceOptions(BaseModel):
    """A source's settings; a source's own options subclass it (every field with its description)."""

    model_config = ConfigDict(extra="forbid")


class CheckedOptions(SourceOptions):
    """The settings of a source whose tasks are checked before they are written, with the cache the
    checks' verdicts live in."""

    check: str = Field(DEFAULT_BACKEND, description="check each task before writing it: the verifier grades its "
                                                    "gold patch (1.0) and an empty diff (0.0) in this sandbox "
                                                    f"backend; {NO_CHECK}: write it unchecked")
    cache_dir: Path | None = Field(None, description="downloads, envs and verdicts (default "
                                                     "$SWE_OPENENV_TASKGEN_CACHE or ~/.cache)")

    @field_validator("check")
    @classmethod
    def _a_backend_or_none(cls, value: str) -> str:
        if value not in check_choices():
            gone = (" (there is no host grader: tasks are checked by the verifier in a sandbox)"
                    if value == "host" else "")
            raise ValueError(f"{value}: not one of {', '.join(check_choices())}{gone}")
        return value


def _kind(annotation: Any) -> str:
    """A setting's type in words: ``int``, ``list of str``, ``report|verbose``, ``path or none``."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return "|".join(str(a) for a in args)
    if origin in (Union, UnionType):
        return " or ".join("none" if a is type(None) else _kind(a) for a in args)
    if origin in (list, tuple, set):
        return f"{origin.__name__} of {_kind(args[0])}" if args else origin.__name__
    if annotation is Path:
        return "path"
    return getattr(annotation, "__name__", str(annotation))


def settings_help(options_class: type[BaseModel]) -> list[str]:
    """One line per setting, the source's own first: ``key (type, default X): description``."""
    shared = set(CheckedOptions.model_fields)
    lines = []
    for name, info in sorted(options_class.model_fields.items(), key=lambda item: item[0] in shared):
        value = info.get_default(call_default_factory=True)
        default = "required" if info.is_required() else f"default {'none' if value is None else value}"
        lines.append(f"{name} ({_kind(info.annotation)}, {default}): {info.description or ''}".rstrip(": "))
    return lines


def options_error(exc: ValidationError, options_class: type[BaseModel]) -> str:
    """A validation error of a source's settings in one line: a mistyped key names the nearest one."""
    parts = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(settings)"
        if err["type"] == "extra_forbidden":
            parts.append(unknown_key_message(key, setting_keys(options_class)))
        else:
            parts.append(f"{key}: {err['msg'].removeprefix('Value error, ')}")
    return "; ".join(parts)


# -- the interface ---------------------------------------------------------------------------------


class SourceReport(BaseModel):
    """What ``TaskSource.make`` did: the tasks kept and, per reason, the ones dropped."""

    model_config = ConfigDict(extra="forbid")

    source: str
    out_dir: str
    tasks_file: str
    n_tasks: int
    check: str = Field(description="the sandbox backend each task was checked in by the verifier, or none")
    rejected: dict[str, int] = Field(default_factory=dict, description="reason -> tasks dropped")
    problems: list[str] = Field(default_factory=list, description="per dropped task: its id, reason and detail")
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.n_tasks > 0 and not self.rejected


class TaskSource:
    """A task source: subclass, set the class attributes, implement ``tasks``, ``register_source`` it.

    ``tasks(out, log)`` yields finished tasks (``TaskRecord``s whose ``repo_path``/``python_env`` are
    relative to ``out``, or absolute), ids by ``task_id``; ``make`` checks and writes them. A source
    with a pipeline of its own (the built-in ones) overrides ``make`` instead (and ``render``,
    ``exit_code`` for its report), and its ``tasks`` are then the records that pipeline wrote."""

    name: ClassVar[str]
    label: ClassVar[str]  # the `source` of its records (verifier.task.TaskSource)
    summary: ClassVar[str]
    command: ClassVar[str | None] = None  # its own `task-factory` command, besides `make NAME`
    options_class: ClassVar[type[SourceOptions]] = SourceOptions
    # what `make` raises for bad input or a failed download/sandbox: one line, exit 2
    errors: ClassVar[tuple[type[BaseException], ...]] = (TaskgenError,)

    def __init__(self, options: SourceOptions | None = None) -> None:
        self.options = options if options is not None else self.options_class()

    @classmethod
    def configure(cls, overrides: list[str]) -> "TaskSource":
        """The source with its settings from ``--set key=value`` items (values read as YAML); ValueError
        in one line for a malformed item, a mistyped key (naming the nearest) or a bad value."""
        raw = apply_overrides({}, overrides)
        try:
            return cls(cls.options_class.model_validate(raw))
        except ValidationError as exc:
            raise ValueError(options_error(exc, cls.options_class)) from None

    def tasks(self, out: Path, log: Log) -> Iterator[TaskRecord]:
        """The source's finished tasks, their repositories under ``out``."""
        if type(self).make is TaskSource.make:
            raise NotImplementedError(f"task source {self.name!r} defines neither tasks() nor make()")
        report = self.make(out, log)
        path = Path(report.tasks_file)
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                yield TaskRecord.model_validate(json.loads(line))

    def make(self, out: str | Path, log: Log | None = None) -> BaseModel:
        """Run the source into ``out``: every task it yields checked (the one id rule, the verifier's check,
        cached), the kept ones written to ``out/tasks.jsonl``, the report to ``out/source_report.json``.
        Raises TaskgenError when a sandbox fails (no verdict on the task)."""
        start = time.monotonic()
        out = Path(out).resolve()
        out.mkdir(parents=True, exist_ok=True)
        say = log or (lambda _msg: None)
        check = getattr(self.options, "check", NO_CHECK)
        cache = Path(getattr(self.options, "cache_dir", None) or default_cache_dir()).resolve()
        kept: list[TaskRecord] = []
        rejected: Counter[str] = Counter()
        problems: list[str] = []
        for record in self.tasks(out, say):
            why = self._screen(record, kept)
            if why is None and check != NO_CHECK:
                verdicts = VerdictCache(cache, self.name, record.repo.replace("/", "__") or "tasks",
                                        record.python_env or "", record.image or "")
                failed = check_record(record, out, check, verdicts)
                why = ("check_failed", failed) if failed else None
            if why is None:
                kept.append(record)
                say(f"task {record.instance_id}: kept")
                continue
            rejected[why[0]] += 1
            problems.append(f"{record.instance_id}: {why[0]}: {why[1]}"[:500])
            say(problems[-1])
        tasks_file = out / "tasks.jsonl"
        write_atomic(tasks_file, "".join(json.dumps(r.model_dump(mode="json"), ensure_ascii=False) + "\n"
                                         for r in kept))
        report = SourceReport(source=self.name, out_dir=str(out), tasks_file=str(tasks_file), n_tasks=len(kept),
                              check=check, rejected=dict(rejected), problems=problems,
                              duration_s=round(time.monotonic() - start, 3))
        write_atomic(out / "source_report.json", report.model_dump_json(indent=2) + "\n")
        return report

    def _screen(self, record: TaskRecord, kept: list[TaskRecord]) -> tuple[str, str] | None:
        if record.source != self.label:
            return "wrong_source", f"labelled {record.source}, the source makes {self.label}"
        if not is_task_id(record.instance_id):
            return "bad_id", "not <project>__<part>-<part>... (task_sources.task_id)"
        if any(r.instance_id == record.instance_id for r in kept):
            return "duplicate_id", "a task with this id was kept already"
        return None

    def render(self, report: Any, quiet: bool = False) -> str:
        """The report as the command prints it."""
        lines = [f"{'reason':<16} tasks", *(f"{k:<16} {v:>5}" for k, v in sorted(report.rejected.items())),
                 *report.problems] if report.rejected else []
        return "\n".join([*lines, f"{report.n_tasks} {self.name} task(s) in {report.tasks_file} "
                                  f"({report.duration_s:.1f}s, check: {report.check})"])

    def exit_code(self, report: Any) -> int:
        """0 when the run made what it should, else 1."""
        return 0 if report.ok else 1


def run_command(source: str | TaskSource, settings: dict[str, Any], out: str | Path, *, command: str,
                log: Log | None = None, quiet: bool = False) -> int:
    """What a source's command does (``task-factory make NAME``, ``build``, ``mine``, ``import``): the
    source (a name: with ``settings``) run into ``out``, its report on stdout; the exit code (2: bad input
    or a failed download or sandbox, in one line on stderr naming ``command``)."""
    if isinstance(source, str):
        cls = source_class(source)
        try:
            source = cls(cls.options_class(**settings))
        except ValidationError as exc:
            print(f"{command}: {options_error(exc, cls.options_class)}", file=sys.stderr)
            return 2
    try:
        report = source.make(out, log)
    except source.errors as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return 2
    print(source.render(report, quiet=quiet))
    return source.exit_code(report)


# -- the registry ----------------------------------------------------------------------------------

SOURCES: dict[str, str | type[TaskSource]] = {
    "release-diff": ".mine:MinedSource",
    "synthetic-mutation": ".build:SyntheticSource",
    "swe-bench": ".datasets.importer:DatasetSource",
}


def register_source(cls: type[TaskSource]) -> type[TaskSource]:
    """Add a source to the registry (usable as a class decorator); its name must be new, its label one
    of the record's ``source`` values, its summary one line."""
    if cls.name in SOURCES and source_class(cls.name) is not cls:
        raise ValueError(f"a task source named {cls.name!r} is already registered")
    if cls.label not in get_args(TaskLabel):
        raise ValueError(f"task source {cls.name!r}: label {cls.label!r} is not a record's source "
                         f"({', '.join(get_args(TaskLabel))}; a new kind of task adds its label to verifier.task)")
    if not cls.summary or "\n" in cls.summary:
        raise ValueError(f"task source {cls.name!r}: its summary is one line")
    SOURCES[cls.name] = cls
    return cls


def source_names() -> tuple[str, ...]:
    """The registered sources' names, in registry order."""
    return tuple(SOURCES)


def source_class(name: str) -> type[TaskSource]:
    """The class registered as ``name`` (imported on first use)."""
    return resolve(SOURCES, name, __package__, "task source")
