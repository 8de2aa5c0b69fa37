"""The host side of the runtime protocol against scripted replies: every byte from the
runtime is untrusted, and a silent runtime is declared dead at its deadline."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

import sandbox.channel as channel_mod
from sandbox import CommandStatus, SandboxDied
from sandbox.channel import RuntimeChannel


def scripted(*replies: bytes) -> tuple[RuntimeChannel, list[dict]]:
    """A channel whose runtime answers each request with the next scripted line."""
    reader = asyncio.StreamReader()
    sent: list[dict] = []
    queue = list(replies)

    async def write(data: bytes) -> None:
        sent.append(json.loads(data))
        if queue:
            reader.feed_data(queue.pop(0))

    return RuntimeChannel(reader, write), sent


def test_command_result_is_parsed_and_typed():
    async def main():
        ch, sent = scripted(b'{"id":1,"ok":true,"result":{"output":"hi \\u00e9\\n","exit_code":0,"status":"ok",'
                            b'"truncated":false,"output_bytes":6,"duration_s":0.001,"files_changed":true}}\n')
        res = await ch.run("echo hi", 5)
        assert sent == [{"id": 1, "op": "run", "command": "echo hi", "timeout_s": 5}]
        assert (res.output, res.exit_code, res.status, res.files_changed) == ("hi é\n", 0, CommandStatus.ok, True)
    asyncio.run(main())


@pytest.mark.parametrize("line", [
    b"not json\n", b"[1]\n", b"\xff\xfe\n", b"[" * 100_000 + b"\n",  # garbage, non-object, bad UTF-8, deep nesting
    b'{"id":9,"ok":true,"result":{}}\n',  # out of order
])
def test_garbage_from_the_runtime_kills_the_session_not_the_server(line):
    async def main():
        ch, _ = scripted(line)
        with pytest.raises(SandboxDied):
            await ch.request("ping", 5)
        assert ch.dead
        with pytest.raises(SandboxDied):  # and it stays dead
            await ch.request("ping", 5)
    asyncio.run(main())


@pytest.mark.parametrize("result", [
    {"output": "x", "exit_code": "0", "status": "ok"},  # a string exit code
    {"output": "x", "exit_code": 0, "status": "exploded"},  # an unknown status
])
def test_malformed_command_results_read_as_a_dead_sandbox(result):
    async def main():
        ch, _ = scripted(json.dumps({"id": 1, "ok": True, "result": result}).encode() + b"\n")
        res = await ch.run("true", 5)
        assert res.status is CommandStatus.sandbox_died and ch.dead
    asyncio.run(main())


def test_a_silent_runtime_is_declared_dead_at_its_deadline(monkeypatch):
    monkeypatch.setattr(channel_mod, "WATCHDOG_PERIOD_S", 0.05)

    async def main():
        ch, _ = scripted()  # never answers
        start = time.monotonic()
        with pytest.raises(SandboxDied, match="did not answer"):
            await ch.request("ping", 0.3)
        assert 0.3 <= time.monotonic() - start < 2
        # one watchdog timer serves many waiting channels
        silent = [scripted()[0] for _ in range(50)]
        results = await asyncio.gather(*(c.request("ping", 0.2) for c in silent), return_exceptions=True)
        assert all(isinstance(r, SandboxDied) for r in results)
    asyncio.run(main())
