"""env_client.processes with real processes (no mocks): free ports, readiness that fails fast
with the log's tail, and stopping a whole process group."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from env_client.processes import (ManagedProcess, StartupError, free_port, log_tail, start_process,
                                  stop_process_group, wait_healthy)

# A server on 127.0.0.1:PORT that answers GET /health with 200 (and anything else with 404).
HEALTH_SERVER = textwrap.dedent("""
    import http.server, sys
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
        def log_message(self, *a):
            pass
    print("serving", flush=True)
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
""")


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie nobody reaped yet counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_free_port_is_bindable():
    for _ in range(3):
        port = free_port()
        assert 1024 <= port < 65536
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
            s.listen()


def test_a_healthy_server_is_ready_then_stopped(tmp_path):
    port = free_port()
    with ManagedProcess([sys.executable, "-c", HEALTH_SERVER, str(port)], tmp_path / "srv.log",
                        url=f"http://127.0.0.1:{port}") as srv:
        took = srv.wait_healthy(timeout_s=30)
        assert 0 <= took < 30
        assert srv.tail() == "serving"
        pid = srv.pid
    assert srv.returncode == -signal.SIGTERM and not _alive(pid)


def test_never_healthy_fails_at_the_timeout_with_the_log_tail(tmp_path):
    """Up (the port answers) but never healthy: a StartupError after timeout_s, naming the url
    and carrying the log's last lines; the process is left to its owner to stop."""
    port = free_port()
    log = tmp_path / "srv.log"
    script = "print('warming the cache: step 7 of 9', flush=True)\n" + HEALTH_SERVER
    with ManagedProcess([sys.executable, "-c", script, str(port)], log, url=f"http://127.0.0.1:{port}",
                        health_path="/ready") as srv:
        start = time.monotonic()
        with pytest.raises(StartupError) as err:
            srv.wait_healthy(timeout_s=1.5)
        took = time.monotonic() - start
        assert 1.5 <= took < 6, took
        assert not err.value.exited and err.value.returncode is None
        msg = str(err.value)
        assert f"http://127.0.0.1:{port}" in msg and "after 1.5 s" in msg, msg
        assert "warming the cache: step 7 of 9" in msg and "warming the cache" in err.value.log_tail
        assert srv.proc.poll() is None  # still running: stopping it is the caller's
    assert not _alive(srv.pid)


def test_a_process_that_exits_first_is_reported_at_once(tmp_path):
    log = tmp_path / "srv.log"
    proc = start_process([sys.executable, "-c", "import sys; print('fatal: no tasks in tasks.jsonl'); sys.exit(3)"],
                         log)
    start = time.monotonic()
    with pytest.raises(StartupError) as err:
        wait_healthy(f"http://127.0.0.1:{free_port()}", proc, timeout_s=120, log_path=log, name="the server")
    took = time.monotonic() - start
    assert took < 10, f"an exited process must not wait for the timeout: {took:.1f} s"
    assert err.value.exited and err.value.returncode == 3 and proc.returncode == 3
    assert "the server" in str(err.value) and "exited with code 3" in str(err.value)
    assert "fatal: no tasks in tasks.jsonl" in str(err.value)


def _group_with_children(script: str) -> tuple[subprocess.Popen, list[int]]:
    """`sh -c script` leading its own group; `script` prints its children's pids on one line
    once they run (reading that line is the synchronisation: no polling)."""
    proc = subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True)
    line = proc.stdout.readline()
    proc.stdout.close()  # the children keep their copy; nobody reads it any more
    assert line.strip(), "the script died before starting its children"
    return proc, [int(p) for p in line.split()]


def _wait_gone(pids: list[int], seconds: float = 5.0) -> list[int]:
    """Those of `pids` still alive after up to `seconds` (SIGKILL is delivered asynchronously,
    and reparented children are reaped by someone else, so there is nothing to wait() on)."""
    deadline = time.monotonic() + seconds
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    return [p for p in pids if _alive(p)]


def test_stop_process_group_kills_the_children_of_the_group():
    """The leader and its children ignore SIGTERM: after the grace period SIGKILL reaches every
    one of them, children included, and the leader is reaped."""
    proc, children = _group_with_children("trap '' TERM; sleep 300 & a=$!; (trap '' TERM; sleep 300) & "
                                          "echo $a $!; wait")
    assert len(children) == 2 and all(_alive(p) for p in children + [proc.pid])
    start = time.monotonic()
    rc = stop_process_group(proc, grace_s=0.5)
    assert 0.5 <= time.monotonic() - start < 15
    assert rc == -signal.SIGKILL and proc.returncode == rc
    assert _wait_gone(children) == []


def test_stop_process_group_after_the_leader_exited_kills_what_it_left():
    """A leader that exits on SIGTERM leaves a child that ignores it: the group still gets SIGKILL."""
    proc, children = _group_with_children("(trap '' TERM; sleep 300) & echo $!; wait")
    assert stop_process_group(proc, grace_s=10) == -signal.SIGTERM
    assert _wait_gone(children) == []


def test_log_tail(tmp_path):
    log = tmp_path / "a.log"
    assert log_tail(log) == ""  # no file
    log.write_bytes(b"one\n\n  \ntwo\rthree\r\nfour   \n")
    assert log_tail(log, 3) == "two\nthree\nfour"
    assert log_tail(log, 10) == "one\ntwo\nthree\nfour"
    proc = subprocess.run([sys.executable, "-c", "print('x' * 100000); print('last')"], stdout=subprocess.PIPE)
    log.write_bytes(proc.stdout)
    assert log_tail(log, 1) == "last"


def test_local_env_server_is_ready_then_stopped(demo_tasks, tmp_path):
    import httpx

    from env_client.local_server import local_env_server

    log = tmp_path / "server.log"
    with local_env_server(demo_tasks[0], data_dir=tmp_path / "data", extra_args=["--max-sessions", "3"],
                          log_path=log) as server:
        assert server.url == f"http://127.0.0.1:{server.port}" and server.ws_url.startswith("ws://127.0.0.1:")
        assert httpx.get(server.url + "/metadata").json()["max_sessions"] == 3
        pid = server.pid
    assert server.returncode is not None and not _alive(pid)
    assert log.exists()


def test_local_env_server_that_cannot_start_says_why_at_once(tmp_path):
    from env_client.local_server import local_env_server

    bad = tmp_path / "t.jsonl"
    bad.write_text('{"instance_id": "x", "problem_statement": "p", "repo_path": "nowhere"}\n')
    start = time.monotonic()
    with pytest.raises(StartupError) as err:
        with local_env_server(bad, startup_timeout_s=300):
            pass
    assert time.monotonic() - start < 60
    assert err.value.exited and err.value.returncode == 2
    assert "instance 'x': field 'repo_path'" in str(err.value)
