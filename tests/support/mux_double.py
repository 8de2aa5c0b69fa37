"""Deterministic test doubles for the trainer-client tests (named as doubles, kept in one place).

`MuxServerDouble`: a small WebSocket server speaking the /mux protocol of docs/contracts.md
on loopback, with a scripted in-memory environment instead of a sandbox. It lets the
client's protocol machinery (request ids, interleaving, timeouts, reconnect + re-send,
dead replicas, capacity errors) be exercised before and independently of the real env
server; end-to-end tests use the real server.

Scripted tools: `bash` ("sleep S" sleeps S seconds; "false" or anything with "error" is a
failing command that carries error-site markers; else echoes), `submit` (done; reward 1.0
if the episode ran `echo fix` or its instance is in `solved`, else 0.0; `grading[instance_id]`
is merged into its metadata, e.g. the grader's hack-attempt signals); other tools echo their
arguments.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field

from support.servers import free_port  # noqa: F401  (re-exported: the trainer tests' one free-port helper)

from contract import MUX_SUBPROTOCOL

TOOLS = ["bash", "view", "str_replace", "create", "submit"]


@dataclass
class _Episode:
    instance_id: str
    step: int = 0
    fixed: bool = False
    done: bool = False
    commands: list[str] = field(default_factory=list)


class MuxServerDouble:
    """A /mux server double on 127.0.0.1:<port>, running on its own thread."""

    def __init__(self, port: int | None = None, max_sessions: int = 1000):
        self.port = port or free_port()
        self.max_sessions = max_sessions
        self.episodes: dict[str, _Episode] = {}
        self.executed: list[tuple[str, str]] = []  # (session_id, request_id) actually executed
        self.grading: dict[str, dict] = {}  # instance_id -> extra metadata of its graded observation
        self.solved: set[str] = set()  # instance_ids whose submit scores 1.0 without `echo fix`
        self._cache: dict[str, dict] = {}
        self._conns: set = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def start(self) -> None:
        from websockets.asyncio.server import serve

        async def _start():
            self._server = await serve(
                self._handle, "127.0.0.1", self.port, max_size=2**26, subprotocols=[MUX_SUBPROTOCOL]
            )

        self._run(_start())

    def stop(self) -> None:
        """Shut the server down (a dead replica); sessions are kept for a restart."""

        async def _stop():
            if self._server is not None:
                self._server.close()
                await self._server.wait_closed()
                self._server = None

        self._run(_stop())

    def drop_connections(self) -> None:
        """Close every client socket but keep serving (a transient network failure)."""

        async def _drop():
            for ws in list(self._conns):
                await ws.close(1011, "dropped by test")

        self._run(_drop())

    def shutdown(self) -> None:
        self.stop()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    async def _handle(self, ws):
        if ws.request.path != "/mux":
            await ws.close(1008, "only /mux")
            return
        self._conns.add(ws)
        try:
            async for raw in ws:
                msg = json.loads(raw)
                asyncio.ensure_future(self._answer(ws, msg))
        except Exception:  # noqa: BLE001 - a dropped client
            pass
        finally:
            self._conns.discard(ws)

    async def _answer(self, ws, msg: dict) -> None:
        rid = msg["request_id"]
        if rid not in self._cache:
            self._cache[rid] = None  # reserve: a re-sent id while running waits for the first run
            self.executed.append((msg["session_id"], rid))
            self._cache[rid] = await self._execute(msg)
        while self._cache[rid] is None:
            await asyncio.sleep(0.01)
        try:
            await ws.send(json.dumps(self._cache[rid]))
        except Exception:  # noqa: BLE001 - the client is gone; it will re-send
            pass

    async def _execute(self, msg: dict) -> dict:
        sid, kind, data = msg["session_id"], msg["type"], msg.get("data") or {}
        reply = {"request_id": msg["request_id"], "session_id": sid}
        if kind == "ping":
            return {**reply, "type": "pong", "data": {}}
        if kind == "reset":
            if sid not in self.episodes and len(self.episodes) >= self.max_sessions:
                return {**reply, "type": "error", "data": {"code": "CAPACITY_REACHED", "message": "full"}}
            ep = self.episodes[sid] = _Episode(instance_id=str(data.get("instance_id", "task-0")))
            obs = {
                "output": "",
                "tool_name": None,
                "tools": [{"type": "function", "function": {"name": t}} for t in TOOLS],
                "issue": f"Fix the bug in {ep.instance_id}.",
                "metadata": {"episode_id": sid, "step": 0, "instance_id": ep.instance_id},
            }
            return {**reply, "type": "observation", "data": {"observation": obs, "reward": None, "done": False}}
        ep = self.episodes.get(sid)
        if ep is None:
            return {**reply, "type": "error", "data": {"code": "SESSION_NOT_FOUND", "message": sid}}
        if kind == "close":
            del self.episodes[sid]
            return {**reply, "type": "closed", "data": {}}
        if kind == "state":
            return {**reply, "type": "state", "data": {"episode_id": sid, "step_count": ep.step}}
        if kind != "step" or data.get("type") != "call_tool":
            return {**reply, "type": "error", "data": {"code": "VALIDATION_ERROR", "message": str(data)}}
        ep.step += 1
        name, args = data["tool_name"], data.get("arguments") or {}
        meta = {"episode_id": sid, "step": ep.step, "instance_id": ep.instance_id}
        reward, output = None, ""
        if name == "bash":
            cmd = str(args.get("command", ""))
            ep.commands.append(cmd)
            if cmd.startswith("sleep "):
                await asyncio.sleep(float(cmd.split()[1]))
                output = "slept"
            elif cmd == "false" or "error" in cmd:
                output = f"exit code 1: {cmd}"
                meta.update(
                    error_kind="nonzero_exit",
                    hint_template_key="shell.nonzero_exit",
                    error_source="agent",
                    error_message="command failed",
                )
            else:
                ep.fixed |= cmd == "echo fix"
                output = cmd.removeprefix("echo ")
        elif name == "submit":
            ep.done = True
            reward = 1.0 if ep.fixed or ep.instance_id in self.solved else 0.0
            output = "submitted"
            meta.update(tests_passed=int(ep.fixed), tests_failed=int(not ep.fixed))
            meta.update(self.grading.get(ep.instance_id, {}))
        else:
            output = f"{name} {json.dumps(args, sort_keys=True)}"
        obs = {"output": output, "tool_name": name, "metadata": meta}
        return {**reply, "type": "observation", "data": {"observation": obs, "reward": reward, "done": ep.done}}
