"""The runtime's JSON lines: the fast reply encoder says exactly what json.dumps says."""

from __future__ import annotations

import json

import pytest

from sandbox import runtime


def run_reply(output: str, code, status="ok", truncated=False, changed=None, duration=0.000123, req_id=7):
    return {"id": req_id, "ok": True, "result": {
        "output": output, "exit_code": code, "status": status, "truncated": truncated,
        "output_bytes": len(output.encode()), "duration_s": duration, "files_changed": changed}}


@pytest.mark.parametrize("reply", [
    run_reply("", 0),
    run_reply("hello\n", 0, changed=True),
    run_reply('quote " backslash \\ tab \t nul \x00 bell \x07 \u2028 \ufffd é 漢字 🐍', 1, "nonzero_exit", changed=False),
    run_reply("x" * 5000, None, "timeout", truncated=True, duration=60.0),
    run_reply("late", -9, "shell_exited", duration=1e-07),
    run_reply("", 0, req_id=2**40),
])
def test_fast_run_reply_is_json_dumps(reply):
    line = runtime.encode_reply(reply)
    assert line.endswith(b"\n") and b"\n" not in line[:-1]
    assert json.loads(line) == json.loads(json.dumps(reply)) == reply


@pytest.mark.parametrize("reply", [
    {"id": 3, "ok": True, "result": {"data": "aGk="}},  # read
    {"id": 4, "ok": False, "error": {"kind": "bad_path", "message": "é", "reason": "outside_workspace"}},
    {"id": None, "ok": False, "error": {"kind": "runtime_error", "message": "x"}},
    {"ok": True, "info": {"seccomp": True}},
    run_reply("odd id", 0, req_id="7"),  # not the host's int ids: the generic encoder answers
])
def test_other_replies_use_the_generic_encoder(reply):
    assert json.loads(runtime.encode_reply(reply)) == reply


def test_requests_parse_or_fail_as_value_errors():
    assert runtime.parse_request(b'{"id":1,"op":"run","command":"ls \\u00e9"}\n') == {
        "id": 1, "op": "run", "command": "ls é"}
    for bad in (b"", b"\n", b"nope\n", b"[1,2]\n", b"\xff\xfe\n", b'{"id":\n'):
        with pytest.raises(ValueError):
            runtime.parse_request(bad)
