"""Run by test_client_only_install.py with the python of a venv that has only
`swe-openenv[client]`: no server, no trainer parts may be importable there, and a full
episode (reset, a tool call, the fix, submit, state(t), trace, export) must work.

    python client_only_episode.py URL INSTANCE_ID OUT_DIR   # prints one JSON summary line
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path

FORBIDDEN = ("torch", "fastapi", "uvicorn", "trl", "transformers", "starlette", "docker")


def main(url: str, instance_id: str, out: Path) -> dict:
    present = [name for name in FORBIDDEN if importlib.util.find_spec(name) is not None]
    assert not present, f"importable in a client-only install: {present}"

    import env_client
    from env_client import EnvClient, MissingDependencyError, WsSession, read_jsonl, write_jsonl, write_parquet

    assert "site-packages" in env_client.__file__, env_client.__file__  # the installed copy, not the repo
    with EnvClient(url) as client:
        with client.open(instance_id=instance_id) as session:
            listing = session.call_tool("bash", {"command": "ls"})["output"]
            session.call_tool("str_replace", {"path": "six.py", "old": 'return s.encode("utf-8")',
                                              "new": 'return s.encode("latin-1")'})
            final = session.call_tool("submit")
            state_t = session.state(t=1)
            record = session.export()
        episode_id = record.episode_id
        trace = client.trace(episode_id)
        served = client.export_episode(episode_id)
        http_state = client.episode_state(episode_id, 2)
    write_jsonl([record, served], out / "rollouts.jsonl")
    try:
        write_parquet([record], out / "rollouts.parquet")
        parquet = "written"
    except MissingDependencyError as exc:
        parquet = f"MissingDependencyError: {exc}"

    async def over_ws() -> str:
        async with WsSession(url) as ws:
            obs = await ws.reset(instance_id=instance_id)
            return obs["metadata"]["instance_id"]

    loaded = read_jsonl(out / "rollouts.jsonl")  # the server's chat has its system prompt first
    loaded_modules = sorted(m for m in FORBIDDEN if m in sys.modules)
    return {"listing_has_setup_py": "setup.py" in listing, "reward": final["reward"], "done": final["done"],
            "state_t": state_t["t"], "trace_kinds": [r["kind"] for r in trace], "http_state_t": http_state.t,
            "export_turns": len(record.turns), "served_turns": len(served.turns), "jsonl_records": len(loaded),
            "same_messages": loaded[0].messages == loaded[1].messages[1:], "parquet": parquet,
            "ws_instance": asyncio.run(over_ws()), "loaded_forbidden": loaded_modules}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], Path(sys.argv[3]))))
