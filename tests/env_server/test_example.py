"""The example agent loop runs against a real server and resolves the demo task."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from env_support import requires_sandbox, run

pytestmark = requires_sandbox
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent_loop.py"


def test_example_agent_loop(make_server, capsys):
    spec = importlib.util.spec_from_file_location("agent_loop", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with make_server() as srv:
        run(mod.main(srv.ws_url, None, None))
    out = capsys.readouterr().out
    assert "reward: 1.0" in out and "state(2): 6 messages" in out
