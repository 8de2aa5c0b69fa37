"""The wire contract: every type that crosses the network between the env server and its clients.

``errors`` (error frames, error-site markers and blame; the monitor's reasons and a trainer's policy
for them), ``actions`` (tool calls), ``tools`` (the tool registry: every tool and tool profile), ``observations`` (observations,
state, the state(t) record), ``frames`` (``/ws`` and ``/mux`` requests and replies) and ``rendering``
(the policy's context, rendered the same way on both sides). ``overrides`` is the ``--set key=value``
grammar all commands share; ``extras`` names the install extra each command needs (one line instead of
a ModuleNotFoundError). Pure pydantic and YAML: the server, the verifier, the client library and the
trainer import it; it imports none of them.
"""

from .actions import Action, CallToolAction, ListToolsAction
from .errors import (AGENT_HINT_KEYS, DEFAULT_SUSPICION_POLICY, ERROR_KIND_TABLE, HINT_KEYS, REWARD_HACKING,
                     SUSPICION_POLICY_KEYS, SUSPICION_TABLE, ErrorCode, ErrorData, ErrorKind, ErrorKindSpec,
                     ErrorSource, SuspicionDecision, SuspicionPolicy, SuspicionReason, SuspicionSpec,
                     suspicion_decision)
from .frames import (MUX_SUBPROTOCOL, PROTOCOL_VERSION, MuxReply, MuxReplyType, MuxRequest, MuxRequestType, ResetParams,
                     StateParams, WsReply, WsReplyType, WsRequest, WsRequestType, compact_json)
from .observations import ChatMessage, EpisodeState, NextAction, StateRecord, SWEObservation
from .rendering import DEFAULT_PROMPT, AssistantTurn, ContextSpec, format_tool_output, render_context
from .tools import (DEFAULT_PROFILE, PROFILES, SUBMIT_SENTINEL, SUBSHELL_ENV, SUBSHELL_TIMEOUT_S, TOOL_SPECS, BashArgs,
                    CreateArgs, StrReplaceArgs, SubmitArgs, SubshellBashArgs, Tool, ToolProfile, ToolSpec, UnknownProfile,
                    ViewArgs, get_profile, policy_tools, register_profile)

__all__ = [
    "AGENT_HINT_KEYS", "Action", "DEFAULT_PROMPT", "DEFAULT_SUSPICION_POLICY", "AssistantTurn", "BashArgs",
    "CallToolAction", "ChatMessage", "ContextSpec", "CreateArgs", "ERROR_KIND_TABLE", "EpisodeState", "ErrorCode",
    "ErrorData", "ErrorKind", "ErrorKindSpec", "ErrorSource", "HINT_KEYS", "ListToolsAction", "MUX_SUBPROTOCOL",
    "MuxReply", "MuxReplyType", "MuxRequest", "MuxRequestType", "NextAction", "PROTOCOL_VERSION", "REWARD_HACKING",
    "ResetParams", "SUSPICION_POLICY_KEYS", "SUSPICION_TABLE", "SWEObservation", "StateParams", "StateRecord",
    "StrReplaceArgs", "SubmitArgs", "SuspicionDecision", "SuspicionPolicy", "SuspicionReason", "SuspicionSpec",
    "DEFAULT_PROFILE", "PROFILES", "SUBMIT_SENTINEL", "SUBSHELL_ENV", "SUBSHELL_TIMEOUT_S",
    "SubshellBashArgs", "TOOL_SPECS", "Tool", "ToolProfile", "ToolSpec", "UnknownProfile", "ViewArgs", "WsReply", "WsReplyType",
    "WsRequest", "WsRequestType", "compact_json", "format_tool_output", "policy_tools", "render_context",
    "get_profile", "register_profile", "suspicion_decision",
]
