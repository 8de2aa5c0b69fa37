"""One registry per extension point: a tool (issue 35, item 1). A throwaway tool added here in two
edits, its entry in a profile (contract/tools.py) and its handler (env_server/tools.py), is carried by
every generated surface: the server's reset observation, MCP list, /metadata and step; the TRL
environment's method and the schema TRL shows the policy; the verifiers toolset's methods; the
prompts; and a tool without a handler keeps the server from starting."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import websockets
from env_support import call, requires_sandbox, run, tool
from pydantic import BaseModel, ConfigDict, Field

from contract import PROFILES, Tool, ToolProfile, get_profile, register_profile
from env_client.adapters.skyrl_dataset import system_prompt
from env_server.app import create_app
from env_server.config import ServerConfig
from env_server.tools import HANDLERS, ToolContext, ToolOutcome, handles, missing_handlers
from trainer_client.environment import environment_class
from verifier.task import load_tasks

pytestmark = requires_sandbox


class ShoutArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, description="what to repeat in capitals")
    times: int | None = Field(None, ge=1, description="how many times (default once)")


@pytest.fixture
def shout_profile() -> Iterator[ToolProfile]:
    default = get_profile(None)
    # edit 1: the entry (here in a profile of its own; in the project, a line in a profile's tools)
    shout = Tool(name="shout", args=ShoutArgs, description="Repeat text in capitals.")
    profile = register_profile(default.model_copy(update={"name": "with-shout", "tools": (*default.tools, shout)}))

    # edit 2: the handler
    @handles(ShoutArgs)
    async def _shout(sb, args: ShoutArgs, ctx: ToolContext) -> ToolOutcome:
        return ToolOutcome(output=" ".join([args.text.upper()] * (args.times or 1)))

    try:
        yield profile
    finally:
        PROFILES.pop("with-shout", None)
        HANDLERS.pop(ShoutArgs, None)


def test_a_tool_added_in_two_edits_is_on_every_surface(shout_profile, make_server, demo_task):
    # the client surfaces, generated from the entry
    env_class = environment_class("with-shout")
    assert "shout" in env_class.tool_methods()
    schema = next(s for s in env_class.tool_schemas() if s["function"]["name"] == "shout")  # what TRL shows
    assert schema == next(t for t in shout_profile.policy_tools() if t["function"]["name"] == "shout")
    assert schema["function"]["parameters"]["required"] == ["text"]
    assert schema["function"]["description"] == "Repeat text in capitals."
    verifiers_methods = shout_profile.methods(lambda owner, name, arguments: None, asynchronous=True)
    assert "shout" in verifiers_methods and verifiers_methods["shout"].__doc__.startswith("Repeat text in capitals.")
    assert "shout" in shout_profile.prompt and '"name": "shout"' in system_prompt(profile="with-shout")
    assert "shout" not in get_profile(None).prompt  # the other profiles are untouched
    # the trainer's method makes the env call (a stand-in session records it; no arguments left as None)
    calls = []
    env = object.__new__(env_class)
    env._call = lambda name, arguments, record=True: calls.append((name, arguments)) or "ok"
    assert env.shout("hi") == "ok" and env.shout(text="a", times=2) == "ok"
    assert calls == [("shout", {"text": "hi"}), ("shout", {"text": "a", "times": 2})]

    async def main(srv):
        async with websockets.connect(srv.ws_url + "/ws") as ws:
            r = await call(ws, "reset", {"instance_id": demo_task.instance_id, "profile": "with-shout"})
            served = {t["name"]: t for t in r["data"]["observation"]["tools"]}
            assert served["shout"]["inputSchema"]["properties"]["times"]["type"] == "integer"
            r = await call(ws, "step", tool("shout", text="fix it", times=2))
            assert r["data"]["observation"]["output"] == "FIX IT FIX IT", r
            r = await call(ws, "step", tool("shout", text=""))  # its schema is enforced like any tool's
            assert r["data"]["metadata"]["error_kind"] == "invalid_arguments"
            r = await call(ws, "step", {"type": "list_tools"})
            assert "shout" in {t["name"] for t in r["data"]["observation"]["tools"]}
            r = await call(ws, "reset", {"instance_id": demo_task.instance_id})  # not in the default profile
            r = await call(ws, "step", tool("shout", text="x"))
            assert r["data"]["metadata"]["error_kind"] == "unknown_tool"
        async with httpx.AsyncClient(base_url=srv.url, timeout=60) as http:
            assert "shout" in (await http.get("/metadata")).json()["profiles"]["with-shout"]["tools"]
            listed = (await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                                                    "params": {"profile": "with-shout"}})).json()
            assert "shout" in [t["name"] for t in listed["result"]["tools"]]
    with make_server() as srv:
        run(main(srv))


def test_a_tool_without_a_handler_keeps_the_server_from_starting(tmp_path, demo_tasks_path):
    default = get_profile(None)
    register_profile(default.model_copy(update={"name": "unhandled", "tools": (
        *default.tools, Tool(name="shout", args=ShoutArgs, description="Repeat text in capitals."))}))
    try:
        assert missing_handlers() == ["unhandled/shout"]
        config = ServerConfig(tasks_path=demo_tasks_path, data_dir=tmp_path / "data")
        with pytest.raises(RuntimeError, match=r"no handler runs the tools unhandled/shout: register one"):
            create_app(config, load_tasks(demo_tasks_path))
    finally:
        PROFILES.pop("unhandled", None)
    assert missing_handlers() == []
