"""Public wire types of the env server (pure pydantic; safe for clients to import).

Everything a client sends or receives over ``/ws``, ``/mux``, ``/mcp`` and the
trace routes is one of these models. The trainer client imports this module and
nothing else from ``env_server``, so it must never import server code.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

# Frames and trace records: compact UTF-8 JSON. One encoder, built once (json.dumps with
# options builds a new one on every call, and this runs on every step).
compact_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

PROTOCOL_VERSION = "1.0.0"
MUX_SUBPROTOCOL = "swe-openenv.mux.v1"


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
    FORK_UNAVAILABLE = "FORK_UNAVAILABLE"  # reset fork_of: the workspace at step t cannot be restored exactly
    INTERNAL_ERROR = "INTERNAL_ERROR"


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


ToolName = Literal["bash", "view", "str_replace", "create", "submit"]


# ---------------------------------------------------------------- actions


class CallToolAction(BaseModel):
    """Call one tool (OpenEnv RFC 003 ``CallToolAction``)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["call_tool"] = "call_tool"
    tool_name: str = Field(min_length=1, max_length=128)
    arguments: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)


class ListToolsAction(BaseModel):
    """Ask for the tool list (not counted as a step)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["list_tools"] = "list_tools"
    metadata: dict[str, Any] = Field(default_factory=dict)


Action = Annotated[Union[CallToolAction, ListToolsAction], Field(discriminator="type")]


class BashArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str = Field(min_length=1, description="shell command run in the persistent shell at /workspace")
    timeout: float | None = Field(None, gt=0, description="seconds before the command is killed")


class ViewArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="file or directory, relative to /workspace")
    start_line: int | None = Field(None, ge=1, description="first line shown (1-based)")
    end_line: int | None = Field(None, ge=-1, description="last line shown; -1 for the end")


class StrReplaceArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="file to edit, relative to /workspace")
    old: str = Field(min_length=1, description="text occurring exactly once in the file")
    new: str = Field(description="replacement text")


class CreateArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="file to write, relative to /workspace")
    content: str = Field(description="the full content of the file")


class SubmitArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolSpec(BaseModel):
    """A tool as MCP describes it (``name``, ``description``, ``inputSchema``)."""

    model_config = ConfigDict(populate_by_name=True)

    name: str
    description: str
    input_schema: dict[str, Any] = Field(alias="inputSchema")

    def mcp(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "inputSchema": self.input_schema}

    def openai(self) -> dict[str, Any]:
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.input_schema}}


TOOL_DESCRIPTIONS: dict[str, str] = {
    "bash": "Run a shell command in a persistent bash session at /workspace (the repository). "
            "cwd and exported variables persist between calls. No network.",
    "view": "Show a file with line numbers (optionally lines start_line..end_line), or list a directory.",
    "str_replace": "Replace the text `old` by `new` in a file; `old` must occur exactly once.",
    "create": "Create or overwrite a file with `content`.",
    "submit": "Finish the episode: your changes to the repository are graded by hidden tests.",
}
TOOL_ARGS: dict[str, type[BaseModel]] = {
    "bash": BashArgs, "view": ViewArgs, "str_replace": StrReplaceArgs, "create": CreateArgs,
    "submit": SubmitArgs,
}


def _tool_schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
        if "anyOf" in prop:  # "X | None" -> the plain type; null is the same as leaving it out
            types = [s for s in prop.pop("anyOf") if s.get("type") != "null"]
            prop.update(types[0] if len(types) == 1 else {"anyOf": types})
            prop.pop("default", None)
    schema["additionalProperties"] = False
    return schema


#: The agent's tools, as the env serves them (MCP) and as a trainer exposes them to its policy.
TOOL_SPECS: list[ToolSpec] = [
    ToolSpec(name=name, description=TOOL_DESCRIPTIONS[name], inputSchema=_tool_schema(model))
    for name, model in TOOL_ARGS.items()
]


def tool_docstring(name: str) -> str:
    """A Google-style docstring for a client-side method implementing tool ``name``.

    Frameworks that derive tool schemas from docstrings (transformers' ``get_json_schema``,
    which TRL uses) then describe the tool exactly as the env's ``TOOL_SPECS`` do.
    """
    model = TOOL_ARGS[name]
    lines = [TOOL_DESCRIPTIONS[name]]
    if model.model_fields:
        lines += ["", "Args:"]
        for field, info in model.model_fields.items():
            text = (info.description or field).rstrip(".")
            lines.append(f"    {field}: {text[:1].upper()}{text[1:]}.")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- observations


class SWEObservation(BaseModel):
    """What the agent sees after reset or a step (OpenEnv's observation body)."""

    output: str = ""
    tool_name: str | None = None
    tools: list[dict[str, Any]] | None = Field(None, description="MCP tool schemas (reset and list_tools only)")
    issue: str | None = Field(None, description="the problem statement (reset only)")
    done: bool = False
    reward: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict, description=(
        "episode_id, step, instance_id; on failures only: error_kind, hint_template_key, "
        "error_source, error_message; after grading: tests_passed, tests_failed, ..."))

    def mcp_result(self) -> dict[str, Any]:
        """The MCP ``tools/call`` result of this step (``/mcp``'s reply; ``result`` on ``/ws``)."""
        return {"content": [{"type": "text", "text": self.output}], "isError": "error_kind" in self.metadata,
                "structuredContent": {"done": self.done, "reward": self.reward, "metadata": self.metadata}}

    def envelope(self, mcp_result: bool = False) -> dict[str, Any]:
        """OpenEnv's ``data`` of an observation frame: reward and done lifted out.

        ``tools``, ``issue`` and ``tool_name`` are left out when unset: OpenEnv's
        ``MCPToolClient`` reads any ``tools`` key as a tool list and any ``tool_name``
        key as a tool result. With ``mcp_result`` (``/ws``), a tool step also carries
        ``result`` (:meth:`mcp_result`), which that client's ``call_tool`` returns.
        """
        body = self.model_dump(exclude={"reward", "done"})
        for key in ("tools", "issue", "tool_name"):
            if body[key] is None:
                del body[key]
        if mcp_result and self.tool_name is not None:
            body["result"] = self.mcp_result()
        return {"observation": body, "reward": self.reward, "done": self.done, "metadata": self.metadata}


class EpisodeState(BaseModel):
    """OpenEnv ``State``: ``episode_id`` echoes reset's, ``step_count`` counts steps."""

    model_config = ConfigDict(extra="allow")

    episode_id: str | None = None
    step_count: int = Field(0, ge=0)
    instance_id: str | None = None
    done: bool = False
    reward: float | None = None


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: str
    tool_calls: list[dict[str, Any]] | None = None
    name: str | None = None
    tool_call_id: str | None = None


class NextAction(BaseModel):
    tool_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class StateRecord(BaseModel):
    """state(t): exactly what the agent had seen after ``t`` steps."""

    episode_id: str
    instance_id: str
    t: int = Field(ge=0)
    messages: list[ChatMessage]
    tools: list[dict[str, Any]] = Field(description="OpenAI function schemas")
    observation: SWEObservation
    diff: str | None = Field(description="workspace diff against the base commit after step t "
                                         "(null: it could not be read after some step <= t)")
    next_action: NextAction | None = None
    turn_token_ids: list[list[int] | None] | None = Field(None, description=(
        "per assistant message of `messages`, the token ids the policy generated for it, when its client "
        "recorded them (then the context re-tokenizes exactly; see trainer_client/context.py)"))


# ---------------------------------------------------------------- requests


class ResetParams(BaseModel):
    """``reset`` data. Pick a task by ``instance_id``, else ``index``, else ``seed``, else round robin;
    or (``fork_of`` + ``t``) continue a recorded episode from its step t in a new episode."""

    model_config = ConfigDict(extra="ignore")

    instance_id: str | None = None
    index: int | None = Field(None, ge=0)
    seed: int | None = None
    episode_id: str | None = Field(None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$")
    context: "ContextSpec | None" = Field(None, description="how this client presents the episode to its policy")
    fork_of: str | None = Field(None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$", description=(
        "episode-fork extension: start from this recorded episode after its step `t` (its task, its workspace "
        "byte for byte, its context); see docs/rfcs/009-episode-fork.md"))
    t: int | None = Field(None, ge=0, strict=True, description="with fork_of: the step of the recorded episode "
                                                               "to fork at (0 = right after its reset)")

    @model_validator(mode="after")
    def _fork_fields(self) -> "ResetParams":
        if (self.fork_of is None) != (self.t is None):
            raise ValueError("fork_of and t go together (fork the recorded episode fork_of after its step t)")
        return self


class StateParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    t: int | None = Field(None, ge=0)


class ErrorData(BaseModel):
    model_config = ConfigDict(extra="allow")

    code: ErrorCode
    message: str


class WsRequest(BaseModel):
    """A ``/ws`` frame from the client (OpenEnv's envelope)."""

    type: str
    data: dict[str, Any] | None = None


MuxRequestType = Literal["reset", "step", "state", "close", "ping"]
MuxReplyType = Literal["observation", "state", "closed", "pong", "error"]


class MuxRequest(BaseModel):
    """A ``/mux`` frame from the client: every request names its session and itself."""

    model_config = ConfigDict(extra="forbid")

    request_id: str = Field(min_length=1, max_length=128)
    session_id: str = Field(min_length=1, max_length=128)
    type: MuxRequestType
    data: dict[str, Any] = Field(default_factory=dict)


class MuxReply(BaseModel):
    request_id: str | None
    session_id: str | None
    type: MuxReplyType
    data: dict[str, Any] = Field(default_factory=dict)


# ---------------------------------------------------------------- channel 3: preference pairs


class ToolCall(BaseModel):
    """One tool call in the env's action schema (``CallToolAction`` without the envelope)."""

    model_config = ConfigDict(extra="forbid")

    tool_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class PairProvenance(BaseModel):
    """Where a pair came from: the state it replays, the teachers asked, what they cost."""

    model_config = ConfigDict(extra="forbid")

    episode_id: str
    t: int
    instance_id: str = ""
    teachers: list[str] = Field(description="every teacher queried for this state, in config order")
    agreeing: list[str] = Field(default_factory=list, description="teachers whose action equals `chosen`")
    costs: dict[str, float] = Field(default_factory=dict, description="USD spent per teacher on this state")
    verification: Literal["agreement", "fork"] = Field("agreement", description=(
        "agreement: `chosen` is what enough teachers proposed; fork: every proposed action and the student's "
        "were executed in forks of the episode at step t and graded by the hidden tests, and `chosen` scored "
        "higher than `rejected`"))
    rewards: dict[str, float] = Field(default_factory=dict, description=(
        "fork mode: hidden-test reward of each executed action, by teacher name and 'student'"))
    forks: dict[str, str] = Field(default_factory=dict, description="fork mode: the fork's episode id per action")
    source: Literal["offline", "live"] = Field("offline", description=(
        "offline: `trainer-client replay`; live: the replay loop of a training run"))
    train_step: int | None = Field(None, ge=0, description="live: the optimizer step whose rollout this replays")


class PairRecord(BaseModel):
    """One (chosen, rejected) pair for the channel-3 preference loss (one JSONL line).

    ``messages`` and ``tools`` are the state(t) record's, unchanged (the context the policy saw).
    """

    model_config = ConfigDict(extra="forbid")

    state_id: str = Field(description="<episode_id>:<t>")
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    chosen: ToolCall
    rejected: ToolCall
    n_teachers_agreeing: int = Field(ge=0)
    provenance: PairProvenance


# ---------------------------------------------------------------- tasks


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


# ---------------------------------------------------------------- the policy's context


class ContextSpec(BaseModel):
    """How a client presents the episode to its policy; sent with ``reset``, kept in the trace.

    With it, state(t) is rendered the way the client rendered the rollout (``render_context``,
    the one renderer both sides use): the client's own prompt messages with the issue appended
    to the last one (TRL's ``environment_factory`` rule), its tool schemas, its tool-output
    formatting and truncation. Without it, state(t) uses the server's system prompt and
    untruncated outputs.
    """

    model_config = ConfigDict(extra="forbid")

    prompt: list[dict[str, Any]] = Field(min_length=1, description="messages before the issue; the issue is "
                                                                   "appended to the last one's content")
    tools: list[dict[str, Any]] = Field(default_factory=list, description="tool schemas exactly as shown")
    max_output_chars: int | None = Field(None, gt=0, description="tool output kept (head and tail), in characters")


class AssistantTurn(BaseModel):
    """``CallToolAction.metadata["assistant"]`` on the first call of a policy turn: the message it came from."""

    model_config = ConfigDict(extra="forbid")

    content: str = ""
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    token_ids: list[int] | None = Field(None, description="what the policy generated for this message")


ResetParams.model_rebuild()


def format_tool_output(observation: dict[str, Any], max_output_chars: int | None = None) -> str:
    """A tool result as the policy reads it: the output, the error marker's message, head+tail cut."""
    text = str(observation.get("output") or "")
    meta = observation.get("metadata") or {}
    message = meta.get("error_message")
    if meta.get("error_kind") and message and message not in text:
        text = f"{text}\n[{meta['error_kind']}] {message}" if text else f"[{meta['error_kind']}] {message}"
    if max_output_chars is not None and len(text) > max_output_chars:
        half = max_output_chars // 2
        text = f"{text[:half]}\n[... {len(text) - max_output_chars} characters cut ...]\n{text[-half:]}"
    return text or "(no output)"


def _call_id(t: int) -> str:
    return f"call_{t}"


def _wire_call(call: dict[str, Any], t: int) -> dict[str, Any]:
    fn = dict(call.get("function") or {})
    args = fn.get("arguments", {})
    fn["arguments"] = args if isinstance(args, str) else json.dumps(args)
    return {"id": _call_id(t), "type": "function", "function": fn}


def render_context(reset: dict[str, Any], steps: list[dict[str, Any]]
                   ) -> tuple[list[ChatMessage], list[dict[str, Any]], list[list[int] | None] | None]:
    """(messages, tool schemas, per-assistant token ids) the policy had seen after ``steps``.

    ``reset`` and ``steps`` are trace records (docs/protocol.md). Steps a client made on its
    own (action metadata ``origin: "client"``, e.g. a submit after the rollout ended) are not
    the policy's and are left out. Steps of one policy turn (metadata ``turn``) share one
    assistant message, the one the client recorded (metadata ``assistant``).
    """
    spec = ContextSpec.model_validate(reset["context"]) if reset.get("context") else None
    if spec is None:
        messages = [ChatMessage(role="system", content=reset["system"]), ChatMessage(role="user", content=reset["issue"])]
        tools = [{"type": "function", "function": {"name": s["name"], "description": s["description"],
                                                   "parameters": s["inputSchema"]}} for s in reset["tools"]]
    else:
        *head, last = spec.prompt
        messages = [ChatMessage.model_validate(m) for m in head]
        messages.append(ChatMessage.model_validate({**last, "content": str(last.get("content", "")) + reset["issue"]}))
        tools = list(spec.tools)
    limit = spec.max_output_chars if spec else None
    turn_ids: list[list[int] | None] = []
    current_turn: object = object()
    for rec in steps:
        action = rec["action"]
        meta = action.get("metadata") or {}
        if meta.get("origin") == "client":
            continue
        name = action.get("tool_name") or action.get("type", "")
        t = rec["t"]
        turn = meta.get("turn", ("step", t))
        assistant = meta.get("assistant")
        if turn != current_turn:  # a new assistant message
            current_turn = turn
            if assistant:
                turn_msg = AssistantTurn.model_validate(assistant)
                calls = [_wire_call(c, t + k) for k, c in enumerate(turn_msg.tool_calls)]
                messages.append(ChatMessage(role="assistant", content=turn_msg.content, tool_calls=calls or None))
                turn_ids.append(turn_msg.token_ids)
            else:
                call = _wire_call({"function": {"name": name, "arguments": action.get("arguments", {})}}, t)
                messages.append(ChatMessage(role="assistant", content="", tool_calls=[call]))
                turn_ids.append(None)
        obs = rec["observation"]
        content = format_tool_output(obs, limit) if spec else obs.get("output", "")
        messages.append(ChatMessage(role="tool", content=content, name=name, tool_call_id=_call_id(t)))
    return messages, tools, (turn_ids if any(ids is not None for ids in turn_ids) else None)
