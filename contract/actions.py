"""Actions the agent sends: a tool call, or a request for the tool list (the tools themselves: ``tools``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

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
