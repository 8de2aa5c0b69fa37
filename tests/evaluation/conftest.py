"""Fixtures of the evaluation tests: a small pack of real tasks whose gold patch passes, and one
real env server (bwrap sandbox, real HTTP) shared by the session.

The policy is always a test double (tests/support/policy_double.py: an OpenAI-compatible server in its own
process), never a model; everything else (env server, sandbox, grading, the evaluator, the
`trainer-client` command) is the real thing. tests/evaluation/ is deliberately not a package:
as one it would be imported as `evaluation` (tests/ is on sys.path) and hide the real package.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from support.requirements import missing


@pytest.fixture(scope="session")
def pack_tasks_file() -> Path:
    """tests/support/taskpacks.py's small pack (three real tasks of three repositories). Where the builder
    cannot make it: fail under CI / SWE_REQUIRE_TASKPACK=1, skip otherwise (tests/trainer's rule)."""
    from support.taskpacks import build_small_pack

    from task_factory.sources import TaskgenError

    try:
        return build_small_pack(3)
    except RuntimeError as exc:
        if not (type(exc) is RuntimeError or isinstance(exc, TaskgenError)):
            raise
        missing("taskpack", f"the task builder could not build the small pack: {exc}"[:2000])


@pytest.fixture(scope="session")
def gold_tasks_file(bwrap, pack_tasks_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pack's tasks whose gold patch the grader resolves (graded here, in the real sandbox),
    as a task file with absolute paths. A grader that scores a task's own gold patch 0 is a known
    verifier bug on some tasks (tests referencing each other across modules); such tasks are left
    out rather than reported as the evaluator's failure. Fewer than two left: a failure."""
    from verifier.grade import grade_submission
    from verifier.task import load_tasks
    from sandbox.models import SandboxConfig

    rows = [json.loads(line) for line in pack_tasks_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    for row in rows:
        for key in ("repo_path", "python_env"):
            if row.get(key):
                row[key] = str((pack_tasks_file.parent / row[key]).resolve())
    tasks = {t.instance_id: t for t in load_tasks(pack_tasks_file)}

    async def grade_all() -> dict[str, bool]:
        out = {}
        for iid, task in tasks.items():
            out[iid] = (await grade_submission(task, task.patch, SandboxConfig())).resolved
        return out

    resolved = asyncio.run(grade_all())
    kept = [row for row in rows if resolved.get(row["instance_id"])]
    if len(kept) < 2:
        pytest.fail(f"the grader resolves the gold patch of only {len(kept)} of the pack's tasks: {resolved}")
    path = tmp_path_factory.mktemp("gold-tasks") / "tasks.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in kept), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def gold_rows(gold_tasks_file: Path) -> list[dict]:
    return [json.loads(line) for line in gold_tasks_file.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="session")
def env_server(gold_tasks_file: Path, tmp_path_factory: pytest.TempPathFactory):
    """One real env server (bwrap) on the gold tasks, shared by the session."""
    from support.servers import start_server_process

    server = start_server_process(gold_tasks_file, tmp_path_factory.mktemp("env-data"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def env_url(env_server) -> str:
    return env_server.url
