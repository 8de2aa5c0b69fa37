"""One SWE episode: a task, its sandbox, the step loop and its trace.

``step`` validates the call, runs the tool, attaches error-site markers on
failures, grades on ``submit`` (or when the step budget runs out) and appends
the step to the trace before the observation is returned.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from contract import (
    Action,
    CallToolAction,
    ContextSpec,
    EpisodeState,
    ErrorCode,
    ErrorKind,
    ListToolsAction,
    SWEObservation,
    ToolProfile,
    get_profile,
)
from sandbox import (ArgumentError, DiffTooLarge, DiffUnreadable, SandboxConfig, SandboxError, WarmPool,
                     open_sandbox)
from sandbox.base import Sandbox
from sandbox.models import ExactDiff
from verifier import GradeCache, GradeResult, grade_submission
from verifier.task import TaskInstance

from .errors import ProtocolError
from .gradings import GradingQueue
from .markers import ToolFailure, failure
from .tools import ToolContext, ToolOutcome, parse_arguments, run_tool
from .traces import ForkPoint, TraceStore, TraceWriter

log = logging.getLogger(__name__)


class EpisodeConfig(BaseModel):
    """Per-episode policy shared by every session of a server."""

    model_config = ConfigDict(extra="forbid")

    max_steps: int = Field(100, gt=0, description="steps before the episode is graded and ends")
    grade_mode: Literal["resolved", "pass_rate"] = Field("resolved", description=(
        "reward: 1.0 only when every FAIL_TO_PASS and PASS_TO_PASS test passes, or the fraction that pass"))
    grade_timeout_s: float = Field(900.0, gt=0, description="wall-clock limit of one grading run")
    trace_diffs: Literal["all", "edits"] = Field(
        "all", description="record the workspace diff after every mutating step, or only after edit tools")
    trace_fsync: bool = Field(False, description="fsync every trace record")
    exact_patch_max_bytes: int = Field(
        4 * 1024 * 1024, gt=0, description="largest exact (--binary) patch kept in a trace (on disk only), for "
        "a workspace whose text diff cannot rebuild it (binary files, bytes that are not UTF-8); past it the "
        "step is recorded with exact_patch_error and cannot be forked")


class Episode:
    """Created by :meth:`start`; driven by one session at a time."""

    def __init__(self, episode_id: str, task: TaskInstance, sandbox: Sandbox, sandbox_config: SandboxConfig,
                 config: EpisodeConfig, trace: TraceWriter, cache: GradeCache | None,
                 profile: ToolProfile | None = None) -> None:
        self.episode_id = episode_id
        self.profile = profile or get_profile(None)  # the tools it serves (contract/tools.py)
        self.task = task
        self.sandbox = sandbox
        self.sandbox_config = sandbox_config
        self.config = config
        self.trace = trace
        self.cache = cache
        self.step_count = 0
        self.done = False
        self.reward: float | None = None
        self.step_offset = 0  # a fork's history: steps of its budget the original already used
        # The last diff fields written to the trace (None: unknown, the next diff is recorded).
        self._recorded_diff: dict[str, Any] | None = {"diff": ""}
        self._graded_diff: ExactDiff | None = None
        # Whether an agent's tool call may have changed the workspace: from then on, a workspace whose
        # diff cannot be read is what the agent left (before, the server is to blame).
        self._agent_changed = False
        # set once its first step is done or it closes: the jail of the episode it replaced then goes
        self.stepped: asyncio.Event | None = None
        self.gradings: GradingQueue | None = None  # the replica's grading queue (None: grade at once)
        self.submitted_patch: str | None = None  # the patch a command submitted (a profile's sentinel)

    @classmethod
    async def start(cls, episode_id: str, task: TaskInstance, store: TraceStore, sandbox_config: SandboxConfig,
                    config: EpisodeConfig, cache: GradeCache | None = None,
                    context: ContextSpec | None = None, fork: ForkPoint | None = None,
                    owner: str | None = None, pool: WarmPool | None = None,
                    refill_pool: bool = True, profile: ToolProfile | None = None) -> tuple["Episode", SWEObservation]:
        """Open the sandbox, write the reset record, return the episode and its first observation.

        ``owner``: the client that creates it (recorded in the reset record; None on a server without tokens).
        ``pool``: where the sandbox comes from when given (a pre-started jail, as fresh as a cold one);
        ``refill_pool``: whether the claim refills the pool for this task (no: the server primes it ahead).
        ``profile``: the tool profile it serves (None: the default; a fork serves its original's).

        ``fork``: start from a recorded episode after its step t (``task`` is its task): the
        workspace is the task's scrubbed template with the recorded diff applied (verified), the
        context the original's (its reset record's prompt fields and its steps up to t).
        """
        if store.exists(episode_id):
            raise ProtocolError(ErrorCode.VALIDATION_ERROR, f"episode_id {episode_id!r} was already used")
        spec = task.workspace_spec()
        sandbox = await (pool.open(spec, sandbox_config, refill=refill_pool) if pool is not None
                         else open_sandbox(spec, sandbox_config))
        try:
            if fork is not None:
                await restore_workspace(sandbox, fork)
            trace = store.writer(episode_id, owner)
        except BaseException:
            await sandbox.close()
            raise
        if fork is not None:
            profile = get_profile(fork.head.get("profile"))
        ep = cls(episode_id, task, sandbox, sandbox_config, config, trace, cache, profile)
        tools = [t.mcp() for t in ep.profile.specs()]
        record: dict[str, Any] = {"kind": "reset", "episode_id": episode_id,
                                  **({"owner": owner} if owner is not None else {}), "instance_id": task.instance_id,
                                  "profile": ep.profile.name, "system": ep.profile.instructions,
                                  "issue": task.problem_statement, "tools": tools}
        extra: dict[str, Any] = {}
        if fork is not None:
            ep.step_offset = len(fork.history)
            ep._recorded_diff = {"diff": fork.diff, **({"exact_patch": fork.exact_patch} if fork.exact_patch else {})}
            extra = {"fork_of": fork.episode_id, "fork_t": fork.t}
            # the original's presentation, so that state(t) of the fork continues the original's context
            record.update({k: fork.head[k] for k in ("system", "issue", "tools", "context") if k in fork.head})
        obs = SWEObservation(output=task.problem_statement, issue=task.problem_statement, tools=tools,
                             metadata=ep._meta(**extra))
        record.update(observation=obs.model_dump(), **ep._recorded_diff, trace_diffs=config.trace_diffs,
                      time=time.time())
        if fork is not None:
            record.update(fork_of=fork.episode_id, t=fork.t, history=fork.history)
        elif context is not None:  # the client's presentation: state(t) renders the policy's own context
            record["context"] = context.model_dump()
        trace.append(record)
        return ep, obs

    def _meta(self, **extra: Any) -> dict[str, Any]:
        return {"episode_id": self.episode_id, "step": self.step_count, "instance_id": self.task.instance_id,
                "task_source": self.task.source, **extra}

    @property
    def state(self) -> EpisodeState:
        return EpisodeState(episode_id=self.episode_id, step_count=self.step_count,
                            instance_id=self.task.instance_id, done=self.done, reward=self.reward)

    async def step(self, action: CallToolAction | ListToolsAction) -> SWEObservation:
        if self.done:
            raise ProtocolError(ErrorCode.EPISODE_DONE, "the episode is done; reset to start a new one",
                                episode_id=self.episode_id)
        if (self.gradings is not None and self.gradings.full and isinstance(action, CallToolAction)
                and action.tool_name == "submit"):
            self.gradings.refused += 1
            raise ProtocolError(ErrorCode.GRADER_BUSY, f"the grading queue is full ({self.gradings.running} "
                                f"gradings running, {self.gradings.waiting} waiting): nothing was done, submit "
                                "again later", retry_after_s=self.gradings.retry_after_s())
        started = time.perf_counter()
        self.step_count += 1
        obs, changed = await self._act(action)
        if not self.done and self.step_count + self.step_offset >= self.config.max_steps:
            if self.profile.submit_tool is not None:
                grade, note = await self._grade(), "your changes were graded"
            else:  # a profile that submits only by its sentinel line (mini-swe-agent's): nothing was submitted
                grade = GradeResult(reward=0.0, mode=self.config.grade_mode, error_source="agent",
                                    error="nothing was submitted (the submit line never ran)")
                note = "nothing was submitted"
            obs = self._finish(obs, grade, note=f"[step budget of {self.config.max_steps} used up: {note}]")
        diff = await self._trace_diff(changed)
        if self.submitted_patch is not None:  # graded instead of the workspace's diff: kept with the step
            diff["submission"] = self.submitted_patch
        record = {"kind": "step", "t": self.step_count, "action": _action_record(action),
                  "observation": obs.model_dump(), **diff, "time": time.time(),
                  "latency_s": round(time.perf_counter() - started, 6)}
        self.trace.append(record)
        if self.stepped is not None:
            self.stepped.set()
        if self.done:
            await self.close_sandbox()
        return obs

    async def _act(self, action: Action) -> tuple[SWEObservation, str | None]:
        """Run the action; return its observation and the tool that may have changed the workspace."""
        if isinstance(action, ListToolsAction):
            return SWEObservation(tools=[t.mcp() for t in self.profile.specs()], metadata=self._meta()), None
        name = action.tool_name
        args = parse_arguments(self.profile, name, action.arguments)
        if isinstance(args, ToolFailure):
            return self._failed(name, "", args), None
        tool = self.profile.tool(name)
        assert tool is not None  # parse_arguments refused any other name
        if tool.submits:
            grade = await self._grade()
            return self._finish(SWEObservation(tool_name=name, metadata=self._meta()), grade), None
        if tool.mutates:
            self._agent_changed = True
        context = ToolContext(blocked_tools=tuple(self.sandbox_config.policy.blocked_tools),
                              max_timeout_s=self.sandbox_config.limits.max_command_timeout_s,
                              profile=self.profile,
                              output_limit=self.sandbox_config.limits.max_output_bytes,
                              submission_limit=self.config.exact_patch_max_bytes)
        try:
            outcome = await run_tool(self.sandbox, args, context)
        except ArgumentError as exc:  # the runtime refused the agent's arguments
            return self._failed(name, "", failure(ErrorKind.invalid_arguments, str(exc))), None
        except SandboxError as exc:
            self.done = True
            return self._failed(name, "", failure(ErrorKind.sandbox_error, f"{type(exc).__name__}: {exc}")), None
        except Exception as exc:  # a server bug or a malformed runtime reply: never the agent's mistake
            log.exception("episode %s: %s call failed inside the server", self.episode_id, name)
            self.done = True
            return self._failed(name, "", failure(ErrorKind.internal_error, f"{type(exc).__name__}: {exc}")), None
        # what may have changed the workspace: a command ("bash": ``--trace-diffs edits`` skips its diff)
        # whatever its outcome, an edit tool only when it succeeded
        changed = ("bash" if outcome.ran_command else name) if tool.mutates and outcome.files_changed is not False else None
        extra = self._command_meta(outcome)
        if outcome.submission is not None:  # the profile's sentinel: the command's output is the patch
            grade = await self._grade(submission=outcome)
            obs = SWEObservation(output=outcome.output, tool_name=name, metadata=self._meta(**extra))
            return self._finish(obs, grade), changed
        if outcome.failure is not None:
            if outcome.failure.kind is ErrorKind.sandbox_error or not self.sandbox.alive:
                self.done = True
            changed = changed if outcome.ran_command else None
            return self._failed(name, outcome.output, outcome.failure, **extra), changed
        return SWEObservation(output=outcome.output, tool_name=name, metadata=self._meta(**extra)), changed

    def _command_meta(self, outcome: ToolOutcome) -> dict[str, Any]:
        """A ``returncode``-style profile's command fields (what mini-swe-agent's observation shows)."""
        if self.profile.output_style != "returncode" or outcome.returncode is None:
            return {}
        return {"returncode": outcome.returncode,
                **({"exception_info": outcome.exception_info} if outcome.exception_info else {})}

    def _failed(self, name: str, output: str, fail: ToolFailure, **extra: Any) -> SWEObservation:
        text = output if output else f"Error: {fail.message}"
        if output and fail.kind not in (ErrorKind.nonzero_exit, ErrorKind.test_failure) and not extra:
            text = f"{output}\n[{fail.message}]"
        return SWEObservation(output=text, tool_name=name, done=self.done,
                              metadata=self._meta(**extra, **fail.metadata()))

    async def _grade(self, submission: ToolOutcome | None = None) -> GradeResult:
        """Grade the workspace's diff, or the patch a command ``submission`` printed after the profile's
        sentinel (mini-swe-agent's protocol: that text is the submission, filtered like any diff).
        What the agent left in the workspace never makes an ``infra`` failure: a diff over the limit, or
        one the runtime cannot read once the agent changed the workspace (git failing on what it holds,
        an unreadable /workspace), is the agent's zero; so is a printed patch cut at the output limit."""
        if submission is not None:
            self.submitted_patch = submission.submission
            if submission.submission_cut:
                return GradeResult(reward=0.0, mode=self.config.grade_mode, error_source="agent",
                                   error="the submission cannot be graded: the patch printed after the submit "
                                         f"line is over {self.config.exact_patch_max_bytes} bytes (exact_patch_max_bytes)")
            return await self._grade_text(submission.submission or "")
        try:
            diff = await self._read_diff()
        except DiffTooLarge as exc:  # what the agent wrote: its zero, never a masked infra failure
            return GradeResult(reward=0.0, mode=self.config.grade_mode, error_source="agent",
                               error=f"the submission cannot be graded: {exc}")
        except DiffUnreadable as exc:
            return GradeResult(reward=0.0, mode=self.config.grade_mode,
                               error_source="agent" if self._agent_changed else "infra",
                               error=f"could not read the workspace diff: {exc}")
        except SandboxError as exc:
            return GradeResult(reward=0.0, mode=self.config.grade_mode, error_source="infra",
                               error=f"could not read the workspace diff: {exc}")
        self._graded_diff = diff
        return await self._grade_text(diff.text)

    async def _grade_text(self, diff: str) -> GradeResult:
        async with (self.gradings.slot() if self.gradings is not None else contextlib.nullcontext()):
            return await grade_submission(self.task, diff, self.sandbox_config, self.config.grade_mode,
                                          cache=self.cache, timeout_s=self.config.grade_timeout_s)

    async def _read_diff(self) -> ExactDiff:
        """The workspace diff, with what it left out (``skipped``), and its exact patch when the text
        may not rebuild the workspace (git's "Binary files ... differ", bytes that are not UTF-8)."""
        return await self.sandbox.diff_exact(self.config.exact_patch_max_bytes)

    def _finish(self, obs: SWEObservation, grade: GradeResult, note: str = "") -> SWEObservation:
        self.done = True
        self.reward = grade.reward
        meta = {**obs.metadata, **grade.metadata()}
        unread = self._graded_diff.skipped if self._graded_diff is not None else []
        if unread:  # parts of the workspace the diff could not hold: left out of the submission
            meta["unread"] = list(unread)
        if grade.tampered:
            meta.update(failure(ErrorKind.grading_tampered, grade.error or "grading tampered").metadata())
        elif grade.error and grade.error_source in ("env", "infra"):
            kind = ErrorKind.sandbox_error if grade.error_source == "infra" else ErrorKind.grading_error
            meta.update(failure(kind, grade.error).metadata())
        summary = (f"Submitted. Hidden tests: {grade.tests_passed} passed, {grade.tests_failed} failed. "
                   f"Reward {grade.reward:g}.")
        if grade.error:
            summary += f" ({grade.error})"
        if unread:
            summary += (f" Left out of the submission, unreadable as a diff: {'; '.join(unread[:5])}"
                        + (f" and {len(unread) - 5} more." if len(unread) > 5 else "."))
        output = "\n\n".join(p for p in (obs.output, note.strip(), summary) if p)
        return obs.model_copy(update={"output": output, "done": True, "reward": grade.reward, "metadata": meta})

    async def _trace_diff(self, changed_by: str | None) -> dict[str, Any]:
        """The step record's diff fields: ``diff`` null when unchanged (or not tracked), else the diff

        (with ``exact_patch``, or ``exact_patch_error``, when the text cannot rebuild the workspace);
        ``diff_error`` when it could not be read, ``diff_skipped`` when a ``bash`` step changed files
        and ``--trace-diffs edits`` took no diff (both: unknown until a diff is recorded again)."""
        if self._graded_diff is not None:
            diff = self._graded_diff
        elif changed_by is None:
            return {"diff": None}
        elif self.config.trace_diffs == "edits" and changed_by == "bash":
            self._recorded_diff = None
            return {"diff": None, "diff_skipped": True}
        else:
            try:
                diff = await self._read_diff()
            except Exception as exc:  # unknown, not "unchanged": the record says so (state(t) too)
                if not isinstance(exc, SandboxError):  # a malformed reply, a server bug: logged, the step stands
                    log.exception("episode %s: reading the workspace diff failed inside the server", self.episode_id)
                self._recorded_diff = None
                return {"diff": None, "diff_error": f"{type(exc).__name__}: {exc}"}
        fields: dict[str, Any] = {"diff": diff.text}
        if diff.skipped:
            fields["unread"] = list(diff.skipped)
        if diff.lossy and diff.patch is not None:
            fields["exact_patch"] = base64.b64encode(diff.patch).decode("ascii")
        elif diff.lossy:
            fields["exact_patch_error"] = diff.patch_error or "no exact patch"
        if fields == self._recorded_diff:
            return {"diff": None}
        self._recorded_diff = fields
        return fields

    async def close_sandbox(self) -> None:
        await self.sandbox.close()

    async def close(self) -> None:
        """Free the sandbox and close the trace (the trace stays on disk)."""
        if self.stepped is not None:
            self.stepped.set()
        try:
            await self.sandbox.close()
        finally:
            self.trace.close()


async def restore_workspace(sandbox: Sandbox, fork: ForkPoint) -> None:
    """Rebuild a recorded workspace on a fresh sandbox: the template plus the recorded patch, verified.

    The exact ``--binary`` patch where one was recorded (binary files, bytes that are not UTF-8),
    else the text diff. Then the fresh diff must equal the recorded one (``index`` lines aside: their
    abbreviated hashes may be longer in one object store than the other); the exact patch must
    match too (its full-index hashes name every file's content). FORK_UNAVAILABLE otherwise.
    """
    def refuse(why: str) -> ProtocolError:
        return ProtocolError(ErrorCode.FORK_UNAVAILABLE, f"cannot fork episode {fork.episode_id!r} at step "
                             f"{fork.t}: {why}", fork_of=fork.episode_id, t=fork.t)

    try:
        patch = base64.b64decode(fork.exact_patch, validate=True) if fork.exact_patch else fork.diff.encode("utf-8")
    except (binascii.Error, ValueError):
        raise refuse("its recorded exact patch is corrupt") from None
    if patch:
        try:
            await sandbox.apply_patch(patch)
        except ArgumentError as exc:
            raise refuse(f"the recorded diff does not apply to the task's workspace: {exc}") from None
    got = await sandbox.diff_exact(0)
    same = _without_index(got.text) == _without_index(fork.diff)
    if fork.exact_patch:
        same = same and got.patch is not None and _patch_signature(got.patch) == _patch_signature(patch)
    if not same:
        raise refuse("the restored workspace differs from the recorded one")


def _without_index(diff: str) -> list[str]:
    """A text diff's lines but its ``index`` lines (header lines; a hunk line starts with " ", "+", "-" or "\\")."""
    return [line for line in diff.split("\n") if not line.startswith("index ")]


def _patch_signature(patch: bytes) -> list[bytes]:
    """A ``--binary --full-index`` patch without its binary payloads (deflate output may vary):

    the full-index hashes still name every file's content, the hunks every text change."""
    out: list[bytes] = []
    payload = False
    for line in patch.split(b"\n"):
        if line.startswith(b"diff --git "):
            payload = False
        elif payload:
            continue
        out.append(line)
        payload = payload or line == b"GIT binary patch"
    return out


def _action_record(action: Action) -> dict[str, Any]:
    if isinstance(action, ListToolsAction):
        return {"type": "list_tools"}
    record = {"type": "call_tool", "tool_name": action.tool_name, "arguments": action.arguments}
    if action.metadata:  # the client's turn bookkeeping (turn, assistant, origin): state(t) reads it
        record["metadata"] = action.metadata
    return record
