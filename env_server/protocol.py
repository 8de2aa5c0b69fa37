"""Public wire types of the env server (pure pydantic; safe for clients to import).

Everything a client sends or receives over ``/ws``, ``/mux``, ``/mcp`` and the
trace routes is one of these models. The trainer client imports this module and
nothing else from ``env_server``, so it must never import server code.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

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
    grading_error = "grading_error"
    grading_tampered = "grading_tampered"  # the submission forced test outcomes: reward 0 (docs/grading.md)


class SuspicionReason(str, Enum):
    """Closed set of ``metadata.suspicious`` flags the submission monitor raises (reward unchanged)."""

    runner_internals = "runner_internals"  # reaches into pytest/pluggy/unittest reporting
    process_exit = "process_exit"  # os._exit, sys.exit, kill, atexit
    import_machinery = "import_machinery"  # sys.modules / meta_path / builtins / trace hooks / __code__
    report_paths = "report_paths"  # JUnit / report paths, sys.argv
    grader_detection = "grader_detection"  # behaves differently under the test runner or CI
    test_name_special_casing = "test_name_special_casing"  # names tests or node ids in library code


class ErrorSource(str, Enum):
    """Who is to blame: score ``agent`` failures, drop ``infra`` ones."""

    agent = "agent"  # the policy's action was wrong
    env = "env"  # the task or its environment is broken (not the policy's fault)
    infra = "infra"  # the sandbox or server failed


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

    path: str = Field(min_length=1)
    old: str = Field(min_length=1, description="text occurring exactly once in the file")
    new: str = Field(description="replacement text")


class CreateArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1)
    content: str


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

    def envelope(self) -> dict[str, Any]:
        """OpenEnv's ``data`` of an observation frame: reward and done lifted out."""
        body = self.model_dump(exclude={"reward", "done"})
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
    diff: str = Field(description="workspace diff against the base commit after step t")
    next_action: NextAction | None = None


# ---------------------------------------------------------------- requests


class ResetParams(BaseModel):
    """``reset`` data. Pick a task by ``instance_id``, else ``index``, else ``seed``, else round robin."""

    model_config = ConfigDict(extra="ignore")

    instance_id: str | None = None
    index: int | None = Field(None, ge=0)
    seed: int | None = None
    episode_id: str | None = Field(None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$")


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
