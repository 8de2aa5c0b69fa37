"""The agent's tools and tool profiles: the one registry every tool surface is generated from.

A tool is one :class:`Tool` entry: its name, its arguments model (the fields, their types and
descriptions are the schema), its description, whether it may change the workspace and whether it
ends the episode. A :class:`ToolProfile` is a named set of tools with the instructions that present
them and the way the policy reads their outputs. ``PROFILES`` is the registry; a client picks a
profile at reset (``ResetParams.profile``, default ``"default"``).

Generated from an entry: the MCP tool list and reset observation (``ToolProfile.specs``), the tool
schemas a policy is shown (``ToolProfile.policy_tools``, what TRL derives from the trainer's
methods), the instructions' tool list (``ToolProfile.prompt``), the methods of the TRL environment
and of the verifiers toolset (``Tool.method``). The env server runs a tool with the handler it
registers for the tool's arguments model (``env_server/tools.py``). Adding a tool is an arguments
model and a ``Tool`` in a profile here, and a handler there (docs/extending.md).
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# ---------------------------------------------------------------- arguments models


class BashArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str = Field(min_length=1, description="shell command run in the persistent shell at /workspace")
    timeout: float | None = Field(None, gt=0, description="seconds before the command is killed")


class SubshellBashArgs(BaseModel):
    """mini-swe-agent's one action: a command run in a fresh ``bash -c`` at the repository root."""

    model_config = ConfigDict(extra="forbid")

    command: str = Field(min_length=1, description="the bash command to execute")


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


# ---------------------------------------------------------------- entries


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


_JSON_TYPES = {str: "string", float: "number", int: "integer", bool: "boolean"}


def _arg_description(info: Any, field: str) -> str:
    text = (info.description or field).rstrip(".")
    return f"{text[:1].upper()}{text[1:]}."


class Tool(BaseModel):
    """One tool: every surface that shows or runs it is generated from this entry."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    args: type[BaseModel] = Field(description="the arguments model: its fields are the tool's parameters")
    description: str
    mutates: bool = Field(False, description="may change the workspace (a diff is recorded after it)")
    submits: bool = Field(False, description="ends the episode: the workspace is graded")

    def spec(self) -> ToolSpec:
        """The MCP tool spec (JSON schema of the arguments model, ``X | None`` as the plain type)."""
        schema = self.args.model_json_schema()
        schema.pop("title", None)
        schema.pop("description", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
            if "anyOf" in prop:  # "X | None" -> the plain type; null is the same as leaving it out
                types = [s for s in prop.pop("anyOf") if s.get("type") != "null"]
                prop.update(types[0] if len(types) == 1 else {"anyOf": types})
                prop.pop("default", None)
        schema["additionalProperties"] = False
        return ToolSpec(name=self.name, description=self.description, inputSchema=schema)

    def policy_schema(self) -> dict[str, Any]:
        """The schema a policy is shown, in OpenAI's function format: exactly what transformers'
        ``get_json_schema`` derives from :meth:`method` (TRL's ``environment_factory``), built here
        without transformers so an evaluation shows a model the tools it was trained with."""
        properties, required = {}, []
        for field, info in self.args.model_fields.items():
            annotation_args = getattr(info.annotation, "__args__", (info.annotation,))
            kinds = [a for a in annotation_args if a is not type(None)]
            prop: dict[str, Any] = {"type": _JSON_TYPES[kinds[0]]}
            if len(kinds) < len(annotation_args):
                prop["nullable"] = True
            prop["description"] = _arg_description(info, field)
            properties[field] = prop
            if info.is_required():
                required.append(field)
        parameters: dict[str, Any] = {"type": "object", "properties": properties}
        if required:
            parameters["required"] = required
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": parameters, "return": {"type": "string"}}}

    def docstring(self) -> str:
        """A Google-style docstring for a client method implementing the tool: frameworks that
        derive schemas from docstrings (transformers' ``get_json_schema``, MCP servers) then
        describe it exactly as the env does."""
        lines = [self.description]
        if self.args.model_fields:
            lines += ["", "Args:"]
            lines += [f"    {field}: {_arg_description(info, field)}" for field, info in self.args.model_fields.items()]
        return "\n".join(lines) + "\n"

    def signature(self) -> inspect.Signature:
        """``(self, <fields>) -> str``: the arguments model's fields as parameters, optional ones defaulted."""
        params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        for field, info in self.args.model_fields.items():
            default = inspect.Parameter.empty if info.is_required() else info.default
            params.append(inspect.Parameter(field, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default,
                                            annotation=info.annotation))
        return inspect.Signature(params, return_annotation=str)

    def method(self, call: Callable[[Any, str, dict[str, Any]], Any], *, asynchronous: bool = False) -> Callable:
        """A method implementing the tool on a client class: ``call(self, name, arguments)`` does the
        work (arguments left out or None are dropped). Its name, signature, annotations and docstring
        are the entry's, so TRL, transformers and MCP servers read the tool's schema off it."""
        sig, name = self.signature(), self.name

        def arguments(args: tuple, kwargs: dict) -> tuple[Any, dict[str, Any]]:
            bound = sig.bind(*args, **kwargs)
            values = dict(bound.arguments)
            owner = values.pop("self")
            return owner, {k: v for k, v in values.items() if v is not None}

        if asynchronous:
            async def tool_method(*args: Any, **kwargs: Any) -> str:
                owner, values = arguments(args, kwargs)
                return await call(owner, name, values)
        else:
            def tool_method(*args: Any, **kwargs: Any) -> str:  # type: ignore[misc]
                owner, values = arguments(args, kwargs)
                return call(owner, name, values)
        tool_method.__name__ = tool_method.__qualname__ = name
        tool_method.__signature__ = sig  # type: ignore[attr-defined]
        tool_method.__annotations__ = {p.name: p.annotation for p in list(sig.parameters.values())[1:]} | {"return": str}
        tool_method.__doc__ = self.docstring()
        return tool_method


# ---------------------------------------------------------------- profiles

#: mini-swe-agent's submission line: a command whose output starts with it (and exits 0) submits the rest
SUBMIT_SENTINEL = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
#: mini-swe-agent's SWE-bench config: each command's limit, and the environment every command gets
SUBSHELL_TIMEOUT_S = 60.0
SUBSHELL_ENV = {"PAGER": "cat", "MANPAGER": "cat", "LESS": "-R", "PIP_PROGRESS_BAR": "off", "TQDM_DISABLE": "1"}

OutputStyle = Literal["plain", "returncode"]


class ToolProfile(BaseModel):
    """A named tool set, the instructions that present it, and how the policy reads tool outputs
    (``plain``: the output and the error marker's message; ``returncode``: mini-swe-agent's
    observation template, ``<returncode>`` and ``<output>``, head and tail past 10,000 characters)."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(pattern=r"^[a-z][a-z0-9-]*$")
    about: str = Field(description="one line: what the profile is for")
    tools: tuple[Tool, ...] = Field(min_length=1)
    template: str = Field(description="what the agent is asked to do; ``{tools}``: the tools but the submitting "
                          "one, ``{submit}``: the submitting one (see ``instructions``)")
    output_style: OutputStyle = "plain"
    submit_sentinel: str | None = Field(None, description="a command whose output's first line is this, exiting "
                                                          "0, submits the rest of its output as the patch")

    @property
    def submit_tool(self) -> str | None:
        """The tool that submits (None: the profile submits only by its sentinel line, as bash-only does)."""
        return next((t.name for t in self.tools if t.submits), None)

    @property
    def instructions(self) -> str:
        """What the agent is asked to do, its tool list generated from the profile's tools: the system
        prompt of an episode without a client context, the head of the user prompt (``prompt``)."""
        return self.template.format(tools=", ".join(t.name for t in self.tools if not t.submits),
                                    submit=self.submit_tool or "")

    def submission(self, output: str, returncode: int | None) -> str | None:
        """The patch a command's ``output`` submits under this profile: the text after a first line that
        is the sentinel, when the command exited 0 (mini-swe-agent's rule); None: no submission."""
        if self.submit_sentinel is None or returncode != 0:
            return None
        lines = output.lstrip().splitlines(keepends=True)
        return "".join(lines[1:]) if lines and lines[0].strip() == self.submit_sentinel else None

    def tool(self, name: str) -> Tool | None:
        return next((t for t in self.tools if t.name == name), None)

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tools]

    def specs(self) -> list[ToolSpec]:
        """The tools as the env serves them (MCP ``tools/list``, the reset observation)."""
        return [t.spec() for t in self.tools]

    def policy_tools(self) -> list[dict[str, Any]]:
        """The schemas a policy is shown, in TRL's order (alphabetical, as ``inspect.getmembers`` lists methods)."""
        return [t.policy_schema() for t in sorted(self.tools, key=lambda t: t.name)]

    @property
    def prompt(self) -> str:
        """The user message a policy's episode starts with (the issue follows it): the trainer's
        default (``data.prompt``) and the evaluator's, so an evaluation asks what training optimized."""
        return f"{self.instructions}\n\nIssue:\n"

    def methods(self, call: Callable[[Any, str, dict[str, Any]], Any], *, asynchronous: bool = False
                ) -> dict[str, Callable]:
        """Every tool as a client method (:meth:`Tool.method`), by name: a class body's ``update``."""
        return {t.name: t.method(call, asynchronous=asynchronous) for t in self.tools}


_DEFAULT_TEMPLATE = ("You are working in a Python repository at /workspace. Fix the issue below using the tools "
                     "({tools}); when the fix is done, call {submit}.")


_DEFAULT_TOOLS = (
    Tool(name="bash", args=BashArgs, mutates=True,
         description="Run a shell command in a persistent bash session at /workspace (the repository). "
                     "cwd and exported variables persist between calls. No network."),
    Tool(name="view", args=ViewArgs,
         description="Show a file with line numbers (optionally lines start_line..end_line), or list a directory."),
    Tool(name="str_replace", args=StrReplaceArgs, mutates=True,
         description="Replace the text `old` by `new` in a file; `old` must occur exactly once."),
    Tool(name="create", args=CreateArgs, mutates=True, description="Create or overwrite a file with `content`."),
    Tool(name="submit", args=SubmitArgs, submits=True,
         description="Finish the episode: your changes to the repository are graded by hidden tests."),
)

_BASH_ONLY_INSTRUCTIONS = (
    "You are working in a Python repository at /workspace. Fix the issue below with the bash tool. Every "
    "command runs in a new subshell at /workspace: directory and variable changes do not persist. When the "
    "fix is done, write your changes as a patch of the source files you changed (git diff -- FILE... > "
    f"patch.txt), check it, then submit it with exactly: echo {SUBMIT_SENTINEL} && cat patch.txt\n"
    "The patch printed after that line is graded by hidden tests; nothing runs after it.")

PROFILES: dict[str, ToolProfile] = {}
DEFAULT_PROFILE = "default"


def register_profile(profile: ToolProfile, *, replace: bool = False) -> ToolProfile:
    """Add a profile to the registry (every surface of every profile is generated from it)."""
    if profile.name in PROFILES and not replace:
        raise ValueError(f"tool profile {profile.name!r} is already registered")
    if sum(t.submits for t in profile.tools) > 1 or len(set(profile.names)) != len(profile.tools):
        raise ValueError(f"tool profile {profile.name!r}: tool names must be unique, at most one submits")
    if profile.submit_tool is None and profile.submit_sentinel is None:
        raise ValueError(f"tool profile {profile.name!r} has no way to submit (a submitting tool or a sentinel)")
    PROFILES[profile.name] = profile
    return profile


class UnknownProfile(ValueError):
    """A profile name the registry does not hold (the message names the nearest one)."""


def get_profile(name: str | None) -> ToolProfile:
    """The registered profile ``name`` (None: the default)."""
    profile = PROFILES.get(name or DEFAULT_PROFILE)
    if profile is None:
        near = difflib.get_close_matches(str(name), list(PROFILES), n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise UnknownProfile(f"unknown tool profile {name!r}{hint} (profiles: {', '.join(PROFILES)})")
    return profile


register_profile(ToolProfile(
    name="default", about="bash in a persistent shell, file view and edit tools, and submit",
    tools=_DEFAULT_TOOLS, template=_DEFAULT_TEMPLATE))
register_profile(ToolProfile(
    name="bash-only", about="mini-swe-agent's protocol: one bash tool, each command in a fresh subshell, "
                            "submitted by the sentinel line",
    tools=(Tool(name="bash", args=SubshellBashArgs, mutates=True, description="Execute a bash command"),),
    template=_BASH_ONLY_INSTRUCTIONS, output_style="returncode", submit_sentinel=SUBMIT_SENTINEL))

#: The default profile's MCP specs (the tools an episode has unless its reset names another profile).
TOOL_SPECS: list[ToolSpec] = get_profile(DEFAULT_PROFILE).specs()


def policy_tools(profile: str | None = None) -> list[dict[str, Any]]:
    """The tool schemas a policy is shown for ``profile`` (default profile when None)."""
    return get_profile(profile).policy_tools()

