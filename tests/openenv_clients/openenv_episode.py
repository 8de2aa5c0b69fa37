"""One demo-task episode driven by an unmodified OpenEnv client (run with a client venv's python).

    python openenv_episode.py {generic|mcp} BASE_URL INSTANCE_ID EPISODE_ID

Runs reset, the tool list, ``bash ls``, the fix (``str_replace`` in six.py) and ``submit``,
then prints one JSON line: the client's package and version, the tool names, the outputs and
the reward. Imports only the installed OpenEnv package (never this project).
"""

from __future__ import annotations

import asyncio
import json
import sys
from importlib import metadata

FIX = {"path": "six.py", "old": 'return s.encode("utf-8")', "new": 'return s.encode("latin-1")'}
TIMEOUT_S = 300.0  # submit runs the hidden tests


def _package() -> tuple[str, str]:
    for dist in ("openenv", "openenv-core"):
        try:
            return dist, metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    raise SystemExit("no OpenEnv package installed")


def _call(name: str, **arguments: object) -> dict:
    return {"type": "call_tool", "tool_name": name, "arguments": arguments}


async def generic(url: str, instance_id: str, episode_id: str) -> dict:
    """``GenericEnvClient`` over ``/ws``: plain dict actions and observations."""
    from openenv.core.generic_client import GenericEnvClient

    async with GenericEnvClient(base_url=url, message_timeout_s=TIMEOUT_S) as env:
        reset = await env.reset(instance_id=instance_id, episode_id=episode_id)
        listed = await env.step({"type": "list_tools"})
        ls = await env.step(_call("bash", command="ls"))
        edit = await env.step(_call("str_replace", **FIX))
        final = await env.step(_call("submit"))
        state = await env.state()
        return {"issue": reset.observation["issue"],
                "reset_tools": [t["name"] for t in reset.observation["tools"]],
                "tools": [t["name"] for t in listed.observation["tools"]],
                "ls": ls.observation["output"], "edit": edit.observation["output"],
                "reward": final.reward, "done": final.done,
                "resolved": final.observation["metadata"].get("resolved"),
                "state_episode_id": state.get("episode_id")}


async def mcp(url: str, instance_id: str, episode_id: str) -> dict:
    """``MCPToolClient``: reset over ``/ws``, tools as its release sends them (``/ws`` steps in
    openenv-core 0.3, HTTP ``/mcp`` on a session shared with ``/ws?session_id=`` in openenv 0.10)."""
    from openenv.core.mcp_client import MCPToolClient

    async with MCPToolClient(base_url=url, message_timeout_s=TIMEOUT_S) as env:
        reset = await env.reset(instance_id=instance_id, episode_id=episode_id)
        tools = await env.list_tools()
        ls = await env.call_tool("bash", command="ls")
        edit = await env.call_tool("str_replace", **FIX)
        final = await env.call_tool("submit")
        tool = await env.get_tool("str_replace")
        return {"reset_observation": type(reset.observation).__name__,
                "production_mode": bool(getattr(env, "use_production_mode", False)),
                "tools": [t.name for t in tools], "str_replace_schema": tool.input_schema if tool else None,
                "ls": ls["content"][0]["text"], "ls_is_error": ls["isError"],
                "edit": edit["content"][0]["text"],
                "reward": final["structuredContent"]["reward"], "done": final["structuredContent"]["done"],
                "resolved": final["structuredContent"]["metadata"].get("resolved")}


def main() -> None:
    kind, url, instance_id, episode_id = sys.argv[1:5]
    dist, version = _package()
    result = asyncio.run({"generic": generic, "mcp": mcp}[kind](url, instance_id, episode_id))
    print(json.dumps({"package": dist, "version": version, "client": kind, **result}))


if __name__ == "__main__":
    main()
