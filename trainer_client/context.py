"""Token ids of a state(t) record: the exact context the policy was conditioned on at turn t.

A state(t) record (``contract.StateRecord``) of an episode this trainer ran holds
the policy's own messages and tool schemas (``render_context``) and, per assistant message,
the token ids the policy generated (``turn_token_ids``). Tokenized the way the rollout was
built (prompt through the chat template with the tools, each turn's generated ids verbatim,
each group of tool results as the template's tool suffix plus the generation prompt), they
equal the ids the policy saw before its next turn; channel 2 and channel 3 can then work on
the policy's context instead of an approximation of it.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

__all__ = ["context_ids", "tool_suffix_ids"]


def _plain(message: Mapping[str, Any]) -> dict:
    """A message as chat templates take it: tool-call arguments as objects, no wire-only ids."""
    m = {k: v for k, v in message.items() if v is not None and k not in ("tool_call_id",)}
    if m.get("tool_calls"):
        calls = []
        for call in m["tool_calls"]:
            fn = dict(call.get("function") or {})
            if isinstance(fn.get("arguments"), str):
                fn["arguments"] = json.loads(fn["arguments"]) if fn["arguments"].strip() else {}
            calls.append({"type": "function", "function": fn})
        m["tool_calls"] = calls
    m.setdefault("content", "")
    return m


def _template(tokenizer: Any, messages: list[dict], **kwargs: Any) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False, **kwargs)
    return list(ids)


def tool_suffix_ids(tokenizer: Any, tool_messages: list[dict], **template_kwargs: Any) -> list[int]:
    """The ids that follow an assistant turn's end for ``tool_messages``, through the next generation
    prompt: the template's rendering after a minimal assistant turn, cut at its end-of-turn token."""
    dummy = [{"role": "user", "content": "dummy"},
             {"role": "assistant", "content": "",
              "tool_calls": [{"type": "function", "function": {"name": tool_messages[0]["name"], "arguments": {}}}]}]
    prefix = _template(tokenizer, dummy, add_generation_prompt=False, **template_kwargs)
    full = _template(tokenizer, dummy + tool_messages, add_generation_prompt=True, **template_kwargs)
    eos = [k for k, tok in enumerate(prefix) if tok == tokenizer.eos_token_id]
    if eos:
        prefix = prefix[: eos[-1] + 1]
    if full[: len(prefix)] != prefix:
        raise ValueError("chat template is not prefix-preserving after an assistant turn")
    return full[len(prefix):]


def context_ids(tokenizer: Any, state: Mapping[str, Any], **template_kwargs: Any) -> list[int]:
    """The token ids of ``state`` (a state(t) record as a dict) ready for the policy's next turn.

    Assistant messages use their recorded ``turn_token_ids`` when present, else their
    template rendering (then exact only when the policy wrote the template's canonical form).
    """
    messages = [_plain(m) for m in state["messages"]]
    tools = state.get("tools") or None
    turn_ids = list(state.get("turn_token_ids") or [])
    first = next((k for k, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    ids = _template(tokenizer, messages[:first], tools=tools, add_generation_prompt=True, **template_kwargs)
    k, turn = first, 0
    while k < len(messages):
        recorded = turn_ids[turn] if turn < len(turn_ids) else None
        if recorded is not None:
            ids += recorded
        else:
            upto = _template(tokenizer, messages[: k + 1], tools=tools, **template_kwargs)
            ids = upto if upto[: len(ids)] == ids else ids + upto[len(ids):]
        turn += 1
        k += 1
        tools_after = []
        while k < len(messages) and messages[k]["role"] == "tool":
            tools_after.append(messages[k])
            k += 1
        if tools_after:
            ids += tool_suffix_ids(tokenizer, tools_after, **template_kwargs)
    return ids
