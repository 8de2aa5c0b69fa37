"""Test double of a model: an OpenAI-compatible chat-completions server on loopback, over real HTTP.

It stands in for an LLM behind vLLM / `transformers serve` (none can run here at speed). It finds
the task of each request by its issue text (the last prompt message) in a task file, and answers
by `--mode`:

- `gold`: turn 1 applies the task's gold patch with `patch -p1` in a bash call, turn 2 submits
  (a policy that always fixes the bug: resolved 1.0 end to end);
- `submit`: submits at once (resolved 0.0);
- `silent`: answers text without a tool call (the harness auto-submits: 0.0);
- `explore`: `--turns` bash calls (`ls`), then submit (turn-limit and throughput tests).

`--delay S` sleeps before each answer (a slow model); `--logprobs` returns per-token log-probs
and token ids as vLLM does. GET /stats counts requests; GET /requests returns each request's
`messages` and `tools` as received. Run it as a process
(`python -m tests.evaluation.policy_double --tasks F --mode gold --port P`) or with
`PolicyDouble(...)` (a context manager that starts that process and waits for /health).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from fastapi import Request  # module level: the route's annotation is resolved from these globals

ROOT = Path(__file__).resolve().parents[2]


def _issue_text(messages: list[dict[str, Any]]) -> str:
    users = [m for m in messages if m.get("role") == "user"]
    return str(users[-1].get("content") or "") if users else ""


def build_app(tasks_file: str, mode: str, delay: float = 0.0, turns: int = 3, logprobs: bool = False,
              model: str = "policy-double") -> Any:
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    from evaluation.tasksets import read_task_lines

    tasks = [row for row, _ in read_task_lines(tasks_file) if row.get("problem_statement")]
    stats = {"requests": 0, "by_instance": {}}
    received: list[dict[str, Any]] = []  # every request's messages and tools, as sent (GET /requests)
    app = FastAPI()

    @app.get("/health")
    def health() -> dict:
        return {"status": "healthy"}

    @app.get("/stats")
    def get_stats() -> dict:
        return stats

    @app.get("/requests")
    def get_requests() -> list:
        return received

    @app.get("/v1/models")
    def models() -> dict:
        return {"object": "list", "data": [{"id": model, "object": "model"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        stats["requests"] += 1
        received.append({"messages": body["messages"], "tools": body.get("tools") or []})
        issue = _issue_text(body["messages"])
        task = next((t for t in tasks if t["problem_statement"] in issue), None)
        if task is None:
            return JSONResponse({"error": {"message": "policy double: unknown task"}}, status_code=400)
        iid = task["instance_id"]
        stats["by_instance"][iid] = stats["by_instance"].get(iid, 0) + 1
        if delay:
            await asyncio.sleep(delay)
        n = sum(m.get("role") == "assistant" for m in body["messages"])
        call: dict[str, Any] | None
        if mode == "gold":
            call = ({"name": "bash", "arguments": json.dumps(
                {"command": "cd /workspace && patch -p1 <<'GOLD_PATCH_EOF'\n" + task["patch"] + "GOLD_PATCH_EOF"})}
                if n == 0 else {"name": "submit", "arguments": "{}"})
        elif mode == "submit":
            call = {"name": "submit", "arguments": "{}"}
        elif mode == "silent":
            call = None
        elif mode == "explore":
            call = {"name": "bash", "arguments": json.dumps({"command": "ls"})} if n < turns else \
                {"name": "submit", "arguments": "{}"}
        else:
            return JSONResponse({"error": {"message": f"unknown mode {mode}"}}, status_code=500)
        message: dict[str, Any] = {"role": "assistant", "content": "" if call else "I am done."}
        if call:
            message["tool_calls"] = [{"id": f"call_{n}", "type": "function", "function": call}]
        completion = 8 + len(json.dumps(message)) // 16
        choice: dict[str, Any] = {"index": 0, "message": message,
                                  "finish_reason": "tool_calls" if call else "stop"}
        if logprobs and body.get("logprobs"):
            ids = [1000 + (7 * k + n) % 500 for k in range(completion)]
            choice["token_ids"] = ids
            choice["logprobs"] = {"content": [{"token": f"t{i}", "logprob": -0.01 * (k + 1)}
                                              for k, i in enumerate(ids)]}
        prompt = len(json.dumps(body["messages"])) // 4
        return {"id": "cmpl-double", "object": "chat.completion", "model": body.get("model", model),
                "choices": [choice],
                "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                          "total_tokens": prompt + completion}}

    return app


class PolicyDouble:
    """`with PolicyDouble(tasks, "gold", log_dir) as double: double.base_url` (a separate process)."""

    def __init__(self, tasks_file: str | Path, mode: str, log_dir: str | Path, *, delay: float = 0.0,
                 turns: int = 3, logprobs: bool = False, python: str = sys.executable):
        from env_client.processes import free_port

        self.port = free_port()
        self.origin = f"http://127.0.0.1:{self.port}"
        self.base_url = f"{self.origin}/v1"
        self.log_path = Path(log_dir) / f"policy-double-{mode}-{self.port}.log"
        self.argv = [python, "-m", "tests.evaluation.policy_double", "--tasks", str(tasks_file), "--mode", mode,
                     "--port", str(self.port), "--delay", str(delay), "--turns", str(turns)]
        if logprobs:
            self.argv.append("--logprobs")
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> PolicyDouble:
        from env_client.processes import start_process, wait_healthy

        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.proc = start_process(self.argv, self.log_path, cwd=ROOT)
        try:
            wait_healthy(self.origin, self.proc, timeout_s=60, name="the policy double", log_path=self.log_path)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        from env_client.processes import stop_process_group

        if self.proc is not None:
            stop_process_group(self.proc, 5.0)
            self.proc = None

    def stats(self) -> dict[str, Any]:
        import httpx

        return httpx.get(f"{self.origin}/stats", timeout=10, trust_env=False).json()

    def requests(self) -> list[dict[str, Any]]:
        """Every chat request received so far: `{"messages", "tools"}` as the client sent them."""
        import httpx

        return httpx.get(f"{self.origin}/requests", timeout=30, trust_env=False).json()


def main() -> None:
    import uvicorn

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", required=True)
    p.add_argument("--mode", default="gold", choices=["gold", "submit", "silent", "explore"])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--delay", type=float, default=0.0)
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--logprobs", action="store_true")
    a = p.parse_args()
    app = build_app(a.tasks, a.mode, a.delay, a.turns, a.logprobs)
    uvicorn.run(app, host="127.0.0.1", port=a.port, log_level="warning")


if __name__ == "__main__":
    main()
