"""One demo-task rollout through verifiers' own eval path (run with the verifiers venv's python).

    python verifiers_episode.py {fix|control} BASE_URL TASKS_PATH INSTANCE_ID OUT_DIR

`run_eval` (what `vf-eval` runs) loads the taskset by module name (`swe_openenv_taskset`, a
two-line module the test writes, on PYTHONPATH), runs the `null` harness (verifiers' chat
program: it parses the model's OpenAI tool calls and calls the task's MCP tools) in the
subprocess runtime, and scores the trace. The model is a scripted double: a local
OpenAI-compatible endpoint streaming fixed tool calls (fix: a command that does not exist,
the gold edit, submit; control: `ls` + a long output, submit; then a text reply). The tool
settings: fix names the replica in `tools.urls` (token: $ENV_SERVER_TOKEN, the default
`token_var`); control names none (the tool servers read $SWE_OPENENV_URLS) and sets
`token_var` (SWE_TEST_ENV_TOKEN) and `max_output_chars` (MAX_OUTPUT_CHARS). Prints one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from pathlib import Path

from verifiers.v1.cli.eval.runner import run_eval
from verifiers.v1.configs.cli.eval import EvalConfig
from verifiers.v1.types import content_text

FIX = {"path": "six.py", "old": 'return s.encode("utf-8")', "new": 'return s.encode("latin-1")'}
SCRIPTS = {
    "fix": [("bash", {"command": "no-such-tool --version"}), ("str_replace", FIX), ("submit", {}), "Done."],
    "control": [("bash", {"command": "ls; seq 1 2000"}), ("submit", {}), "Done."],
}
MAX_OUTPUT_CHARS = 80
TOOLS = {  # mode -> the task's tools config (SWEToolsetConfig)
    "fix": lambda url: {"urls": [url]},
    "control": lambda url: {"token_var": "SWE_TEST_ENV_TOKEN", "max_output_chars": MAX_OUTPUT_CHARS},
}


def scripted_model(turns: list) -> tuple[ThreadingHTTPServer, list[dict]]:
    """An OpenAI-compatible /v1/chat/completions double: the reply to a request with n
    assistant messages is turn n, streamed as chat.completion.chunk events."""
    requests: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            requests.append(body)
            n = sum(m.get("role") == "assistant" for m in body["messages"])
            turn = turns[min(n, len(turns) - 1)]
            if isinstance(turn, str):
                delta, finish = {"role": "assistant", "content": turn}, "stop"
            else:
                call = {"index": 0, "id": f"call_{n}", "type": "function",
                        "function": {"name": turn[0], "arguments": json.dumps(turn[1])}}
                delta, finish = {"role": "assistant", "tool_calls": [call]}, "tool_calls"
            head = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": 0, "model": body["model"]}
            events = [{**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                      {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
                      {**head, "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1,
                                                        "total_tokens": 2}}]
            data = ("".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n").encode()
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, requests


def main() -> None:
    mode, url, tasks_path, instance_id, out_dir = sys.argv[1:6]
    model, requests = scripted_model(SCRIPTS[mode])
    config = EvalConfig(
        env={"taskset": {"id": "swe_openenv_taskset", "tasks_path": tasks_path, "instance_ids": [instance_id],
                         "task": {"tools": TOOLS[mode](url)}},
             "agent": {"harness": {"id": "null"}, "runtime": {"type": "subprocess"}, "max_turns": 8}},
        model="scripted-double",
        client={"type": "eval", "base_url": f"http://127.0.0.1:{model.server_port}/v1",
                "api_key_var": "SCRIPTED_MODEL_KEY"},
        num_rollouts=1, rich=None, push=False, output_dir=out_dir, run={"dir": mode},
    )
    episodes = asyncio.run(run_eval(config))
    model.shutdown()
    (trace,) = [t for episode in episodes for t in episode.traces]
    (saved,) = [json.loads(line) for line in (Path(out_dir) / mode / "traces.jsonl").read_text().splitlines()]
    print(json.dumps({
        "version": metadata.version("verifiers"),
        "reward": trace.reward,
        "rewards": {name: r.score if r else None for name, r in trace.rewards.items()},
        "metrics": dict(trace.metrics),
        "stop": trace.stop_condition,
        "errors": [str(e) for e in (trace.errors or [])],
        "state": trace.state.model_dump(mode="json", exclude={"artifacts"}),
        "saved_info": saved["traces"][0]["info"],
        "tool_messages": [{"name": m.name, "content": content_text(m.content)} for m in trace.tool_messages],
        "model_requests": len(requests),
        "offered_tools": {t["function"]["name"]: t["function"] for t in requests[0].get("tools", [])},
        "max_output_chars": MAX_OUTPUT_CHARS,
    }, default=str))


if __name__ == "__main__":
    main()
