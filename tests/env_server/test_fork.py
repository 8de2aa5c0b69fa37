"""Episode forks (docs/rfcs/009-episode-fork.md): `reset` with `fork_of` + `t` on the real server,
the real bwrap sandbox and the demo task, over /ws and /mux."""

from __future__ import annotations

import asyncio
import base64
import json

import httpx
import websockets
from env_support import call, requires_sandbox, run, tool

from env_server.episode import EpisodeConfig

pytestmark = requires_sandbox

FIX = {"old": 'return s.encode("utf-8")', "new": 'return s.encode("latin-1")'}
UNFIX = {"old": FIX["new"], "new": FIX["old"]}
# Untracked files of every kind a text diff handles badly or not at all: bytes that are not
# UTF-8 (a NUL: git calls it binary; \351: text that is not UTF-8), an executable bit, a
# symlink, an empty file, a new folder; and a tracked file deleted.
MAKE_FILES = ("printf 'a\\377\\000b' > blob.bin && printf 'caf\\351\\n' > latin.txt && "
              "printf '#!/bin/sh\\necho hi\\n' > tool.sh && chmod +x tool.sh && ln -s six.py link.py && "
              ": > empty.txt && mkdir -p notes && echo untracked > notes/todo.txt && rm LICENSE")
# What the files hold, as the fork's shell reports them (also forces a fresh diff: touch).
PROBE = ("touch six.py; for f in blob.bin latin.txt tool.sh link.py empty.txt notes/todo.txt LICENSE; do "
         "if [ -e \"$f\" ] || [ -L \"$f\" ]; then echo \"$f: yes\"; else echo \"$f: no\"; fi; done; "
         "for f in blob.bin latin.txt; do od -An -tx1 $f 2>/dev/null | tr -s ' '; done; "
         "stat -c '%A' tool.sh 2>/dev/null; "
         "readlink link.py 2>/dev/null; cat notes/todo.txt 2>/dev/null; grep -c 'encode(\"latin-1\")' six.py")
WITH_FILES = {"blob.bin": "yes", "latin.txt": "yes", "tool.sh": "yes", "link.py": "yes", "empty.txt": "yes",
              "notes/todo.txt": "yes", "LICENSE": "no"}
WITHOUT_FILES = {name: ("yes" if name == "LICENSE" else "no") for name in WITH_FILES}


def _files(output: str) -> dict[str, str]:
    return dict(line.split(": ") for line in output.splitlines() if line.endswith((": yes", ": no")))


async def _state(ws, t: int | None = None) -> dict:
    r = await call(ws, "state", None if t is None else {"t": t})
    assert r["type"] == "state", r
    return r["data"]


async def _step(ws, action: dict) -> dict:
    r = await call(ws, "step", action)
    assert r["type"] == "observation", r
    return r["data"]


async def _trace(srv, episode_id: str) -> bytes:
    async with httpx.AsyncClient(base_url=srv.url, timeout=120) as http:
        resp = await http.get(f"/episodes/{episode_id}/trace")
        assert resp.status_code == 200, resp.text
        return resp.content


def _records(raw: bytes) -> list[dict]:
    return [json.loads(line) for line in raw.splitlines()]


async def _record_original(ws, demo_task) -> list[dict]:
    """The recorded episode "orig": view, the fix, files of every kind, the fix undone, submit (reward 0)."""
    r = await call(ws, "reset", {"instance_id": demo_task.instance_id, "episode_id": "orig"})
    assert r["type"] == "observation", r
    await _step(ws, tool("view", path="six.py", start_line=643, end_line=645))
    assert "Edited six.py" in (await _step(ws, tool("str_replace", path="six.py", **FIX)))["observation"]["output"]
    await _step(ws, tool("bash", command=MAKE_FILES))
    assert "Edited six.py" in (await _step(ws, tool("str_replace", path="six.py", **UNFIX)))["observation"]["output"]
    done = await _step(ws, tool("submit"))
    assert done["done"] is True and done["reward"] == 0.0, done
    return [await _state(ws, t) for t in range(6)]


def test_fork_restores_the_workspace_and_the_context_at_step_t(make_server, demo_task):
    async def main(srv):
        async with websockets.connect(srv.ws_url + "/ws") as ws:
            orig = await _record_original(ws, demo_task)
        trace_before = await _trace(srv, "orig")
        steps = _records(trace_before)[1:]
        # the text diff cannot carry blob.bin (binary) nor latin.txt (not UTF-8): the exact patch is kept
        assert "Binary files /dev/null and b/blob.bin differ" in orig[3]["diff"]
        assert "exact_patch" in steps[2] and "exact_patch" in steps[3] and "exact_patch" not in steps[1]

        for t in (0, 2, 3, 4, 5):  # 5: after the original was graded
            async with websockets.connect(srv.ws_url + "/ws") as ws:
                r = await call(ws, "reset", {"fork_of": "orig", "t": t, "episode_id": f"fork-{t}"})
                assert r["type"] == "observation", r
                meta = r["data"]["observation"]["metadata"]
                assert (meta["episode_id"], meta["fork_of"], meta["fork_t"]) == (f"fork-{t}", "orig", t)
                assert meta["step"] == 0
                assert r["data"]["done"] is False and "six.b()" in r["data"]["observation"]["issue"]
                assert await _state(ws) == {"episode_id": f"fork-{t}", "step_count": 0, "instance_id":
                                            demo_task.instance_id, "done": False, "reward": None}
                # state(0) of the fork: the original's workspace diff and context at t, byte for byte
                zero = await _state(ws, 0)
                assert zero["diff"] == orig[t]["diff"], t
                assert zero["messages"] == orig[t]["messages"] and zero["tools"] == orig[t]["tools"], t
                # the workspace itself: the files, their bytes, modes and links, as they were after step t
                probe = await _step(ws, tool("bash", command=PROBE))
                out = probe["observation"]["output"]
                assert _files(out) == (WITH_FILES if t >= 3 else WITHOUT_FILES), (t, out)
                if t >= 3:
                    assert " 61 ff 00 62\n 63 61 66 e9 0a" in out and "-rwxr-xr-x" in out, out
                    assert "six.py\nuntracked\n" in out, out
                assert out.rstrip().endswith("1" if t in (2, 3) else "0"), (t, out)
                # a fresh diff in the fork (touch forced one) is the recorded one
                fresh = _records(await _trace(srv, f"fork-{t}"))[1]
                assert "diff_error" not in fresh and fresh["diff"] is None, fresh
                # the fork's own steps continue the original's context: call ids go on from t
                one = await _state(ws, 1)
                n = len(orig[t]["messages"])
                assert one["messages"][:n] == orig[t]["messages"]
                assert [m["role"] for m in one["messages"][n:]] == ["assistant", "tool"]
                assert one["messages"][n]["tool_calls"][0]["id"] == f"call_{t + 1}"
                assert one["messages"][n + 1]["tool_call_id"] == f"call_{t + 1}"
                if t == 2:  # replaying the original's next step gives the original's next diff
                    await _step(ws, tool("bash", command=MAKE_FILES))
                    assert (await _state(ws, 2))["diff"] == orig[3]["diff"]
                    # graded on its own workspace: the fix is in, so 1.0 (the original got 0.0)
                    done = await _step(ws, tool("submit"))
                    assert done["done"] is True and done["reward"] == 1.0, done
                    assert done["metadata"]["resolved"] is True
            head = _records(await _trace(srv, f"fork-{t}"))[0]
            assert (head["kind"], head["fork_of"], head["t"], head["diff"]) == ("reset", "orig", t, orig[t]["diff"])
            assert [h["t"] for h in head["history"]] == list(range(1, t + 1))
        # forking reads the original's trace and never writes it
        assert await _trace(srv, "orig") == trace_before
        async with httpx.AsyncClient(base_url=srv.url, timeout=120) as http:
            assert "episode-fork" in (await http.get("/metadata")).json()["extensions"]
    with make_server() as srv:
        run(main(srv))


def test_forks_grade_independently_and_fork_again(make_server, demo_task):
    async def main(srv):
        async with websockets.connect(srv.ws_url + "/ws") as ws:
            await call(ws, "reset", {"instance_id": demo_task.instance_id, "episode_id": "o"})
            await _step(ws, tool("view", path="six.py", start_line=643, end_line=645))
            await _step(ws, tool("str_replace", path="six.py", **FIX))
            assert (await _step(ws, tool("submit")))["reward"] == 1.0
            o = [await _state(ws, t) for t in range(4)]
            # the original resolved the issue; its fork before the fix did not
            await call(ws, "reset", {"fork_of": "o", "t": 1, "episode_id": "o-1"})
            assert (await _step(ws, tool("submit")))["reward"] == 0.0
            # a fork with the fix that undoes it: 0.0; its own fork before the undo: 1.0
            await call(ws, "reset", {"fork_of": "o", "t": 2, "episode_id": "o-2"})
            await _step(ws, tool("bash", command="echo extra > extra.txt"))
            await _step(ws, tool("str_replace", path="six.py", **UNFIX))
            assert (await _step(ws, tool("submit")))["reward"] == 0.0
            f = [await _state(ws, t) for t in range(4)]
            assert f[0]["messages"] == o[2]["messages"] and f[0]["diff"] == o[2]["diff"]
            r = await call(ws, "reset", {"fork_of": "o-2", "t": 1, "episode_id": "o-2-1"})
            assert r["data"]["observation"]["metadata"]["fork_of"] == "o-2"
            ff = await _state(ws, 0)
            assert ff["messages"] == f[1]["messages"] and ff["diff"] == f[1]["diff"]
            assert "extra.txt" in ff["diff"] and 'encode("latin-1")' in ff["diff"]
            out = (await _step(ws, tool("bash", command="cat extra.txt")))["observation"]["output"]
            assert out.strip() == "extra"
            ids = [c["id"] for m in (await _state(ws, 1))["messages"] for c in (m.get("tool_calls") or [])]
            assert ids == ["call_1", "call_2", "call_3", "call_4"]  # o's two steps, o-2's first, its own
            assert (await _step(ws, tool("submit")))["reward"] == 1.0
        head = _records(await _trace(srv, "o-2-1"))[0]
        assert (head["fork_of"], head["t"], [h["t"] for h in head["history"]]) == ("o-2", 1, [1, 2, 3])
        # HTTP MCP sessions fork too (openenv/session/create takes the reset params)
        async with httpx.AsyncClient(base_url=srv.url, timeout=120) as http:
            async def rpc(method: str, params: dict) -> dict:
                return (await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": method,
                                                      "params": params})).json()

            made = (await rpc("openenv/session/create", {"fork_of": "o", "t": 2, "episode_id": "o-mcp"}))["result"]
            assert made["observation"]["metadata"]["fork_of"] == "o"
            graded = (await rpc("tools/call", {"session_id": made["session_id"], "name": "submit"}))["result"]
            assert graded["structuredContent"]["reward"] == 1.0
            await rpc("openenv/session/close", {"session_id": made["session_id"]})
            err = (await rpc("openenv/session/create", {"fork_of": "nope", "t": 0}))["error"]
            assert err["code"] == -32602 and err["data"]["code"] == "EPISODE_NOT_FOUND", err
    with make_server() as srv:
        run(main(srv))


def test_bad_forks_are_errors_and_break_nothing(make_server, demo_task):
    async def main(srv):
        async with websockets.connect(srv.ws_url + "/ws") as ws:
            await call(ws, "reset", {"instance_id": demo_task.instance_id, "episode_id": "src"})
            await _step(ws, tool("str_replace", path="six.py", **FIX))
            await _step(ws, tool("bash", command="echo new > new.txt"))
            await _step(ws, tool("view", path="new.txt"))
        store = srv.service.store.dir
        src = _records((store / "src.jsonl").read_bytes())

        def write(name: str, records: list[dict]) -> None:
            records[0]["episode_id"] = name
            (store / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))

        # the diff after step 2 could not be read: unknown from there on (never a wrong workspace)
        broken = json.loads(json.dumps(src))
        broken[2].update(diff=None, diff_error="SandboxDied: gone")
        write("unreadable", broken)
        legacy = json.loads(json.dumps(src))
        del legacy[0]["trace_diffs"]
        write("legacy", legacy)
        garbled = json.loads(json.dumps(src))
        garbled[1]["diff"] = garbled[1]["diff"].replace('-        return s.encode("utf-8")', "-        nope")
        write("garbled", garbled)
        # an exact patch that applies but is not the recorded diff: the check after restoring catches it
        mismatch = json.loads(json.dumps(src))
        other = mismatch[2]["diff"].replace("+new", "+old")
        assert other != mismatch[2]["diff"]
        mismatch[2]["exact_patch"] = base64.b64encode(other.encode()).decode()
        write("mismatch", mismatch)

        async with websockets.connect(srv.ws_url + "/ws") as other, websockets.connect(srv.ws_url + "/ws") as ws:
            await call(other, "reset", {"index": 0, "episode_id": "bystander"})
            await _step(other, tool("bash", command="echo one"))
            cases = [
                ({"fork_of": "no-such-episode", "t": 0}, "EPISODE_NOT_FOUND"),
                ({"fork_of": "src", "t": 4}, "STEP_OUT_OF_RANGE"),
                ({"fork_of": "src", "t": -1}, "VALIDATION_ERROR"),
                ({"fork_of": "src", "t": "1"}, "VALIDATION_ERROR"),
                ({"fork_of": "src"}, "VALIDATION_ERROR"),
                ({"t": 1}, "VALIDATION_ERROR"),
                ({"fork_of": "../traces/src", "t": 0}, "VALIDATION_ERROR"),
                ({"fork_of": "src", "t": 1, "episode_id": "src"}, "VALIDATION_ERROR"),  # ids are never reused
                ({"fork_of": "src", "t": 1, "instance_id": "other__task-1"}, "VALIDATION_ERROR"),
                ({"fork_of": "src", "t": 1, "context": {"prompt": [{"role": "system", "content": "x"}]}},
                 "VALIDATION_ERROR"),
                ({"fork_of": "unreadable", "t": 2}, "FORK_UNAVAILABLE"),
                ({"fork_of": "unreadable", "t": 3}, "FORK_UNAVAILABLE"),
                ({"fork_of": "legacy", "t": 1}, "FORK_UNAVAILABLE"),
                ({"fork_of": "garbled", "t": 1}, "FORK_UNAVAILABLE"),
                ({"fork_of": "mismatch", "t": 2}, "FORK_UNAVAILABLE"),
            ]
            for data, code in cases:
                r = await call(ws, "reset", data)
                assert r["type"] == "error" and r["data"]["code"] == code, (data, r)
                assert r["data"]["message"]
            r = await call(ws, "reset", {"fork_of": "src", "t": 9})
            assert (r["data"]["fork_of"], r["data"]["t"]) == ("src", 9) and "0..3" in r["data"]["message"]
            r = await call(ws, "reset", {"fork_of": "unreadable", "t": 2})
            assert "could not be read after step 2" in r["data"]["message"], r
            r = await call(ws, "reset", {"fork_of": "mismatch", "t": 2})
            assert "differs from the recorded one" in r["data"]["message"], r
            r = await call(ws, "reset", {"fork_of": "garbled", "t": 1})
            assert "does not apply" in r["data"]["message"], r
            # before the unreadable step the fork is fine; the session survived every error
            r = await call(ws, "reset", {"fork_of": "unreadable", "t": 1, "episode_id": "u-1"})
            assert r["type"] == "observation", r
            assert (await _state(ws, 0))["diff"] == broken[1]["diff"]
            # the other session never noticed
            assert (await _step(other, tool("bash", command="echo two > two.txt")))["done"] is False
            assert (await _state(other))["step_count"] == 2
            # and a live episode can be forked: from its steps recorded so far
            r = await call(ws, "reset", {"fork_of": "bystander", "t": 2, "episode_id": "b-2"})
            assert r["type"] == "observation", r
            assert "two.txt" in (await _state(ws, 0))["diff"]
            r = await call(ws, "reset", {"fork_of": "bystander", "t": 3})
            assert r["data"]["code"] == "STEP_OUT_OF_RANGE", r
        # the failed forks wrote no trace
        assert sorted(p.stem for p in store.glob("*.jsonl")) == ["b-2", "bystander", "garbled", "legacy", "mismatch",
                                                                 "src", "u-1", "unreadable"]
    with make_server() as srv:
        run(main(srv))


def test_mux_forks_keep_the_clients_context_and_turns(make_server, demo_task):
    context = {"prompt": [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Issue:\n"}],
               "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}],
               "max_output_chars": 200}

    def turn(k: int, calls: list[dict], first: bool) -> dict:
        if not first:
            return {"turn": k}
        return {"turn": k, "assistant": {"content": f"thinking {k}", "tool_calls": [
            {"type": "function", "function": {"name": c["tool_name"], "arguments": c["arguments"]}} for c in calls]}}

    async def main(srv):
        async with websockets.connect(srv.ws_url + "/mux") as ws:
            async def req(rid: str, sid: str, type_: str, data: dict | None = None) -> dict:
                await ws.send(json.dumps({"request_id": rid, "session_id": sid, "type": type_, "data": data or {}}))
                frame = json.loads(await asyncio.wait_for(ws.recv(), 60))
                assert (frame["request_id"], frame["session_id"]) == (rid, sid), frame
                return frame

            r = await req("r0", "a", "reset", {"instance_id": demo_task.instance_id, "episode_id": "m",
                                               "context": context})
            assert r["type"] == "observation", r
            view = tool("view", path="six.py", start_line=643, end_line=645)
            fix = tool("str_replace", path="six.py", **FIX)
            first_turn = [(view, turn(0, [view, fix], True)), (fix, turn(0, [view, fix], False))]
            for i, (action, meta) in enumerate(first_turn):
                r = await req(f"s{i}", "a", "step", {**action, "metadata": meta})
                assert r["type"] == "observation", r
            bash = tool("bash", command="echo hi > hi.txt")
            await req("s2", "a", "step", {**bash, "metadata": turn(1, [bash], True)})
            orig = [(await req(f"t{t}", "a", "state", {"t": t}))["data"] for t in range(4)]
            assert orig[3]["messages"][0] == {"role": "system", "content": "You fix bugs.", "tool_calls": None,
                                              "name": None, "tool_call_id": None}

            for t in (1, 3):  # t=1 cuts turn 0 between its two calls
                r = await req("f", f"fork{t}", "reset", {"fork_of": "m", "t": t})
                assert r["type"] == "observation" and r["data"]["metadata"]["fork_t"] == t, r
                zero = (await req("z", f"fork{t}", "state", {"t": 0}))["data"]
                assert zero["messages"] == orig[t]["messages"] and zero["tools"] == orig[t]["tools"]
                assert zero["diff"] == orig[t]["diff"]
                # the fork's client counts its turns from 0 again: still a new assistant message
                cat = tool("bash", command="cat hi.txt")
                await req("c", f"fork{t}", "step", {**cat, "metadata": turn(0, [cat], True)})
                one = (await req("o", f"fork{t}", "state", {"t": 1}))["data"]
                n = len(orig[t]["messages"])
                assert one["messages"][:n] == orig[t]["messages"]
                assert [m["role"] for m in one["messages"][n:]] == ["assistant", "tool"]
                assert one["messages"][n]["content"] == "thinking 0"
                assert ("hi" if t == 3 else "No such file") in one["messages"][n + 1]["content"], one
                assert one["messages"][n + 1]["tool_call_id"] == f"call_{t + 1}"
            # the same context sent along is accepted; another one is refused and leaves the id free
            r = await req("f", "same", "reset", {"fork_of": "m", "t": 2, "context": context})
            assert r["type"] == "observation", r
            other = {**context, "max_output_chars": 5}
            r = await req("f", "other", "reset", {"fork_of": "m", "t": 2, "context": other})
            assert r["type"] == "error" and r["data"]["code"] == "VALIDATION_ERROR", r
            r = await req("g", "other", "reset", {"fork_of": "nope", "t": 0})
            assert r["type"] == "error" and r["data"]["code"] == "EPISODE_NOT_FOUND", r
            r = await req("h", "other", "reset", {"fork_of": "m", "t": 0})
            assert r["type"] == "observation", r
            assert (await req("i", "other", "state", {"t": 0}))["data"]["messages"] == orig[0]["messages"]
    with make_server() as srv:
        run(main(srv))


def test_forks_refuse_steps_whose_workspace_is_not_known_exactly(make_server, demo_task):
    """--trace-diffs edits takes no diff after bash, and an exact patch over the limit is not kept:
    the workspace is unknown from there until a diff is recorded again."""
    async def main(srv):
        async with websockets.connect(srv.ws_url + "/ws") as ws:
            await call(ws, "reset", {"instance_id": demo_task.instance_id, "episode_id": "e"})
            await _step(ws, tool("bash", command="echo new > new.txt"))  # 1: no diff taken
            await _step(ws, tool("view", path="new.txt"))  # 2
            await _step(ws, tool("str_replace", path="six.py", **FIX))  # 3: diff recorded
            await _step(ws, tool("create", path="blob.bin", content="a\x00b" * 40))  # 4: binary, patch too big
            await _step(ws, tool("bash", command="rm blob.bin"))  # 5: no diff taken
            await _step(ws, tool("str_replace", path="six.py", **UNFIX))  # 6: diff recorded
            orig = [await _state(ws, t) for t in range(7)]
            steps = _records(await _trace(srv, "e"))[1:]
            assert steps[0]["diff_skipped"] is True and "exact_patch_error" in steps[3], steps[3]
            for t, why in ((1, "--trace-diffs edits"), (2, "--trace-diffs edits"), (4, "exact patch was not kept"),
                           (5, "--trace-diffs edits")):
                r = await call(ws, "reset", {"fork_of": "e", "t": t})
                assert r["type"] == "error" and r["data"]["code"] == "FORK_UNAVAILABLE", r
                assert why in r["data"]["message"], r
            for t in (0, 3, 6):
                r = await call(ws, "reset", {"fork_of": "e", "t": t, "episode_id": f"e-{t}"})
                assert r["type"] == "observation", r
                assert (await _state(ws, 0))["diff"] == orig[t]["diff"]
                out = (await _step(ws, tool("bash", command="cat new.txt 2>&1; ls blob.bin 2>&1")))["observation"]
                assert ("new" if t >= 3 else "No such file") in out["output"], out
                assert "blob.bin: No such file" in out["output"] or "cannot access" in out["output"], out
    with make_server(episode=EpisodeConfig(trace_diffs="edits", exact_patch_max_bytes=64)) as srv:
        run(main(srv))


def test_a_fork_continues_the_step_budget(make_server, demo_task):
    async def main(srv):
        async with websockets.connect(srv.ws_url + "/ws") as ws:
            await call(ws, "reset", {"instance_id": demo_task.instance_id, "episode_id": "b"})
            await _step(ws, tool("str_replace", path="six.py", **FIX))
            await _step(ws, tool("view", path="six.py", start_line=643, end_line=645))
            await call(ws, "reset", {"fork_of": "b", "t": 2, "episode_id": "b-2"})
            done = await _step(ws, tool("bash", command="echo hi"))  # step 3 of a budget of 3
            assert done["done"] is True and done["reward"] == 1.0, done
            assert "step budget of 3 used up" in done["observation"]["output"]
            assert (await _state(ws))["step_count"] == 1
            await call(ws, "reset", {"fork_of": "b", "t": 0, "episode_id": "b-0"})
            for _ in range(2):
                assert (await _step(ws, tool("bash", command="echo hi")))["done"] is False
    with make_server(episode=EpisodeConfig(max_steps=3)) as srv:
        run(main(srv))
