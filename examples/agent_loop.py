"""A plain Python agent loop (no TRL) driving one episode over the env server's /ws endpoint.

    env-server serve --tasks TASKS.jsonl --port 8000 &
    python examples/agent_loop.py --url ws://127.0.0.1:8000 [--instance six__demo-1]

The policy here is a scripted stand-in for an LLM: swap `scripted_policy` for a function that
sends `messages` + `tools` to your model and returns its tool call. Failed steps carry error-site
markers (error_kind, hint_template_key, error_source) you can route to a hint generator, and
`state` with `t` returns exactly what the agent saw at step t.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

import websockets


def scripted_policy(step: int, observation: dict[str, Any]) -> dict[str, Any]:
    """Explore, fix the demo task's bug, check, submit (a deterministic double of an LLM policy)."""
    plan = [
        ("bash", {"command": "grep -n 'def b(s)' -A2 six.py | head"}),
        ("str_replace", {"path": "six.py", "old": 'return s.encode("utf-8")', "new": 'return s.encode("latin-1")'}),
        ("bash", {"command": "python -c 'import six; assert six.b(\"\\xff\") == b\"\\xff\"; print(\"ok\")'"}),
        ("submit", {}),
    ]
    name, arguments = plan[min(step, len(plan) - 1)]
    return {"type": "call_tool", "tool_name": name, "arguments": arguments}


async def request(ws: Any, type_: str, data: dict[str, Any] | None = None) -> dict[str, Any]:
    await ws.send(json.dumps({"type": type_, "data": data or {}}))
    reply = json.loads(await ws.recv())
    if reply["type"] == "error":
        raise RuntimeError(f"{reply['data']['code']}: {reply['data']['message']}")
    return reply["data"]


async def main(url: str, instance: str | None, token: str | None) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with websockets.connect(url.rstrip("/") + "/ws", additional_headers=headers, max_size=None) as ws:
        data = await request(ws, "reset", {"instance_id": instance} if instance else {})
        obs = data["observation"]
        print("ISSUE:", obs["issue"].splitlines()[0])
        step = 0
        while not data["done"]:
            action = scripted_policy(step, obs)
            data = await request(ws, "step", action)
            obs, meta = data["observation"], data["metadata"]
            marker = f" [{meta['error_kind']} / {meta['hint_template_key']} / {meta['error_source']}]" \
                if "error_kind" in meta else ""
            print(f"step {meta['step']}: {action['tool_name']}{marker} -> {obs['output'][:120]!r}")
            step += 1
        print("reward:", data["reward"])
        record = await request(ws, "state", {"t": 2})
        print(f"state(2): {len(record['messages'])} messages, next action {record['next_action']}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="ws://127.0.0.1:8000")
    ap.add_argument("--instance", default=None)
    ap.add_argument("--token", default=None)
    a = ap.parse_args()
    asyncio.run(main(a.url, a.instance, a.token))
