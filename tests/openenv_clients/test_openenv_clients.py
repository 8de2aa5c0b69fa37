"""Both OpenEnv client generations, unmodified, against the real server (real bwrap sandbox).

openenv-core 0.3.0 (the package the design names; the newest 0.3.x) and openenv 0.10.0 (its
renamed successor; the newest 0.10.x), each from its own venv: ``GenericEnvClient`` (``/ws``)
and ``MCPToolClient`` (0.3: ``/ws`` steps; 0.10: HTTP ``/mcp`` tool calls on a session that
``/ws?session_id=`` shares for reset) drive the demo task to a resolved submission.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).with_name("openenv_episode.py")
TOOLS = {"bash", "view", "str_replace", "create", "submit"}
RELEASES = {  # venv name -> (requirement, distribution)
    "openenv-core-0.3.0": ("openenv-core==0.3.0", "openenv-core"),
    "openenv-0.10.0": ("openenv==0.10.0", "openenv"),
}
CASES = [(venv, kind) for venv in RELEASES for kind in ("generic", "mcp")]


@pytest.mark.parametrize(("venv", "kind"), CASES, ids=[f"{v}-{k}" for v, k in CASES])
def test_unmodified_client_resolves_the_demo_task(server, server_errors, demo_task, openenv_python, tmp_path,
                                                   venv, kind):
    requirement, dist = RELEASES[venv]
    python = openenv_python(venv, requirement)
    episode_id = f"oe-{venv}-{kind}"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing of this project importable
    proc = subprocess.run([str(python), str(SCRIPT), kind, server.url, demo_task.instance_id, episode_id],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{venv} {kind} client failed:\n{proc.stdout}\n{proc.stderr}"
    out = json.loads(proc.stdout.strip().splitlines()[-1])

    assert (out["package"], out["version"]) == (dist, requirement.split("==")[1])
    assert TOOLS <= set(out["tools"]), out["tools"]
    assert "six.py" in out["ls"] and "test_six.py" not in out["ls"], out["ls"]
    assert "Edited six.py" in out["edit"], out["edit"]
    assert out["reward"] == 1.0 and out["done"] is True and out["resolved"] is True, out
    if kind == "generic":
        assert TOOLS <= set(out["reset_tools"]) and "six.b()" in out["issue"]
        assert out["state_episode_id"] == episode_id
    else:
        assert out["reset_observation"] == "ListToolsObservation"  # reset carries the tool list
        assert out["ls_is_error"] is False
        assert {"path", "old", "new"} <= set(out["str_replace_schema"]["properties"])
        # 0.3 calls tools as /ws steps; 0.10 over HTTP /mcp, sharing the session with /ws
        assert out["production_mode"] is (venv == "openenv-0.10.0")

    # every call landed in the episode that reset named (for 0.10's MCPToolClient: /ws reset,
    # /mcp tool calls, one server session), and the client released its session on exit
    records = server.service.store.load(episode_id)
    steps = [r["action"].get("tool_name") for r in records[1:]]
    assert records[0]["kind"] == "reset" and steps[-3:] == ["bash", "str_replace", "submit"], steps
    assert records[-1]["observation"]["reward"] == 1.0
    deadline = time.monotonic() + 10
    while server.service.sessions and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not server.service.sessions, list(server.service.sessions)
    # nothing went wrong on the server's side either (these clients send `close` and hang up at once)
    assert not server_errors, [r.getMessage() for r in server_errors]
