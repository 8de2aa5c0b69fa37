"""A plain Python agent loop (no TRL) driving one episode over the env server's /ws endpoint.

    env-server serve --tasks TASKS.jsonl --port 8000 &
    python examples/agent_loop.py --url ws://127.0.0.1:8000 [--instance six__demo-1]
    ENV_SERVER_TOKEN=... python examples/agent_loop.py --url ws://host:8000  # or --env-token, or ?token=

The policy here is a scripted stand-in for an LLM: swap `scripted_policy` for a function that
sends `messages` + `tools` to your model and returns its tool call. Failed steps carry error-site
markers (error_kind, hint_template_key, error_source) you can route to a hint generator, and
`state` with `t` returns exactly what the agent saw at step t.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import websockets
from websockets.exceptions import InvalidStatus


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


def ws_url_and_token(url: str, token: str | None) -> tuple[str, str | None]:
    """`url` + `/ws` without its `?token=` (sent as the Authorization header instead), and the token
    to send: the URL's, else `token` (--env-token), else $ENV_SERVER_TOKEN."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query)
    url_token = next((v for k, v in query if k == "token"), None)
    base = parts._replace(path=parts.path.rstrip("/") + "/ws", query=urlencode([q for q in query if q[0] != "token"]))
    return base.geturl(), url_token or token or os.environ.get("ENV_SERVER_TOKEN") or None


async def main(url: str, instance: str | None, token: str | None) -> None:
    ws_url, token = ws_url_and_token(url, token)
    headers = {"Authorization": f"Bearer {token}"} if token else None
    try:
        connection = await websockets.connect(ws_url, additional_headers=headers, max_size=None)
    except InvalidStatus as exc:
        if exc.response.status_code in (401, 403):
            raise SystemExit(f"{ws_url} refused the connection: missing or wrong bearer token "
                             "(pass --env-token or set ENV_SERVER_TOKEN)") from None
        raise
    async with connection as ws:
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
    ap.add_argument("--env-token", "--token", dest="token", default=None,
                    help="bearer token of the server (default: $ENV_SERVER_TOKEN)")
    a = ap.parse_args()
    asyncio.run(main(a.url, a.instance, a.token))
