"""Helpers of the evaluation tests: start an env server, run `trainer-client`, run `evaluate`."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MODEL = "policy-double"


def cli_argv(*args: str) -> list[str]:
    """The `trainer-client` command line (the installed console script, as a user runs it)."""
    exe = Path(sys.executable).parent / "trainer-client"
    head = [str(exe)] if exe.exists() else [sys.executable, "-m", "trainer_client.cli"]
    return head + [str(a) for a in args]


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ENV_SERVER_TOKEN"}
    env.setdefault("PYTHONUNBUFFERED", "1")
    return {**env, **(extra or {})}


def trainer_client(*args: str, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`trainer-client ARGS` run to its end; `env`: variables set for it."""
    return subprocess.run(cli_argv(*args), capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=cli_env(env))


def result_lines(out: Path) -> list[dict[str, Any]]:
    """results.jsonl's complete lines, in order (a line cut by a kill is left out)."""
    path = Path(out) / "results.jsonl"
    rows = []
    if not path.exists():
        return rows
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            pass
    return rows


def report(out: Path) -> dict[str, Any]:
    return json.loads((Path(out) / "report.json").read_text(encoding="utf-8"))


def run_eval(env_urls: list[str], tasks: Path, base_url: str, out: Path, *, samples: int = 1,
             concurrency: int = 4, logprobs: bool = False, on_result=None, endpoint: dict[str, Any] | None = None,
             **config: Any) -> dict[str, Any]:
    """`evaluation.evaluate` (the library) of the double at `base_url`; the summary. `endpoint`:
    more EndpointConfig fields (prices, ...), `config`: more EvalConfig fields."""
    from evaluation import ChatEndpoint, EndpointConfig, EvalConfig, evaluate

    cfg = EvalConfig(env_urls=env_urls, tasks=str(tasks), samples=samples, concurrency=concurrency, out=str(out),
                     model_name=MODEL, progress=False, **config)

    async def go() -> dict[str, Any]:
        policy = ChatEndpoint(EndpointConfig(**{"base_url": base_url, "model": MODEL, "logprobs": logprobs,
                                                "backoff_s": 0.1, **(endpoint or {})}))
        try:
            return await evaluate(cfg, policy, on_result=on_result)
        finally:
            await policy.aclose()

    return asyncio.run(go())


def plain(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages with their null fields left out (a null and an absent field say the same)."""
    return [{k: v for k, v in m.items() if v is not None} for m in messages]


async def server_states(url: str, episode_id: str, ts: list[int]) -> dict[int, dict[str, Any]]:
    """The env server's state(t) records of an episode, as it sent them (GET /episodes/{id}/state/{t})."""
    from env_client import AsyncHttpClient

    async with AsyncHttpClient(url) as http:
        return {t: await http.state_json(episode_id, t) for t in ts}
