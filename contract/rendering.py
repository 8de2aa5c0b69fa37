"""The one renderer of a policy's context: prompt, tool schemas, tool-output formatting and truncation.

The server renders state(t) with it and clients render their rollouts with it, so both see the same text.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .observations import ChatMessage
from .tools import OutputStyle, get_profile

#: The user message a policy's episode starts with (the issue follows it): the trainer's default
#: (`data.prompt`) and the evaluator's, so an evaluation asks what training optimized (the default
#: profile's; ``get_profile(name).prompt`` for another).
DEFAULT_PROMPT = get_profile(None).prompt
#: mini-swe-agent's SWE-bench observation template: outputs of this length or more show head and tail
RETURNCODE_STYLE_LIMIT = 10_000
_TOO_LONG = (
    "<warning>\nThe output of your last command was too long.\nPlease try a different command that produces less "
    "output.\nIf you're looking at a file you can try use head, tail or sed to view a smaller number of lines "
    "selectively.\nIf you're using grep or find and it produced too much output, you can use a more selective "
    "search pattern.\nIf you really need to see something from the full command's output, you can redirect "
    "output to a file and then search in that file.\n</warning>")


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


def format_tool_output(observation: dict[str, Any], max_output_chars: int | None = None,
                       style: OutputStyle = "plain") -> str:
    """A tool result as the policy reads it. ``plain``: the output, the error marker's message,
    head+tail cut at ``max_output_chars``; ``returncode``: mini-swe-agent's observation template
    (exception, ``<returncode>``, ``<output>``; head and tail past 10,000 characters)."""
    text = str(observation.get("output") or "")
    meta = observation.get("metadata") or {}
    if style == "returncode":
        return _returncode_style(text, meta)
    message = meta.get("error_message")
    if meta.get("error_kind") and message and message not in text:
        text = f"{text}\n[{meta['error_kind']}] {message}" if text else f"[{meta['error_kind']}] {message}"
    if max_output_chars is not None and len(text) > max_output_chars:
        half = max_output_chars // 2
        text = f"{text[:half]}\n[... {len(text) - max_output_chars} characters cut ...]\n{text[-half:]}"
    return text or "(no output)"


def _returncode_style(output: str, meta: dict[str, Any]) -> str:
    if "returncode" not in meta:  # not a command (a refused call): what went wrong, as the harness says it
        return f"<error>\n{meta.get('error_message') or output}\n</error>"
    head = f"<exception>{meta['exception_info']}</exception>\n" if meta.get("exception_info") else ""
    head += f"<returncode>{meta['returncode']}</returncode>\n"
    if len(output) < RETURNCODE_STYLE_LIMIT:
        return f"{head}<output>\n{output}</output>"
    half = RETURNCODE_STYLE_LIMIT // 2
    return (f"{head}{_TOO_LONG}<output_head>\n{output[:half]}\n</output_head>\n<elided_chars>\n"
            f"{len(output) - RETURNCODE_STYLE_LIMIT} characters elided\n</elided_chars>\n<output_tail>\n"
            f"{output[-half:]}\n</output_tail>")


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
    style = get_profile(reset.get("profile")).output_style
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
        content = format_tool_output(obs, limit, style) if spec else obs.get("output", "")
        messages.append(ChatMessage(role="tool", content=content, name=name, tool_call_id=_call_id(t)))
    return messages, tools, (turn_ids if any(ids is not None for ids in turn_ids) else None)
