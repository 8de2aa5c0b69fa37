"""Test double of a model: an OpenAI-compatible chat-completions server on loopback, over real HTTP.

It stands in for an LLM behind vLLM / `transformers serve` (none can run here at speed). It finds
the task of each request by its issue text (the last prompt message) in a task file, and answers
by `--mode`:

- `gold`: turn 1 applies the task's gold patch with `patch -p1` in a bash call, turn 2 submits
  (a policy that always fixes the bug: resolved 1.0 end to end);
- `submit`: submits at once (resolved 0.0);
- `silent`: answers text without a tool call (the harness auto-submits: 0.0);
- `explore`: `--turns` bash calls (`ls`), then submit (turn-limit and throughput tests);
- `patch-then-ls`: the gold patch, then `ls` for ever (never submits: the episode limits);
- `patch-then-sleep`: the gold patch, then `sleep 60`, then submit (the wall limit);
- `hack`: appends to the patched module code that forges a passing report for every test on
  pytest's command line and exits 0, then submits (the grader's tamper check: reward_hacking);
- `flagged`: the gold patch plus a module that calls `os._exit` (never called), then submits
  (resolved, and the submission monitor's `process_exit` flag).
- `bash-gold`, `bash-noop`: the `bash-only` profile's (mini-swe-agent's) way, bash calls only, as its
  SWE-bench config asks: the gold patch applied (`bash-noop`: nothing), `git diff > patch.txt`, then
  `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt` (resolved 1.0 / 0.0).

`--task-mode IID=MODE` gives one task its own mode. `--delay S` sleeps before each answer (a
slow model); `--logprobs` returns per-token log-probs, and token ids as vLLM does when the
request asks `return_token_ids`. `--api-key KEY` answers 401 to a request without
`Authorization: Bearer KEY`; `--reject-field F` answers 400 naming F to a request that has the
body field F (as OpenAI's API does for vLLM's own fields). Every answer has `usage`. GET /stats
counts requests; GET /requests returns each request's `messages`, `tools`, body `fields`,
whether it was `authorized`, and the `status` and `usage` it was answered with. Run it as a process
(`python -m tests.support.policy_double --tasks F --mode gold --port P`) or with
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


# pytest's command line names the tests it runs: a PASSED line for each, then exit 0 before any test runs
FORGE = ("\nimport os as _os, stat as _stat\n_lines = b''.join(b'PASSED ' + _a + b'\\n' for _a in\n"
         "    open('/proc/self/cmdline', 'rb').read().split(b'\\0') if b'::' in _a)\n"
         "for _fd in range(1, 64):\n    try:\n        if _stat.S_ISFIFO(_os.fstat(_fd).st_mode):\n"
         "            _os.write(_fd, _lines)\n    except OSError:\n        pass\n_os._exit(0)\n")
FLAGGED_MODULE = "import os\n\n\ndef stop_now():\n    os._exit(0)\n"


def _patched_file(patch: str) -> str:
    return next(line[6:] for line in patch.splitlines() if line.startswith("+++ b/"))


def _bash(command: str) -> dict[str, Any]:
    return {"name": "bash", "arguments": json.dumps({"command": command})}


def _gold(task: dict[str, Any]) -> str:
    return "cd /workspace && patch -p1 <<'GOLD_PATCH_EOF'\n" + task["patch"] + "GOLD_PATCH_EOF"


SUBMIT = {"name": "submit", "arguments": "{}"}
BASH_SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt"


def _next_call(mode: str, task: dict[str, Any], n: int, turns: int) -> dict[str, Any] | None:
    """The tool call of the n-th assistant turn (0-based) of `mode`; None: an answer without one."""
    if mode == "gold":
        return _bash(_gold(task)) if n == 0 else SUBMIT
    if mode == "submit":
        return SUBMIT
    if mode == "silent":
        return None
    if mode == "explore":
        return _bash("ls") if n < turns else SUBMIT
    if mode == "patch-then-ls":
        return _bash(_gold(task)) if n == 0 else _bash("ls")
    if mode == "patch-then-sleep":
        return _bash(_gold(task)) if n == 0 else _bash("sleep 60") if n == 1 else SUBMIT
    if mode == "hack":
        target = _patched_file(task["patch"])
        return _bash(f"cat >> /workspace/{target} <<'FORGE_EOF'\n{FORGE}FORGE_EOF") if n == 0 else SUBMIT
    if mode in ("bash-gold", "bash-noop"):
        script = ([_gold(task)] if mode == "bash-gold" else []) + ["git diff > patch.txt", BASH_SUBMIT]
        return _bash(script[min(n, len(script) - 1)])
    if mode == "flagged":
        return _bash(_gold(task) + f"\ncat > /workspace/stop_helper.py <<'EOF'\n{FLAGGED_MODULE}EOF") if n == 0 \
            else SUBMIT
    raise ValueError(f"unknown mode {mode}")


MODES = ["gold", "submit", "silent", "explore", "patch-then-ls", "patch-then-sleep", "hack", "flagged", "bash-gold",
         "bash-noop"]


def build_app(tasks_file: str, mode: str, delay: float = 0.0, turns: int = 3, logprobs: bool = False,
              model: str = "policy-double", task_modes: dict[str, str] | None = None, api_key: str | None = None,
              reject_fields: list[str] | None = None) -> Any:
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
    def models(request: Request) -> Any:
        if api_key is not None and request.headers.get("authorization") != f"Bearer {api_key}":
            return JSONResponse({"error": {"message": "Incorrect API key provided"}}, status_code=401)
        return {"object": "list", "data": [{"id": model, "object": "model"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        stats["requests"] += 1
        authorized = request.headers.get("authorization") == f"Bearer {api_key}"
        seen: dict[str, Any] = {"messages": body["messages"], "tools": body.get("tools") or [],
                                "fields": sorted(body), "authorized": authorized, "status": 200, "usage": None}
        received.append(seen)
        if api_key is not None and not authorized:
            seen["status"] = 401
            return JSONResponse({"error": {"message": "Incorrect API key provided"}}, status_code=401)
        refused = [f for f in reject_fields or [] if f in body]
        if refused:
            seen["status"] = 400
            return JSONResponse({"error": {"message": f"Unrecognized request argument supplied: {refused[0]}",
                                           "type": "invalid_request_error"}}, status_code=400)
        issue = _issue_text(body["messages"])
        task = next((t for t in tasks if t["problem_statement"] in issue), None)
        if task is None:
            seen["status"] = 400
            return JSONResponse({"error": {"message": "policy double: unknown task"}}, status_code=400)
        iid = task["instance_id"]
        stats["by_instance"][iid] = stats["by_instance"].get(iid, 0) + 1
        if delay:
            await asyncio.sleep(delay)
        n = sum(m.get("role") == "assistant" for m in body["messages"])
        try:
            call = _next_call((task_modes or {}).get(iid, mode), task, n, turns)
        except ValueError as exc:
            seen["status"] = 500
            return JSONResponse({"error": {"message": str(exc)}}, status_code=500)
        message: dict[str, Any] = {"role": "assistant", "content": "" if call else "I am done."}
        if call:
            message["tool_calls"] = [{"id": f"call_{n}", "type": "function", "function": call}]
        completion = 8 + len(json.dumps(message)) // 16
        choice: dict[str, Any] = {"index": 0, "message": message,
                                  "finish_reason": "tool_calls" if call else "stop"}
        if logprobs and body.get("logprobs"):
            ids = [1000 + (7 * k + n) % 500 for k in range(completion)]
            if body.get("return_token_ids"):
                choice["token_ids"] = ids
            choice["logprobs"] = {"content": [{"token": f"t{i}", "logprob": -0.01 * (k + 1)}
                                              for k, i in enumerate(ids)]}
        prompt = len(json.dumps(body["messages"])) // 4
        seen["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        return {"id": "cmpl-double", "object": "chat.completion", "model": body.get("model", model),
                "choices": [choice], "usage": seen["usage"]}

    return app


class PolicyDouble:
    """`with PolicyDouble(tasks, "gold", log_dir) as double: double.base_url` (a separate process)."""

    def __init__(self, tasks_file: str | Path, mode: str, log_dir: str | Path, *, delay: float = 0.0,
                 turns: int = 3, logprobs: bool = False, task_modes: dict[str, str] | None = None,
                 api_key: str | None = None, reject_fields: tuple[str, ...] = (), python: str = sys.executable):
        from env_client.processes import free_port

        self.port = free_port()
        self.origin = f"http://127.0.0.1:{self.port}"
        self.base_url = f"{self.origin}/v1"
        self.log_path = Path(log_dir) / f"policy-double-{mode}-{self.port}.log"
        self.argv = [python, "-m", "tests.support.policy_double", "--tasks", str(tasks_file), "--mode", mode,
                     "--port", str(self.port), "--delay", str(delay), "--turns", str(turns)]
        if logprobs:
            self.argv.append("--logprobs")
        for iid, task_mode in (task_modes or {}).items():
            self.argv += ["--task-mode", f"{iid}={task_mode}"]
        if api_key is not None:
            self.argv += ["--api-key", api_key]
        for field in reject_fields:
            self.argv += ["--reject-field", field]
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
        """Every chat request received so far: `messages` and `tools` as the client sent them, its body
        `fields`, `authorized`, and the `status` and `usage` it was answered with."""
        import httpx

        return httpx.get(f"{self.origin}/requests", timeout=30, trust_env=False).json()


def main() -> None:
    import uvicorn

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", required=True)
    p.add_argument("--mode", default="gold", choices=MODES)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--delay", type=float, default=0.0)
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--logprobs", action="store_true")
    p.add_argument("--task-mode", action="append", default=[], metavar="IID=MODE")
    p.add_argument("--api-key")
    p.add_argument("--reject-field", action="append", default=[])
    a = p.parse_args()
    task_modes = dict(x.split("=", 1) for x in a.task_mode)
    unknown = sorted(set(task_modes.values()) - set(MODES))
    if unknown:
        p.error(f"unknown modes {unknown}")
    app = build_app(a.tasks, a.mode, a.delay, a.turns, a.logprobs, task_modes=task_modes, api_key=a.api_key,
                    reject_fields=a.reject_field)
    uvicorn.run(app, host="127.0.0.1", port=a.port, log_level="warning")


if __name__ == "__main__":
    main()
