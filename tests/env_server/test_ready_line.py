"""`env-server serve` says when it is ready: one line, printed once the sockets listen, with the
address it really listens on (`--port 0`: the port the system chose), the task count and the mix
of sources of the task file, the backend, whether auth is on, and where the data goes.

One real run of the console script (auth off); the token cases through `ready_line` itself."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
from env_support import requires_sandbox

from env_server.cli import ready_line
from env_server.config import ServerConfig
from verifier.task import load_tasks

READY = re.compile(r"^env-server ready: http://127\.0\.0\.1:(\d+) ")


def _mixed_tasks(demo_tasks_path: Path, out: Path) -> Path:
    """The demo task three times: itself (synthetic-mutation) and two copies labelled release-diff."""
    base = json.loads(demo_tasks_path.read_text(encoding="utf-8").splitlines()[0])
    for key in ("repo_path", "python_env"):  # relative to the task file: made absolute for the copy
        if base.get(key):
            base[key] = str((demo_tasks_path.parent / base[key]).resolve())
    rows = [base, *({**base, "instance_id": f"{base['instance_id']}-copy{i}", "source": "release-diff"}
                    for i in (1, 2))]
    out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return out


def _serve_command() -> list[str]:
    script = Path(sys.executable).with_name("env-server")  # the console script, as a user runs it
    return [str(script)] if script.exists() else [sys.executable, "-m", "env_server.cli"]


@requires_sandbox
def test_serve_prints_one_ready_line_with_what_it_serves(demo_tasks_path, tmp_path):
    tasks, data = _mixed_tasks(demo_tasks_path, tmp_path / "mixed.jsonl"), tmp_path / "env-data"
    env = {k: v for k, v in os.environ.items() if k not in ("ENV_SERVER_TOKEN", "ENV_SERVER_TOKENS_FILE")}
    argv = [*_serve_command(), "serve", "--port", "0", "--tasks", str(tasks), "--backend", "bwrap",
            "--data-dir", str(data), "--log-level", "warning"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    lines: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(target=lambda: ([lines.put(x) for x in proc.stdout], lines.put(None)), daemon=True)
    reader.start()
    seen: list[str] = []
    try:
        while True:
            line = lines.get(timeout=90)
            assert line is not None, f"env-server exited {proc.wait()} before it was ready:\n{''.join(seen)}"
            seen.append(line)
            if READY.match(line):
                break
        port = int(READY.match(line).group(1))
        assert port != 0 and httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code == 200
        fields = line.rstrip("\n").split(" | ")
        assert fields == [
            f"env-server ready: http://127.0.0.1:{port} (/ws /mux /mcp /health)",
            f"3 tasks (2 release-diff, 1 synthetic-mutation) from {tasks}",
            "backend bwrap",
            "auth off (open to anyone who can connect)",
            f"traces in {data / 'traces'}",
        ], line
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        reader.join(10)
    rest = []
    while not lines.empty() and (x := lines.get_nowait()) is not None:
        rest.append(x)
    assert sum(bool(READY.match(x)) for x in [*seen, *rest]) == 1, seen + rest


def test_ready_line_says_auth_is_on_without_the_tokens(demo_tasks_path, tmp_path):
    tasks = load_tasks(demo_tasks_path)
    secret, alice, ops = "s3cret-" + "a" * 24, "alice-" + "b" * 24, "ops-" + "c" * 24
    cases = {
        "no token": ({}, "auth off (open to anyone who can connect)"),
        "one token": ({"auth_token": secret}, "auth on"),
        "client tokens": ({"client_tokens": {"alice": alice}}, "auth on"),
        "operator tokens": ({"operator_tokens": {"ops": ops}}, "auth on"),
    }
    for name, (tokens, auth) in cases.items():
        config = ServerConfig(tasks_path=demo_tasks_path, data_dir=tmp_path / "d", host="0.0.0.0",
                              sandbox={"backend": "docker"}, **tokens)
        line = ready_line(config, tasks, 8123)
        assert line.split(" | ") == [
            "env-server ready: http://0.0.0.0:8123 (/ws /mux /mcp /health)",
            f"1 task (1 synthetic-mutation) from {demo_tasks_path}",
            "backend docker",
            auth,
            f"traces in {tmp_path / 'd' / 'traces'}",
        ], name
        assert not any(t in line for t in (secret, alice, ops)), name
    unlabelled = [tasks[0].model_copy(update={"source": None})] * 2
    assert "2 tasks (2 unlabelled)" in ready_line(ServerConfig(tasks_path=demo_tasks_path), unlabelled, 1)
