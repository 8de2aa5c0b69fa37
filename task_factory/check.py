"""The one check of a task: its gold patch graded 1.0 and an empty diff 0.0 by the verifier.

Every task the factory writes or reads is checked here and only here: ``task-factory validate``,
``build`` and ``mine`` (``--check``, before a task is written) and the test packs. The grading is
``verifier.grade_submission``, the server's own grader, in a fresh sandbox of the chosen backend: the
task factory has no grader of its own. For speed, the two gradings of a task run at once (each in its
own sandbox, from the one template the sandbox prepares per repository and commit), ``validate``
checks several tasks at once, and ``build``/``mine`` cache each check by the task's content and the
grader's version (``check_record``), so a rebuild grades nothing.

A task the factory writes must also be *guarded* (``check_record``): either the script check
(docs/grading.md, guarantee 8) stands behind its test run, or a guess at its canaries that first runs
the members honestly scores with at most ``TARGET_BOUND`` (1%). A task whose reward would rest on
canaries a member-running guess beats more often than that is not written (``validate`` names such
tasks of any file).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from pydantic import BaseModel, Field

from sandbox import DEFAULT_BACKEND, backend_names
from sandbox.models import SandboxConfig
from verifier import GRADER_VERSION, GradeCache, TaskInstance, TaskRecord, grade_submission
from verifier.canary import TARGET_BOUND

from .sources import TaskgenError
from .verdicts import VerdictCache, digest

NO_CHECK = "none"


def check_choices() -> tuple[str, ...]:
    """What ``--check`` takes: a sandbox backend of the registry, or ``none`` (write tasks unchecked)."""
    return (*backend_names(), NO_CHECK)


class TaskCheck(BaseModel):
    """Both gradings of one task."""

    gold_reward: float | None = None
    empty_reward: float | None = None
    error: str | None = Field(None, description="why the task fails its check (None: gold 1.0, empty 0.0)")
    script_check: str | None = Field(None, description="the script check of the gold patch (docs/grading.md, "
                                     "guarantee 8): calls checked and FAIL_TO_PASS tests covered, or why none")
    infra: bool = Field(False, description="a sandbox failed: no verdict on the task (never cached)")
    guess_bound: float | None = Field(None, description="the gold grading's chance that a blind guess at the "
                                      "canaries (one member of each group forced to pass) scores (docs/grading.md, "
                                      "guarantee 2)")
    guess_bound_f2p: float | None = Field(None, description="the same over the FAIL_TO_PASS groups only: a guess "
                                          "that first runs the members honestly and reads their assertions")
    script_checked: bool = Field(False, description="the gold grading's script check ran with at least one "
                                 "checked call or plain test (guarantee 8: a forgery inside the test run fails it)")

    @property
    def ok(self) -> bool:
        return self.error is None and self.gold_reward == 1.0 and self.empty_reward == 0.0

    @property
    def unguarded(self) -> str | None:
        """Why the reward would rest on the canaries alone with a member-running guess over TARGET_BOUND
        (None: guarded)."""
        if self.script_checked or self.guess_bound_f2p is None or self.guess_bound_f2p <= TARGET_BOUND:
            return None
        return (f"unguarded: no script check stands behind the test run ({self.script_check or 'none'}) and a "
                f"guess at the canaries that first runs and reads their members scores with {self.guess_bound_f2p:.2g} "
                f"(over {TARGET_BOUND:g}; docs/grading.md, guarantees 2 and 8)")


#: bumped when what the check demands changes (cached verdicts of an older check are not reused)
CHECK_VERSION = 3


async def check_task(task: TaskInstance, config: SandboxConfig | None = None) -> TaskCheck:
    """Grade ``task``'s gold patch and an empty diff with the verifier (both at once); the check holds
    when the gold patch scores 1.0 and the empty diff 0.0."""
    config = config or SandboxConfig(backend=DEFAULT_BACKEND)
    gold, empty = await asyncio.gather(
        grade_submission(task, task.patch, config, "resolved", cache=GradeCache(max_entries=0)),
        grade_submission(task, "", config, "resolved", cache=GradeCache(max_entries=0)))
    errors = []
    if gold.tampered:  # the gold patch is not an attack: the task trips the grader's checks (env)
        errors.append("broken task: the grader's tamper checks fail with the gold patch: "
                      + "; ".join(gold.tamper_reasons[:3]))
    elif gold.reward != 1.0:
        errors.append("gold patch does not resolve: " + "; ".join(filter(None, [gold.error, _failing(gold)])))
    if empty.reward != 0.0:
        errors.append(f"empty diff passes: its {len(empty.fail_to_pass)} FAIL_TO_PASS test(s) pass without a fix")
    if empty.error_source == "infra":
        errors.append(f"empty: {empty.error}")
    check = gold.script_check or {}
    return TaskCheck(gold_reward=gold.reward, empty_reward=empty.reward, error="; ".join(errors) or None,
                     script_check=script_check_summary(gold.script_check),
                     infra="infra" in (gold.error_source, empty.error_source),
                     guess_bound=gold.guess_bound, guess_bound_f2p=gold.guess_bound_f2p,
                     script_checked=bool(check.get("ran") and (check.get("checked_calls") or check.get("tests_checked"))))


def check_record(record: TaskRecord, root: Path, backend: str, verdicts: VerdictCache) -> str | None:
    """Why the task ``record`` (paths relative to ``root``) fails its check with ``backend`` (None: it
    holds: gold 1.0, empty 0.0, and guarded: ``TaskCheck.unguarded``), cached in ``verdicts`` by the task's content and the grader's version. Raises TaskgenError
    when the sandbox fails (no verdict on the task: nothing cached)."""
    graded = [record.instance_id, record.base_commit, record.patch, record.test_patch, *record.FAIL_TO_PASS, "|",
              *record.PASS_TO_PASS, record.test_cmd or "", record.log_parser or ""]
    key = f"check-{backend}-" + digest(GRADER_VERSION, CHECK_VERSION, *graded)
    cached = verdicts.load(key)
    if cached is None:
        task = TaskInstance.model_validate(record.model_dump()).resolved(root)
        result = asyncio.run(check_task(task, SandboxConfig(backend=backend)))
        if result.infra:
            raise TaskgenError(f"the {backend} sandbox failed while checking {record.instance_id} "
                               f"(--check {NO_CHECK} writes tasks unchecked): {result.error}")
        cached = {"error": result.error or (result.unguarded if result.ok else None)}
        verdicts.store(key, cached)
    return cached["error"]


def script_check_summary(check: dict | None) -> str | None:
    """``"4 calls, 3 tests"`` (checked calls, FAIL_TO_PASS tests with one), or ``"none: why"``."""
    if not check:
        return None
    if check.get("ran"):
        return (f"{check.get('checked_calls', 0)} calls, {check.get('tests_checked', 0)} tests"
                + ("" if check.get("holds") else " FAILS"))
    return f"none: {check.get('reason', '')}"


_WHY = {"missing": "missing (the log never names it)", "failed": "failed", "error": "error",
        "skipped": "skipped", "xfailed": "xfailed (not a fix)"}


def _failing(result) -> str:
    """Which tests keep ``result`` from 1.0, and why: an id the run cannot select (no such test in the
    graded tree), one the log never names, a failure."""
    from verifier.junit import PASSING

    tests = {**result.fail_to_pass, **result.pass_to_pass}
    not_found = set(getattr(result, "not_found", []) or [])
    bad = [(t, o) for t, o in tests.items()
           if o not in PASSING or (t in result.fail_to_pass and o != "passed")]
    if not bad:
        return "" if result.error else "reward below 1"
    why = [f"{t} {'not found (names no test of the graded tree)' if t in not_found else _WHY.get(o, o)}"
           for t, o in bad]
    more = f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""
    return f"{len(bad)} of {len(tests)} test(s) not passing: " + ", ".join(why[:3]) + more
