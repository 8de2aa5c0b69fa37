"""The runtime's cold start does only what a start needs, and what it does instead of the stdlib's
heavier layers behaves as they did (docs/deploy.md, "Where a cold start's time goes").

* At start the runtime imports no module that only a rare request needs: not ``re`` (with
  ``enum``), ``subprocess``, ``shutil``, ``json``, ``base64``, ``signal``, ``hashlib``.
* Its JSON is ``json``'s own C half, set up as ``json.loads`` / ``json.dumps`` set it up; its
  base64 is ``binascii`` with ``b64decode(validate=True)``'s checks.
* The agent's shell starts by fork and exec as ``subprocess.Popen`` started it: a command holds
  no fd but its own three, no signal the runtime ignores stays ignored, a shell that cannot
  start is an OSError.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sandbox import runtime
from sandbox_support import Harness
from support.requirements import missing

RUNTIME = Path(runtime.__file__)


def _run_with_runtime(code: str) -> str:
    """``code`` in a fresh interpreter started as the backends start the runtime (-I -S), with the
    runtime's module loaded from its file as ``rt`` (not run: ``__name__`` is not ``__main__``)."""
    prelude = ("import importlib.util, sys\n"
               f"spec = importlib.util.spec_from_file_location('rt', {str(RUNTIME)!r})\n"
               "rt = importlib.util.module_from_spec(spec)\n"
               "spec.loader.exec_module(rt)\n")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", prelude + textwrap.dedent(code)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_start_imports_nothing_a_rare_request_needs():
    loaded = _run_with_runtime("""
        print(" ".join(sorted(m for m in ("re", "enum", "subprocess", "shutil", "json", "base64", "signal",
                                          "hashlib", "_hashlib", "threading", "selectors", "binascii") if m in sys.modules)))
    """).splitlines()[-1]
    assert loaded == "", loaded


@pytest.mark.parametrize("text", [
    '{"mode": "overlay", "limits": {"pids": 64}, "env": {"PATH": "/usr/bin:/bin"}}',
    ' \t{"a": [1, -2.5e3, true, false, null, "\\u00e9\\n\\ud83d\\ude00"]}\r\n',
    '{"nan": NaN, "inf": [Infinity, -Infinity], "big": 123456789012345678901234567890}',
    '[1, 2]', '"text"', '3', 'null',
])
def test_the_init_line_parses_as_json_loads_parses_it(text):
    got = runtime.parse_init(text.encode())
    assert json.dumps(got) == json.dumps(json.loads(text.encode()))


@pytest.mark.parametrize("text", [b"", b"\n", b"nope", b'{"a": 1} x', b'{"a": 1}{}', b'{"a": "\x01"}', b'{"a":',
                                  b"\xff\xfe", b"{'a': 1}", b'{"a": 1,}', b"[01]"])
def test_what_json_loads_refuses_the_init_line_refuses(text):
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        runtime.parse_init(text)


def test_the_generic_reply_encoder_says_what_json_dumps_says():
    c: list = []
    c.append(c)
    for value in ({"ok": True, "info": {"seccomp": True, "timing": {"main": 1.5e-7}}},
                  {"id": 3, "ok": False, "error": {"kind": "x", "message": "é \x00 \u2028 😀", "n": -0.0}},
                  {"nan": float("nan"), "inf": float("inf"), "ints": [0, -1, 2 ** 70], "nested": [[{}], []]}):
        assert runtime._encode(value) == json.dumps(value, separators=(",", ":"))
    with pytest.raises(TypeError):
        runtime._encode({"a": object()})
    with pytest.raises(ValueError):  # a cycle, as json.dumps finds it
        runtime._encode({"a": c})
    assert runtime._encode({"after": "errors"}) == '{"after":"errors"}'


@pytest.mark.parametrize("data", ["", "aGk=", "YQ==", "aGVsbG8gd29ybGQ=", "aGk", "YQ=", "a===", "aG k=", "aGk=\n",
                                  "=aGk", "aG=k", "aGk=aGk=", "a-_b", "é", "aGk=\x00", b"aGk=", b"a!", bytearray(b"YQ=="),
                                  12, None, ["a"]])
def test_base64_decodes_as_b64decode_validate_decodes(data):
    def outcome(fn):
        try:
            return fn(data)
        except (ValueError, TypeError) as e:  # what op_write and op_apply catch
            return "ValueError" if isinstance(e, ValueError) else "TypeError"
    assert outcome(runtime.b64decode) == outcome(lambda d: base64.b64decode(d, validate=True))


def test_base64_encodes_as_b64encode():
    for data in (b"", b"\x00", b"\xff\xfe\xfd", bytes(range(256)) * 3):
        assert runtime.b64encode(data) == base64.b64encode(data).decode("ascii")


def test_the_shell_process_answers_as_popen_did(tmp_path):
    out = _run_with_runtime(f"""
        import os
        rt.WORKSPACE = {str(tmp_path)!r}
        env = {{"PATH": "/usr/bin:/bin"}}
        def start(env):
            r, w = os.pipe()
            o_r, o_w = os.pipe()
            s_r, s_w = os.pipe()
            try:
                return rt.spawn_bash(env, r, s_w, o_w), w, o_r, s_r
            finally:
                for fd in (r, o_w, s_w):
                    os.close(fd)
        child, w, o_r, s_r = start(env)
        os.write(w, b"pwd >&62; ls /proc/self/fd >&62; exit 3\\n")
        print("code", child.wait(), child.poll(), child.returncode)
        print("out", os.read(o_r, 4096).split())
        child, w, o_r, s_r = start(env)
        child.kill()
        print("killed", child.wait())
        child.kill()  # reaped already: nothing is signalled
        child, w, o_r, s_r = start(env)
        os.write(w, b"exit 0\\n")
        while os.waitpid(-1, 0)[0] != child.pid:  # reaped elsewhere (the runtime's reap())
            pass
        print("reaped", child.poll())
        try:
            start({{"PATH": {str(tmp_path / "no-bash-here")!r}}})
        except OSError as e:
            print("refused", e.errno)
    """)
    lines = dict(line.split(" ", 1) for line in out.splitlines())
    assert lines["code"] == "3 3 3"
    pwd, *fds = eval(lines["out"])  # noqa: S307 - a list of bytes this test printed
    assert pwd == str(tmp_path).encode() and sorted(fds) == [b"0", b"1", b"2", b"3", b"62"], lines["out"]
    assert lines["killed"] == "-9" and lines["reaped"] == "0" and lines["refused"] == "2"


# (not Python: a Python process ignores SIGPIPE and SIGXFSZ itself)
PROBE = "echo FDS $(ls /proc/self/fd); grep -E '^Sig(Ign|Blk):' /proc/self/status"


async def test_a_command_holds_its_own_fds_and_default_signals(harness):
    async with harness.session() as sb:
        for res in (await sb.run(PROBE, timeout_s=60), await sb.run_isolated(PROBE, timeout_s=60, output_limit=1 << 16)):
            state = dict(line.split(None, 1) for line in res.output.splitlines())
            assert state["FDS"] == "0 1 2 3", res.output  # (3: the listing's own)
            # the runtime ignores nothing the shell would inherit (its Python ignores SIGPIPE and SIGXFSZ:
            # back to default), blocks nothing; what the server's own environment ignores passes on as
            # it did with Popen. glibc's reserved signals (32, 33: below SIGRTMIN, no program can use them)
            # are the environment's: under docker the engine's, which a test process need not share.
            ignored, ours = int(state["SigIgn:"], 16) & ~_GLIBC_RESERVED, _ignored_here()
            assert ignored & ~ours == 0, (res.output, hex(ours))
            assert ignored & (1 << (signal.SIGPIPE - 1) | 1 << (signal.SIGXFSZ - 1)) == 0, res.output
            assert int(state["SigBlk:"], 16) == 0, res.output


_GLIBC_RESERVED = sum(1 << (n - 1) for n in range(32, signal.SIGRTMIN))


def _ignored_here() -> int:
    """This (the server's) process's ignored signals, as /proc shows them."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1], 16) for line in f if line.startswith("SigIgn:"))


def _descendants(root: int) -> set[int]:
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    parents[int(name)] = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    found, todo = {root}, [root]
    while todo:
        pid = todo.pop()
        kids = [p for p, parent in parents.items() if parent == pid and p not in found]
        found.update(kids)
        todo += kids
    return found


async def test_a_bwrap_jail_and_all_it_starts_are_in_the_session_cgroup(secret_repo, cache_dir):
    """bwrap, the jail's pid 1, the runtime, the shell and a command's processes: each is in the
    session's cgroup (they join it while the jail starts, not before), and nothing else is."""
    async with Harness("bwrap", secret_repo, cache_dir).session() as sb:
        if sb._cgroup is None:  # fails in CI, skips elsewhere (tests/support/requirements.py)
            missing("cgroups", "this host gives the bwrap backend no session cgroup")
        job = asyncio.create_task(sb.run("sleep 3 & sleep 2; echo done", timeout_s=60))
        await asyncio.sleep(1.0)  # the command runs: bwrap, pid 1, the runtime, bash, two sleeps
        tree = _descendants(sb._proc.pid)
        for procs in sb._cgroup.procs_files:
            with open(procs) as f:
                members = {int(p) for p in f.read().split()}
            assert len(tree) >= 6 and members == tree, (procs, sorted(members), sorted(tree))
        assert (await job).ok


def test_a_sweep_of_stale_cgroups_leaves_a_live_process_s_empty_one_alone():
    """A process's first session sweeps the empty session cgroups dead servers left. Another live process's
    new session cgroup is empty too while its jail starts (it joins during the start): its name carries the
    pid of the process that made it, and the sweep leaves a live process's alone, so it never pulls one from
    under a starting jail (the full suite saw "the jail cannot join its cgroup: No such file or directory"
    when it took every empty one). A dead process's is swept (test_isolation: a killed server's)."""
    import uuid

    from sandbox.cgroup import SessionCgroup

    live = SessionCgroup.create(SessionCgroup.name(uuid.uuid4().hex[:12]), pids=64, memory_mb=64)
    if live is None:  # fails in CI, skips elsewhere (tests/support/requirements.py)
        missing("cgroups", "this host lets the bwrap backend make no session cgroup")
    dead = SessionCgroup.create(f"s-{_ended_pid()}-{uuid.uuid4().hex[:12]}", pids=64, memory_mb=64)
    try:
        SessionCgroup.sweep_stale()  # as another process's first session does
        assert live.dirs and all(d.is_dir() for d in live.dirs)
        assert not any(d.exists() for d in dead.dirs)
    finally:
        live.remove()
        dead.remove()


def _ended_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid
