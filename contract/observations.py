"""What the agent sees: observations, OpenEnv state, and the state(t) record of a recorded episode."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


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
    submission: str | None = Field(None, description=(
        "the patch step t submitted by a command's sentinel line (a profile such as bash-only): what was graded, "
        "instead of the workspace diff"))
    next_action: NextAction | None = None
    turn_token_ids: list[list[int] | None] | None = Field(None, description=(
        "per assistant message of `messages`, the token ids the policy generated for it, when its client "
        "recorded them (then the context re-tokenizes exactly; see trainer_client/context.py)"))
