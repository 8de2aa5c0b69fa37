"""Small, cached packs of real tasks for tests.

``build_small_pack(n_tasks)``: synthetic mutations (``source: synthetic-mutation``) of
pinned PyPI sdists. ``build_mined_pack(packages)``: real historical fixes mined from
consecutive releases (``source: release-diff``). Both are built with the real builders
into the project-local, gitignored ``.cache/taskpack/`` and reused while complete; every
task is checked by the verifier in the bwrap sandbox before it is kept (gold 1.0, empty 0.0).
A file lock keeps parallel test processes from building them twice.
"""

from __future__ import annotations

import fcntl
import json
import shutil
from pathlib import Path

from task_factory import BuildReport, MineReport, build_tasks, mine_tasks
from task_factory.build import BUILDER_VERSION
from task_factory.mine import MINER_VERSION

ROOT = Path(__file__).resolve().parents[2]
PACK_DIR = ROOT / ".cache" / "taskpack"
SMALL_PACK_PACKAGES = ("inflection", "toolz", "idna")
# Release pairs of six: two kept (real fixes), the others rejected for their reasons (a fresh
# build takes about a minute: five sdists and three suites run four times each).
MINED_PACK_PACKAGES = ("six",)


def pack_check() -> str:
    """The sandbox a pack's tasks are checked in while it is built: the verifier's bwrap (without
    bubblewrap, bwrap is missing: the test fails under CI and skips elsewhere)."""
    if shutil.which("bwrap") is None:
        from support.requirements import missing

        missing("bwrap", "the task packs' tasks are checked by the verifier in the bwrap sandbox")
    return "bwrap"


def build_small_pack(n_tasks: int = 3, seed: int = 0) -> Path:
    """Path of a ``tasks.jsonl`` holding ``n_tasks`` validated tasks (built once, then cached).

    Repositories and venvs sit beside it (``repo_path``/``python_env`` are relative
    to the file). Raises RuntimeError when the builder could not make enough tasks.
    """
    out = PACK_DIR / f"pack-n{n_tasks}-s{seed}"
    tasks_file = out / "tasks.jsonl"
    PACK_DIR.mkdir(parents=True, exist_ok=True)
    with open(PACK_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _complete(out, n_tasks):
            return tasks_file
        packages = list(SMALL_PACK_PACKAGES[: max(1, min(n_tasks, len(SMALL_PACK_PACKAGES)))])
        report = build_tasks(out, packages=packages, seed=seed, max_tasks=n_tasks, min_tasks=n_tasks,
                             cache_dir=PACK_DIR / "cache", check=pack_check())
        if not report.ok:
            raise RuntimeError(f"small task pack: built {report.n_tasks}/{n_tasks} tasks: "
                               f"{[p.model_dump() for p in report.packages]}")
        return tasks_file


def load_small_pack(n_tasks: int = 3, seed: int = 0) -> list[dict]:
    """The pack's task instances as dicts with ``repo_path``/``python_env`` made absolute."""
    tasks_file = build_small_pack(n_tasks, seed)
    tasks = [json.loads(line) for line in tasks_file.read_text().splitlines() if line.strip()]
    for t in tasks:
        for key in ("repo_path", "python_env"):
            if t.get(key):
                t[key] = str((tasks_file.parent / t[key]).resolve())
    return tasks


def _complete(out: Path, n_tasks: int) -> bool:
    tasks_file = out / "tasks.jsonl"
    try:
        report = BuildReport.model_validate_json((out / "build_report.json").read_text())
    except (OSError, ValueError):
        return False
    if report.builder_version != BUILDER_VERSION or not tasks_file.is_file():
        return False
    lines = [json.loads(line) for line in tasks_file.read_text().splitlines() if line.strip()]
    return len(lines) == n_tasks and all(
        (out / t["repo_path"] / ".git").is_dir() and (out / t["python_env"] / "bin").is_dir() for t in lines)


def build_mined_pack(packages: tuple[str, ...] = MINED_PACK_PACKAGES, check: str | None = None) -> Path:
    """Path of the ``tasks.jsonl`` of the release-diff tasks mined from ``packages`` (cached).

    ``check``: the sandbox its tasks are checked in (default ``pack_check()``). Raises RuntimeError
    when the miner kept no task.
    """
    out = PACK_DIR / f"mined-{'-'.join(packages)}"
    tasks_file = out / "tasks.jsonl"
    PACK_DIR.mkdir(parents=True, exist_ok=True)
    with open(PACK_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            report = MineReport.model_validate_json((out / "build_report.json").read_text())
            done = report.miner_version == MINER_VERSION and report.n_tasks > 0 and all(
                (out / t["repo_path"] / ".git").is_dir() and (out / t["python_env"] / "bin").is_dir()
                for t in map(json.loads, tasks_file.read_text().splitlines()))
        except (OSError, ValueError, KeyError):
            done = False
        if done:
            return tasks_file
        report = mine_tasks(out, packages=list(packages), min_tasks=1, check=check or pack_check(),
                            cache_dir=PACK_DIR / "cache")
        if not report.ok:
            raise RuntimeError(f"mined task pack: no task from {packages}: {[p.model_dump() for p in report.pairs]}")
        return tasks_file


def mined_pack_or_missing(packages: tuple[str, ...] = MINED_PACK_PACKAGES) -> Path:
    """``build_mined_pack``, where a miner that cannot build it fails under CI (skips elsewhere)."""
    from support.requirements import missing

    from task_factory.sources import TaskgenError

    try:
        return build_mined_pack(packages)
    except RuntimeError as exc:  # TaskgenError (download, venv) or "no task"; not NotImplementedError & co
        if not (type(exc) is RuntimeError or isinstance(exc, TaskgenError)):
            raise
        missing("taskpack", f"the miner could not build the {'/'.join(packages)} pack: {exc}"[:2000])
