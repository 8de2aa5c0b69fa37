"""Builders shared by the replay tests: env-shaped states and teacher configs."""

from __future__ import annotations

import json
from pathlib import Path

from support.git_repos import commit_files

from trainer_client.pair_records import ToolCall
from trainer_client.replay import FrozenState, RetryConfig, TeacherConfig, TeachersFile

TOOLS = [
    {"type": "function", "function": {
        "name": "bash", "description": "Run a shell command in /workspace.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                       "required": ["command"]}}},
    {"type": "function", "function": {
        "name": "view", "description": "View a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"},
                                                        "view_range": {"type": "array"}},
                       "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "submit", "description": "Submit the workspace diff.",
        "parameters": {"type": "object", "properties": {}}}},
]


def state(t: int, student: ToolCall | None, episode: str = "ep-1", error_kind: str | None = None,
          entropy: float | None = None, extra_user: str = "") -> FrozenState:
    """A state(t) record shaped like the env server's (docs/contracts.md)."""
    messages = [
        {"role": "system", "content": "You are a software engineer. Use the tools."},
        {"role": "user", "content": f"Fix the failing test in tests/test_calc.py. {extra_user}".strip()},
    ]
    for i in range(t):
        messages.append({"role": "assistant", "content": None, "tool_calls": [{
            "id": f"c{i}", "type": "function",
            "function": {"name": "bash", "arguments": f'{{"command": "echo step {i} ünïcode ✓"}}'}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "name": "bash", "content": f"step {i}\n"})
    meta = {"episode_id": episode, "step": t, "instance_id": "calc-1"}
    if error_kind:
        meta.update(error_kind=error_kind, error_source="agent", hint_template_key=error_kind)
    record = {"episode_id": episode, "instance_id": "calc-1", "t": t, "messages": messages,
              "tools": TOOLS, "observation": {"output": "", "done": False, "reward": None, "metadata": meta},
              "diff": "", "next_action": student.model_dump() if student else None}
    if entropy is not None:
        record["metadata"] = {"student_entropy": entropy}
    return FrozenState.model_validate(record)


def bash(cmd: str) -> ToolCall:
    return ToolCall(tool_name="bash", arguments={"command": cmd})


def teachers(base_url: str, names=("t-a", "t-b", "t-c"), *, price_in=1e-6, price_out=2e-6,
             max_concurrency=4, timeout=5.0, max_tokens=256, api_key_env=None,
             retry: RetryConfig | None = None) -> TeachersFile:
    """Teachers whose model name equals their name, all served by one fake server."""
    return TeachersFile(
        teachers=[TeacherConfig(name=n, model=n, base_url=base_url, api_key_env=api_key_env,
                                price_in=price_in, price_out=price_out, max_concurrency=max_concurrency,
                                timeout=timeout, max_tokens=max_tokens) for n in names],
        retry=retry or RetryConfig(max_retries=3, backoff_base_s=0.01, backoff_max_s=0.05),
    )


def make_task(root: Path, instance_id: str = "calc-1") -> Path:
    """A one-task task file: calc.py's add() subtracts (a git repository at its base commit)."""
    commit = commit_files(root / "repo", {
        "calc.py": "def add(a, b):\n    return a - b\n",
        "test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"})
    task = {"instance_id": instance_id, "problem_statement": "add() subtracts instead of adding; fix it.",
            "base_commit": commit, "repo_path": "repo", "FAIL_TO_PASS": ["test_calc.py::test_add"]}
    (root / "tasks.jsonl").write_text(json.dumps(task) + "\n")
    return root / "tasks.jsonl"
