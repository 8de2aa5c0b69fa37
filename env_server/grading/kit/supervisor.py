"""Grading supervisor: runs the hidden tests in a child process it owns (stdlib only).

Run as ``python -I -S -B supervisor.py PLAN`` inside the grading sandbox, after the
agent's diff and the task's test_patch were applied. It

1. makes itself non-dumpable (nothing of its uid can read its memory or open its
   fds) and a child subreaper (orphans of the tests are re-parented to it);
2. reads the plan the grader staged (then deletes it), writes the canary tests,
   and hashes the files the tests must not change (test modules, conftests);
3. starts ``boot.py`` (pytest, the grader's plugin loaded first) with a clean
   environment, its output in a log file, and a pipe on which the plugin records
   each test's outcome; or, for an instance graded by its own harness, the plan's
   ``command`` under bash, its output in the log (copied out and hashed);
4. waits (with a deadline), then kills every process left behind, copies the
   JUnit report and the outcome records next to the workspace, and prints one
   line ``SWEGRADE <nonce> <json>``: the only output of this command, which no
   other process can write to.
"""

import ctypes
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 4, 36
LOG_TAIL = 4000


def _prctl(option, value):
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _sha256(path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def _conftests(root):
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        if "conftest.py" in filenames:
            found.append(os.path.relpath(os.path.join(dirpath, "conftest.py"), root))
    return found


def _children(pid):
    """Pids whose parent is ``pid`` (a scan of /proc: works on every kernel)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            out.append(int(name))
    return out


def _kill_descendants(me):
    """SIGKILL every process below this one (orphans included: we are their subreaper)."""
    killed = 0
    for _ in range(200):
        kids = _children(me)
        if not kids:
            break
        for pid in kids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except OSError:
                pass
        for pid in kids:
            try:
                os.waitpid(pid, 0)
            except OSError:
                pass
    return killed


def _drain(fd, chunks):
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)


def _child_env(kit, pytest=True):
    env = {}
    for key, value in os.environ.items():
        if key.startswith(("PYTEST_", "PYTHON", "PY_", "COV_CORE")):
            continue
        env[key] = value
    if pytest:
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env.setdefault("LANG", "C.UTF-8")
    env.setdefault("HOME", os.path.join(kit, "home"))
    return env


def main(plan_path):
    me = os.getpid()
    dumpable_off = _prctl(PR_SET_DUMPABLE, 0)
    subreaper = _prctl(PR_SET_CHILD_SUBREAPER, 1)
    with open(plan_path) as f:
        plan = json.load(f)
    os.unlink(plan_path)
    nonce, kit, ws = plan["nonce"], plan["dir"], plan["workspace"]
    summary = {"subreaper": subreaper, "dumpable_off": dumpable_off, "canary_written": False}

    canary = plan.get("canary")
    if canary:
        path = os.path.join(ws, canary["path"])
        if os.path.isdir(os.path.dirname(path)) and not os.path.exists(path):
            with open(path, "w") as f:
                f.write(canary["source"])
            ref = canary.get("mtime_ref")
            if ref and os.path.exists(os.path.join(ws, ref)):
                st = os.stat(os.path.join(ws, ref))
                os.utime(path, (st.st_atime, st.st_mtime))
            summary["canary_written"] = True

    watched = sorted(set(plan.get("watch", [])) | set(_conftests(ws)) | ({canary["path"]} if canary else set()))
    before = {rel: _sha256(os.path.join(ws, rel)) for rel in watched}

    chan_r, chan_w = os.pipe()
    chunks = []
    reader = threading.Thread(target=_drain, args=(chan_r, chunks))
    reader.daemon = True
    reader.start()

    command = plan.get("command")
    if command:  # the instance's own harness: no plugin, nothing on the channel
        cmd, pass_fds, env = ["/bin/bash", "-c", command], (), _child_env(kit, pytest=False)
    else:
        boot_cfg = dict(plan["boot"], hashes=before)
        cfg_path = os.path.join(kit, "boot-%s.json" % nonce)
        with open(cfg_path, "w") as f:
            json.dump(boot_cfg, f)
        cmd = [sys.executable, "-I", "-B"]
        if sys.version_info >= (3, 8):
            cmd += ["-X", "pycache_prefix=" + os.path.join(kit, "pyc")]
        cmd += [os.path.join(kit, "boot.py"), cfg_path, str(chan_w)]
        pass_fds, env = (chan_w,), _child_env(kit)
    log_path = os.path.join(kit, "log")
    started = time.time()
    timed_out = False
    with open(log_path, "wb") as log, open(os.devnull, "rb") as devnull:
        child = subprocess.Popen(cmd, cwd=ws, env=env, stdin=devnull, stdout=log,
                                 stderr=subprocess.STDOUT, pass_fds=pass_fds, start_new_session=True)
        os.close(chan_w)
        deadline = started + float(plan["timeout_s"])
        while True:
            code = child.poll()
            if code is not None:
                break
            if time.time() > deadline:
                timed_out = True
                try:
                    os.killpg(child.pid, signal.SIGKILL)
                except OSError:
                    pass
                code = child.wait()
                break
            time.sleep(0.01)
    summary["killed"] = _kill_descendants(me)
    reader.join(10)
    os.close(chan_r)
    after = {rel: _sha256(os.path.join(ws, rel)) for rel in watched}

    channel = b"".join(chunks)
    base = os.path.join(ws, ".swe-grade-%s" % nonce)
    with open(base + ".chan", "wb") as f:
        f.write(channel)
    junit = None
    try:
        with open(plan["junit"], "rb") as f:
            junit = f.read()
    except OSError:
        pass
    if junit is not None:
        with open(base + ".xml", "wb") as f:
            f.write(junit)
    log_sha = None
    if command:
        with open(log_path, "rb") as f:
            full_log = f.read()
        log_sha = hashlib.sha256(full_log).hexdigest()
        with open(base + ".log", "wb") as f:
            f.write(full_log)
    try:
        with open(log_path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - LOG_TAIL))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        tail = ""
    summary.update({
        "exit_code": code, "timed_out": timed_out, "duration_s": round(time.time() - started, 3),
        "junit": junit is not None, "junit_sha256": hashlib.sha256(junit).hexdigest() if junit is not None else None,
        "channel_sha256": hashlib.sha256(channel).hexdigest(), "log_sha256": log_sha,
        "changed_files": sorted(rel for rel in watched if before[rel] != after[rel]),
        "watched": len(watched), "log_tail": tail,
    })
    sys.stdout.write("SWEGRADE %s %s\n" % (nonce, json.dumps(summary, sort_keys=True)))
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1])
