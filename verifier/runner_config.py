"""The grader's pytest configuration, taken from the task's *pristine* tree.

Settings a task's suite needs (markers, ``pythonpath``, ``filterwarnings``,
``xfail_strict``, ...) are copied from the base commit's own configuration, in
pytest's precedence (pytest.ini, .pytest.ini, pyproject.toml, tox.ini, setup.cfg).
``addopts`` keeps only options that cannot load code, redirect reports or hide the
report the grader reads (``--no-summary``); where anything was left out, the grader
writes this configuration as the graded tree's ``pytest.ini`` (grade.py), else the
pristine configuration is used as it is. What is kept cannot hide a result from the
log reader (``pytest_log.py``): colour (``--color=yes``) is removed from the log before
it is read, verbosity (``-q``/``-qq``/``-v``/``-vv``) leaves the short test summary as it
is, and the graded command's own ``-rA`` comes after ``addopts`` (the last ``-r`` wins).
"""

from __future__ import annotations

import configparser
import functools
import shlex
import tomllib
from pathlib import Path

from pydantic import BaseModel, Field

from sandbox import SandboxConfig
from sandbox.git import run_git
from sandbox.workspace import prepare_template

from .task import TaskInstance

WORKSPACE = "/workspace"
# (file, section) in pytest's own order of precedence; None: the whole file is pytest's.
CONFIG_SOURCES: tuple[tuple[str, str | None], ...] = (
    ("pytest.ini", "pytest"), (".pytest.ini", "pytest"), ("pyproject.toml", "tool.pytest.ini_options"),
    ("tox.ini", "pytest"), ("setup.cfg", "tool:pytest"),
)
# Never copied: the grader sets these itself, or they name files/plugins/paths.
_DROPPED_KEYS = {"addopts", "cache_dir", "junit_family", "junit_logging", "junit_log_passing_tests",
                 "junit_suite_name", "junit_duration_report", "log_file", "rootdir", "confcutdir"}
# addopts options kept (flag alone or with an `=` value); everything else is dropped.
_SAFE_FLAGS = {"--strict-markers", "--strict-config", "--strict", "--doctest-modules",
               "--doctest-continue-on-failure", "-l", "--showlocals", "-v", "-vv", "-q", "-s", "-ra", "-rA",
               "--no-header", "--disable-warnings", "--disable-pytest-warnings"}
_SAFE_WITH_VALUE = {"--import-mode", "--doctest-glob", "--tb", "--color", "--durations", "--capture", "-W",
                    "--pythonwarnings", "--ignore", "--ignore-glob", "--deselect", "--log-level", "-r",
                    "--doctest-report", "--assert"}


class RunnerConfig(BaseModel):
    """The grader's pytest.ini text, where it came from, and what was left out."""

    ini: str
    source: str | None = Field(None, description="pristine file the settings came from (None: pytest defaults)")
    dropped_options: list[str] = Field(default_factory=list)


def _safe_addopts(value: str) -> tuple[list[str], list[str]]:
    try:
        tokens = shlex.split(value)
    except ValueError:
        return [], [value]
    kept: list[str] = []
    dropped: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        name = tok.split("=", 1)[0]
        if tok in _SAFE_FLAGS:
            kept.append(tok)
        elif name in _SAFE_WITH_VALUE and "=" in tok:
            kept.append(tok)
        elif tok in _SAFE_WITH_VALUE and i + 1 < len(tokens):
            kept += [tok, tokens[i + 1]]
            i += 1
        elif tok.startswith("-W") and len(tok) > 2 or tok.startswith("-r") and len(tok) > 2 and tok[2:].isalpha():
            kept.append(tok)
        else:
            dropped.append(tok)
        i += 1
    return kept, dropped


def _as_lines(value: object) -> str:
    if isinstance(value, list):
        return "\n" + "\n".join(f"    {v}" for v in value) if value else ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).replace("\n", "\n    ")


def _options(name: str, section: str | None, text: str) -> dict[str, object] | None:
    if name.endswith(".toml"):
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            return None
        node: object = data
        for part in (section or "").split("."):
            node = node.get(part) if isinstance(node, dict) else None
        return dict(node) if isinstance(node, dict) else None
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        parser.read_string(text)
    except configparser.Error:
        return None
    if section not in parser:
        return None
    return dict(parser[section])


def render(options: dict[str, object], source: str | None) -> RunnerConfig:
    lines = ["[pytest]"]
    dropped: list[str] = []
    for key, value in options.items():
        if key == "addopts":
            kept, lost = _safe_addopts(" ".join(value) if isinstance(value, list) else str(value))
            dropped += lost
            if kept:
                lines.append(f"addopts = {shlex.join(kept)}")
            continue
        if key in _DROPPED_KEYS:
            dropped.append(key)
            continue
        if key == "pythonpath":  # "paths" options are relative to the ini file: make them absolute
            entries = value if isinstance(value, list) else str(value).split()
            value = [e if e.startswith("/") else f"{WORKSPACE}/{e}".rstrip("/.") or WORKSPACE for e in entries]
        lines.append(f"{key} = {_as_lines(value)}")
    return RunnerConfig(ini="\n".join(lines) + "\n", source=source, dropped_options=dropped)


def _read_pristine(repo: Path, commit: str | None, name: str) -> str | None:
    if commit is None:
        p = repo / name
        return p.read_text(encoding="utf-8", errors="replace") if p.is_file() else None
    proc = run_git(["show", f"{commit}:{name}"], repo, check=False)
    return proc.stdout.decode("utf-8", "replace") if proc.returncode == 0 else None


@functools.lru_cache(maxsize=1024)
def _pristine_config(repo: str, commit: str | None) -> RunnerConfig:
    for name, section in CONFIG_SOURCES:
        text = _read_pristine(Path(repo), commit, name)
        if text is None:
            continue
        options = _options(name, section, text)
        if options is None and name in ("pytest.ini", ".pytest.ini"):
            options = {}  # pytest takes a pytest.ini even without its section
        if options is not None:
            return render(options, name)
    return render({}, None)


def runner_config(task: TaskInstance, sandbox: SandboxConfig | None = None) -> RunnerConfig:
    """The grader's pytest configuration for ``task`` (from its base commit; cached).

    An image-resident task's base tree is its scrubbed workspace template (built from
    the image, blocking: call in a thread).
    """
    if task.repo_path is None:
        template = prepare_template(task.workspace_spec(), sandbox or SandboxConfig(backend="docker"))
        return _pristine_config(str(template.path), template.base_commit)
    return _pristine_config(str(task.repo_path), task.base_commit)
