"""Replayed-pair records in the replay engineer's JSONL format (test data, not a double)."""

from __future__ import annotations

import json
from pathlib import Path

TOOLS = [
    {"type": "function", "function": {"name": "bash", "description": "Run a shell command.", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}},
    {"type": "function", "function": {"name": "view", "description": "Show a file.", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
]


def pair_records(n: int = 4) -> list[dict]:
    out = []
    for i in range(n):
        messages = [
            {"role": "system", "content": "You are a careful software engineer."},
            {"role": "user", "content": f"Tests fail in module_{i}.py; fix the bug."},
            {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": "ls"})}}]},
            {"role": "tool", "content": f"module_{i}.py\ntests/"},
        ]
        out.append(
            {
                "state_id": f"ep{i}:2",
                "messages": messages,
                "tools": TOOLS,
                "chosen": {"tool_name": "view", "arguments": {"path": f"module_{i}.py"}},
                "rejected": {"tool_name": "bash", "arguments": {"command": "rm -rf tests"}},
                "n_teachers_agreeing": 2,
                "provenance": {"episode_id": f"ep{i}", "t": 2, "teachers": ["a", "b", "c"], "agreeing": ["a", "b"]},
            }
        )
    return out


def write_pairs(path: Path, n: int = 4) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in pair_records(n)))
    return path
