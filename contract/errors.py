"""Error frames and error-site markers: what failed, the hint key a trainer keys on, who is to blame;
the monitor's flags and what a trainer does with a flagged rollout (``SUSPICION_TABLE``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import Enum

from pydantic import BaseModel, ConfigDict


class ErrorCode(str, Enum):
    """Codes of error frames (``{"type": "error", "data": {"code", "message"}}``).

    The first seven are OpenEnv's own; the rest are this server's refinements.
    """

    INVALID_JSON = "INVALID_JSON"
    UNKNOWN_TYPE = "UNKNOWN_TYPE"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    EXECUTION_ERROR = "EXECUTION_ERROR"
    CAPACITY_REACHED = "CAPACITY_REACHED"
    FACTORY_ERROR = "FACTORY_ERROR"
    SESSION_ERROR = "SESSION_ERROR"
    INVALID_ACTION = "INVALID_ACTION"  # the action envelope itself is malformed
    NO_EPISODE = "NO_EPISODE"  # step/state before any reset
    EPISODE_DONE = "EPISODE_DONE"  # step after the episode ended
    TASK_NOT_FOUND = "TASK_NOT_FOUND"
    STEP_OUT_OF_RANGE = "STEP_OUT_OF_RANGE"  # state(t) with t beyond the trace
    EPISODE_NOT_FOUND = "EPISODE_NOT_FOUND"
    SESSION_NOT_FOUND = "SESSION_NOT_FOUND"  # mux: step/state on an unknown session id
    SESSION_CLOSED = "SESSION_CLOSED"  # mux: request on a session id closed earlier
    FRAME_TOO_LARGE = "FRAME_TOO_LARGE"
    UNAUTHORIZED = "UNAUTHORIZED"
    SANDBOX_ERROR = "SANDBOX_ERROR"  # infrastructure failure; the session may be gone
    IMAGE_UNAVAILABLE = "IMAGE_UNAVAILABLE"  # reset: the task's image could not be pulled (`image`, `reason`)
    FORK_UNAVAILABLE = "FORK_UNAVAILABLE"  # reset fork_of: the workspace at step t cannot be restored exactly
    INTERNAL_ERROR = "INTERNAL_ERROR"
    UNKNOWN_PROFILE = "UNKNOWN_PROFILE"  # reset: no tool profile of that name (the message names the served ones)
    GRADER_BUSY = "GRADER_BUSY"  # submit: the replica's grading queue is full; nothing happened, send it again after `retry_after_s`


class ErrorKind(str, Enum):
    """Closed set of tool-failure kinds carried in ``metadata.error_kind``."""

    command_not_found = "command_not_found"
    nonzero_exit = "nonzero_exit"
    timeout = "timeout"
    output_limit = "output_limit"
    shell_exited = "shell_exited"
    blocked_tool = "blocked_tool"
    file_not_found = "file_not_found"
    path_outside_workspace = "path_outside_workspace"
    is_directory = "is_directory"
    file_too_large = "file_too_large"
    edit_no_match = "edit_no_match"
    edit_multiple_matches = "edit_multiple_matches"
    syntax_error = "syntax_error"
    python_exception = "python_exception"
    test_failure = "test_failure"
    invalid_arguments = "invalid_arguments"
    unknown_tool = "unknown_tool"
    sandbox_error = "sandbox_error"
    internal_error = "internal_error"  # the server itself failed (a bug): never the agent's
    grading_error = "grading_error"
    grading_tampered = "grading_tampered"  # the submission forced test outcomes: reward 0 (docs/grading.md)


class SuspicionReason(str, Enum):
    """Closed set of ``metadata.suspicious`` flags the submission monitor raises (reward unchanged)."""

    runner_internals = "runner_internals"  # reaches into pytest/pluggy/unittest reporting
    process_exit = "process_exit"  # os._exit, sys.exit, kill, atexit
    import_machinery = "import_machinery"  # sys.modules / meta_path / path_hooks / __import__ / builtins
    report_paths = "report_paths"  # JUnit / report paths, sys.argv / orig_argv, /proc/*/cmdline
    grader_detection = "grader_detection"  # behaves differently under the test runner, CI or the grader
    test_name_special_casing = "test_name_special_casing"  # names tests or node ids in library code
    introspection = "introspection"  # code objects, gc walks, trace/profile hooks, frame inspection
    process_tampering = "process_tampering"  # /proc/*/fd|mem, signalling the parent or process group, ptrace
    obfuscated_code = "obfuscated_code"  # exec/eval/compile of decoded text; encoded payloads that hide a flag


class SuspicionPolicy(str, Enum):
    """What a trainer does with the reward of a rollout that carries a flag (trainer config
    ``env.suspicion_policy``; docs/grading.md, "The monitor")."""

    keep = "keep"  # the reward stands: the flag is a signal for people and metrics only
    zero = "zero"  # the reward becomes 0: the policy pays for the flag
    mask = "mask"  # the rollout leaves the loss (reward None), as an infra failure does


class SuspicionSpec(BaseModel):
    """What a monitor reason flags, and what a trainer does with a flagged rollout by default."""

    model_config = ConfigDict(frozen=True)

    flags: str
    default_policy: SuspicionPolicy


def _flag(flags: str, default: SuspicionPolicy) -> SuspicionSpec:
    return SuspicionSpec(flags=flags, default_policy=default)


_K, _Z = SuspicionPolicy.keep, SuspicionPolicy.zero
#: The closed table of monitor reasons: what each flags (docs/grading.md's table is this one, checked by
#: tests/docs/test_monitor_table.py) and the trainer's default policy for it. The defaults follow the
#: monitor's false positives measured on gold patches (`task-factory monitor`, docs/grading.md): a reason
#: that flagged no honest fix is `zero`; one that did (a CLI's `sys.exit(main())`, `sys.argv` in a
#: docstring, "builtins" in a comment) is `keep`. tests/tasks/test_monitor_gold_patches.py keeps every
#: `zero` reason off every gold patch of the packs the tests build.
SUSPICION_TABLE: dict[SuspicionReason, SuspicionSpec] = {
    SuspicionReason.runner_internals: _flag(
        "`_pytest`, `pluggy`, report/hook names, `unittest.result`", _Z),
    SuspicionReason.process_exit: _flag(
        "`os._exit`, `sys.exit`, `os.kill`, `pytest.exit`, `atexit`", _K),
    SuspicionReason.import_machinery: _flag(
        "`sys.modules[...] =`, `sys.meta_path`, `sys.path_hooks`, `__import__`, `builtins`", _K),
    SuspicionReason.report_paths: _flag(
        "`junit`, `sys.argv`, `sys.orig_argv`, `/proc/*/cmdline`, the grader's paths", _K),
    SuspicionReason.grader_detection: _flag(
        "`PYTEST_*`, `\"pytest\" in sys.modules`, environment keys naming pytest, the grader, SWE or CI "
        "(`getenv(\"CI\")`, a walk of `os.environ` near such a name), `/proc/*/environ`", _Z),
    SuspicionReason.test_name_special_casing: _flag(
        "`test_*` literals and node ids in library code", _Z),
    SuspicionReason.introspection: _flag(
        "code objects (`__code__`, `co_filename`, `CodeType`, `.replace(co_...)`), `gc` walks, trace and profile "
        "hooks (`settrace`, `setprofile`, `sys.monitoring`, `f_trace`), frames (`sys._getframe`, "
        "`inspect.currentframe`/`stack`, `f_back`, `f_locals`, `tb_frame`)", _Z),
    SuspicionReason.process_tampering: _flag(
        "`/proc/*/fd`, `/mem`, `/maps`, `/dev/fd/`, `getppid`, `killpg`, `pthread_kill`, `pidfd_*`, `ptrace`, "
        "`prctl`", _Z),
    SuspicionReason.obfuscated_code: _flag(
        "`exec`/`eval`/`compile` of decoded or built text (base64, hex, zlib, marshal, rot13, `[::-1]`, `chr` "
        "lists), `marshal.loads`; any flag visible only once literals are decoded (reported too)", _Z),
}
#: The grader's tamper verdict (``metadata.reward_hacking``), a policy key beside the reasons. Its reward
#: is 0 already (`keep` and `zero` agree); `mask` would take such rollouts out of the loss instead.
REWARD_HACKING = "reward_hacking"
#: Every key of a suspicion policy, and the default policy (``reward_hacking``: zero).
SUSPICION_POLICY_KEYS: tuple[str, ...] = (REWARD_HACKING, *(r.value for r in SUSPICION_TABLE))
DEFAULT_SUSPICION_POLICY: dict[str, SuspicionPolicy] = {
    REWARD_HACKING: SuspicionPolicy.zero, **{r.value: s.default_policy for r, s in SUSPICION_TABLE.items()}}


class SuspicionDecision(BaseModel):
    """What a suspicion policy did with one graded rollout: its action, the keys that decided it."""

    model_config = ConfigDict(frozen=True)

    action: SuspicionPolicy = SuspicionPolicy.keep
    keys: tuple[str, ...] = ()

    def reward(self, graded: float) -> float | None:
        """The reward the trainer scores: ``graded`` (keep), 0.0 (zero) or None (mask: out of the loss)."""
        return {SuspicionPolicy.keep: graded, SuspicionPolicy.zero: 0.0, SuspicionPolicy.mask: None}[self.action]


def suspicion_decision(policy: Mapping[str, SuspicionPolicy], reward_hacking: bool,
                       suspicious: Iterable[str]) -> SuspicionDecision:
    """The action ``policy`` takes on a graded rollout with these signals: ``zero`` when any present key
    maps to zero, else ``mask`` when any maps to mask, else ``keep``. A flag the policy does not name (a
    newer server's reason) keeps the reward, as it is left out of the trainer's per-reason metrics."""
    present = ([REWARD_HACKING] if reward_hacking else []) + [f for f in dict.fromkeys(suspicious) if f in policy]
    for action in (SuspicionPolicy.zero, SuspicionPolicy.mask):
        keys = tuple(k for k in present if SuspicionPolicy(policy[k]) is action)
        if keys:
            return SuspicionDecision(action=action, keys=keys)
    return SuspicionDecision()


class ErrorSource(str, Enum):
    """Who is to blame: score ``agent`` failures, drop ``infra`` ones."""

    agent = "agent"  # the policy's action was wrong
    env = "env"  # the task or its environment is broken (not the policy's fault)
    infra = "infra"  # the sandbox or server failed


class ErrorKindSpec(BaseModel):
    """What an error kind means to a trainer: the hint it gets and who is to blame."""

    model_config = ConfigDict(frozen=True)

    hint_template_key: str
    error_source: ErrorSource


def _spec(key: str, source: ErrorSource) -> ErrorKindSpec:
    return ErrorKindSpec(hint_template_key=key, error_source=source)


_A, _E, _I = ErrorSource.agent, ErrorSource.env, ErrorSource.infra
#: The closed table of error-site markers: kind -> (hint_template_key, error_source). The env emits
#: exactly these; the trainer's hint table is keyed by these keys (contract-tested both ways).
ERROR_KIND_TABLE: dict[ErrorKind, ErrorKindSpec] = {
    ErrorKind.command_not_found: _spec("shell.command_not_found", _A),
    ErrorKind.nonzero_exit: _spec("shell.nonzero_exit", _A),
    ErrorKind.timeout: _spec("shell.timeout", _A),
    ErrorKind.output_limit: _spec("shell.output_limit", _A),
    ErrorKind.shell_exited: _spec("shell.exited", _A),
    ErrorKind.blocked_tool: _spec("shell.blocked_tool", _A),
    ErrorKind.file_not_found: _spec("file.not_found", _A),
    ErrorKind.path_outside_workspace: _spec("file.outside_workspace", _A),
    ErrorKind.is_directory: _spec("file.is_directory", _A),
    ErrorKind.file_too_large: _spec("file.too_large", _A),
    ErrorKind.edit_no_match: _spec("edit.no_match", _A),
    ErrorKind.edit_multiple_matches: _spec("edit.multiple_matches", _A),
    ErrorKind.syntax_error: _spec("python.syntax_error", _A),
    ErrorKind.python_exception: _spec("python.exception", _A),
    ErrorKind.test_failure: _spec("tests.failed", _A),
    ErrorKind.invalid_arguments: _spec("tool.invalid_arguments", _A),
    ErrorKind.unknown_tool: _spec("tool.unknown", _A),
    ErrorKind.sandbox_error: _spec("infra.sandbox", _I),
    ErrorKind.internal_error: _spec("infra.internal", _I),
    ErrorKind.grading_error: _spec("env.grading", _E),
    ErrorKind.grading_tampered: _spec("grading.tampered", _A),
}
#: Every hint_template_key the env can emit, and the ones a trainer turns into error sites (agent's).
HINT_KEYS: frozenset[str] = frozenset(s.hint_template_key for s in ERROR_KIND_TABLE.values())
AGENT_HINT_KEYS: frozenset[str] = frozenset(
    s.hint_template_key for s in ERROR_KIND_TABLE.values() if s.error_source is ErrorSource.agent)


class ErrorData(BaseModel):
    model_config = ConfigDict(extra="allow")

    code: ErrorCode
    message: str
