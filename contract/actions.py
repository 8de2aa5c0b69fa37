"""Actions the agent sends and the tool schemas the env serves (``bash``, ``view``, ``str_replace``, ``create``, ``submit``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

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


def _arg_description(info: Any, field: str) -> str:
    text = (info.description or field).rstrip(".")
    return f"{text[:1].upper()}{text[1:]}."


_JSON_TYPES = {str: "string", float: "number", int: "integer", bool: "boolean"}


def policy_tools() -> list[dict[str, Any]]:
    """The tool schemas a policy is shown, in OpenAI's function format: exactly what a trainer's
    TRL ``environment_factory`` presents (transformers' ``get_json_schema`` of methods documented
    with ``tool_docstring``, in TRL's alphabetical order), built here without transformers so an
    evaluation shows a model the tools it was trained with."""
    tools = []
    for name in sorted(TOOL_ARGS):
        properties, required = {}, []
        for field, info in TOOL_ARGS[name].model_fields.items():
            kinds = [a for a in getattr(info.annotation, "__args__", (info.annotation,)) if a is not type(None)]
            prop: dict[str, Any] = {"type": _JSON_TYPES[kinds[0]]}
            if len(kinds) < len(getattr(info.annotation, "__args__", (info.annotation,))):
                prop["nullable"] = True
            prop["description"] = _arg_description(info, field)
            properties[field] = prop
            if info.is_required():
                required.append(field)
        parameters: dict[str, Any] = {"type": "object", "properties": properties}
        if required:
            parameters["required"] = required
        tools.append({"type": "function", "function": {"name": name, "description": TOOL_DESCRIPTIONS[name],
                                                       "parameters": parameters, "return": {"type": "string"}}})
    return tools


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
            lines.append(f"    {field}: {_arg_description(info, field)}")
    return "\n".join(lines) + "\n"
