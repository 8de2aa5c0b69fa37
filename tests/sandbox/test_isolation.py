"""The host, other sessions and the kernel's privileged surface stay out of reach."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
from pathlib import Path

from sandbox_support import MARK, PY_MARK, SH_MARK, WITH_POOLED, assert_done, assert_no_secret, host_procs, py, sh

pytestmark = WITH_POOLED  # every backend, and bwrap sessions claimed warm from a WarmPool


async def test_host_environment_not_inherited(harness, monkeypatch):
    monkeypatch.setenv("SWE_HOST_TOKEN", MARK + "-env")
    monkeypatch.setenv("HF_TOKEN", MARK + "-hf")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", MARK + "-aws")
    async with harness.session() as sb:
        res = await sh(sb, "env; cat /proc/self/environ | tr '\\0' '\\n'")
        assert "SWE_TEST_RUN=" in res.output, res.output  # the spec's env does arrive
        assert_no_secret(res.output)
        res = await py(sb, """
            import os
            for p in os.listdir("/proc"):
                if p.isdigit():
                    for f in ("environ", "cmdline"):
                        try: print(p, f, open("/proc/%s/%s" % (p, f), "rb").read())
                        except OSError as e: print(p, f, "denied")
            print("PROBE-DONE")
        """)
        assert_done(res)
        assert_no_secret(res.output)


async def test_host_processes_invisible_and_unkillable(harness):
    marker = "9" + str(os.getpid()) + "77"
    victim = subprocess.Popen(["sleep", marker])
    try:
        async with harness.session() as sb:
            res = await py(sb, f"""
                import os
                pids = [p for p in os.listdir("/proc") if p.isdigit()]
                seen = [p for p in pids if {marker!r} in open("/proc/%s/cmdline" % p, errors="replace").read()]
                print("COUNT", len(pids), "SEEN", seen)
                for sig_target in ({victim.pid}, 1, -1):
                    try: os.kill(sig_target, 0); print("SIGNALABLE", sig_target)
                    except OSError as e: print("no", sig_target, e.errno)
            """)
            assert "SEEN []" in res.output, res.output
            count = int(res.output.split("COUNT ")[1].split()[0])
            assert count < 12, f"the sandbox sees {count} processes: {res.output}"
            await sh(sb, f"kill -9 {victim.pid} 2>/dev/null; kill -9 -1 2>/dev/null; pkill -9 sleep 2>/dev/null; true")
        assert victim.poll() is None, "a host process was killed from inside the sandbox"
    finally:
        victim.kill()
        victim.wait()


async def test_host_files_unreadable(harness):
    """Host-only files (the source repo, the template cache, root's home) are not in the view."""
    repo = harness.repo
    host_paths = [str(repo.host_secret_file), str(repo.path), str(harness.cache_dir), "/root/.bash_history",
                  "/etc/shadow", "/work", "/home", "/proc/1/root/etc/shadow",
                  "/proc/kcore", "/proc/kmsg", "/dev/mem", "/sys/kernel/debug", "/sys/firmware"]
    async with harness.session() as sb:
        res = await py(sb, f"""
            import os
            for p in {host_paths!r}:
                try:
                    if os.path.isdir(p):
                        if os.listdir(p): print("DIR", p, os.listdir(p)[:5])
                    else: print("READ", p, open(p, "rb").read(200))
                except OSError as e:
                    print("no", p, e.errno)
            # mountinfo may name host paths; they must not be reachable at those paths
            for line in open("/proc/self/mountinfo"):
                src = line.split()[3]
                if src.startswith("/tmp/") and os.path.exists(src): print("HOSTPATH", src)
            print("PROBE-DONE")
        """)
        assert_done(res)
        assert "READ" not in res.output and "DIR" not in res.output and "HOSTPATH" not in res.output, res.output
        assert_no_secret(res.output)


async def test_other_session_files_processes_and_bytecode_invisible(harness):
    """Session A's files, edits and running processes are invisible to session B, and B's
    `kill -9 -1` does not reach them. (A's process runs as a foreground command while B
    attacks: the runtime may kill background jobs at the end of each command.)"""
    async with harness.session() as a, harness.session() as b:
        await sh(a, f"echo {SH_MARK}-a > /workspace/a.txt; echo {SH_MARK}-a > /tmp/a.txt; "
                    f"echo {SH_MARK}-a > /dev/shm/a.txt 2>/dev/null; rm -f README.md; echo x >> pkg/core.py")
        a_cmd = asyncio.create_task(sb_run(a, "bash -c 'exec -a session-a-sleeper sleep 6' && echo A-SURVIVED", 30))
        await asyncio.sleep(2)
        res = await py(b, f"""
            import os
            mark, hits = {PY_MARK}.encode(), []
            for root in ("/workspace", "/tmp", "/dev/shm", "/.swe"):
                for dp, dn, fn in os.walk(root):
                    for n in fn:
                        try:
                            if mark in open(os.path.join(dp, n), "rb").read(): hits.append(os.path.join(dp, n))
                        except OSError: pass
            procs = [open("/proc/%s/cmdline" % p, errors="replace").read() for p in os.listdir("/proc") if p.isdigit()]
            print("HITS", hits, "SLEEPER", any("session-a-sleeper" in c for c in procs))
            print("README", os.path.exists("/workspace/README.md"), "CORE", open("/workspace/pkg/core.py").read().endswith("x\\n"))
        """)
        assert "HITS [] SLEEPER False" in res.output, res.output
        assert "README True CORE False" in res.output, "session A's edits leaked into session B: " + res.output
        await sh(b, "kill -9 -1 2>/dev/null; pkill -9 -f session-a-sleeper 2>/dev/null; true")
        done = await a_cmd
        assert "A-SURVIVED" in done.output, f"session B killed session A's process: {done!r}"


async def sb_run(sb, command: str, timeout: float):
    return await sb.run(command, timeout_s=timeout)


async def test_no_capabilities_nonroot_nnp_seccomp(harness):
    async with harness.session() as sb:
        res = await sh(sb, "id -u; grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/self/status")
        fields = dict(line.split(":", 1) for line in res.output.splitlines()[1:])
        assert res.output.splitlines()[0].strip() != "0", res.output
        for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            assert int(fields[cap].strip(), 16) == 0, res.output
        assert fields["NoNewPrivs"].strip() == "1" and fields["Seccomp"].strip() == "2", res.output


async def test_ptrace_and_process_vm_denied(harness):
    async with harness.session() as sb:
        res = await py(sb, """
            import ctypes, os, time
            libc = ctypes.CDLL(None, use_errno=True)
            libc.syscall.restype = ctypes.c_long
            child = os.fork()
            if child == 0:
                time.sleep(30); os._exit(0)
            r = libc.ptrace(16, child, 0, 0)  # PTRACE_ATTACH
            print("ATTACH", r, ctypes.get_errno())
            r = libc.ptrace(0, 0, 0, 0)  # PTRACE_TRACEME
            print("TRACEME", r, ctypes.get_errno())
            buf = ctypes.create_string_buffer(8)
            iov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8)
            r = libc.syscall(310, child, iov, 1, iov, 1, 0)  # process_vm_readv
            print("VMREAD", r, ctypes.get_errno())
            try:
                with open("/proc/1/mem", "rb") as f: print("MEM1 readable")
            except OSError as e: print("mem1", e.errno)
            os.kill(child, 9); os.waitpid(child, 0)
        """)
        assert "ATTACH -1" in res.output and "TRACEME -1" in res.output and "VMREAD -1" in res.output, res.output
        assert "MEM1 readable" not in res.output, res.output
        res = await sh(sb, "strace -f true 2>&1; echo strace=$?; sleep 30 & gdb -batch -ex 'info proc' -p $! 2>&1 "
                           "| grep -c 'exe = '; kill %1; echo PROBE-DONE")
        assert_done(res)
        assert "strace=0" not in res.output and "\n1\n" not in res.output, res.output


async def test_mount_unshare_setns_clone3_denied(harness):
    async with harness.session() as sb:
        res = await py(sb, """
            import ctypes, os, struct
            libc = ctypes.CDLL(None, use_errno=True)
            libc.syscall.restype = ctypes.c_long
            def check(name, r):
                print(name, "OK" if r == 0 else "denied", ctypes.get_errno())
            check("unshare-user", libc.unshare(0x10000000))
            check("unshare-ns", libc.unshare(0x00020000))
            check("unshare-net", libc.unshare(0x40000000))
            fd = os.open("/proc/self/ns/mnt", os.O_RDONLY)
            check("setns", libc.setns(fd, 0))
            check("mount", libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))
            check("chroot", libc.chroot(b"/tmp"))
            # clone3 with CLONE_NEWUSER|CLONE_NEWNS: a filter must not let it through
            args = struct.pack("QQQQQQQQ", 0x10000000 | 0x00020000, 0, 0, 0, 17, 0, 0, 0)
            buf = ctypes.create_string_buffer(args)
            r = libc.syscall(435, buf, len(args))
            if r == 0:
                os._exit(0)
            if r > 0:
                os.waitpid(r, 0); print("clone3", "OK")
            else:
                print("clone3 denied", ctypes.get_errno())
        """)
        assert " OK" not in res.output, res.output
        assert res.output.count("denied") == 7, res.output
        res = await sh(sb, "unshare -Ur id 2>&1; unshare -rn true 2>&1 && echo UNSHARED; "
                           "mount -t tmpfs none /tmp 2>&1 && echo MOUNTED; su -c id root </dev/null 2>&1; "
                           "nsenter -t 1 -m true 2>&1 && echo ENTERED; echo PROBE-DONE")
        assert_done(res)
        assert "UNSHARED" not in res.output and "MOUNTED" not in res.output and "ENTERED" not in res.output, res.output
        assert "uid=0" not in res.output, res.output


async def test_kernel_attack_surface_syscalls_denied(harness):
    async with harness.session() as sb:
        res = await py(sb, """
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            libc.syscall.restype = ctypes.c_long
            calls = {"bpf": (321, 0, 0, 0), "perf_event_open": (298, 0, 0, -1, -1, 0), "keyctl": (250, 0, 0, 0),
                     "userfaultfd": (323, 0), "io_uring_setup": (425, 1, 0), "add_key": (248, 0, 0, 0, 0, 0),
                     "kexec_load": (246, 0, 0, 0, 0), "init_module": (175, 0, 0, 0), "open_by_handle_at": (304, 0, 0, 0),
                     "syslog": (103, 3, 0, 0), "fsopen": (430, 0, 0), "x32-getpid": (0x40000000 | 39,)}
            for name, args in calls.items():
                r = libc.syscall(*[ctypes.c_long(a) for a in args])
                print(name, "ALLOWED" if r >= 0 or ctypes.get_errno() not in (1, 38) else "denied", r, ctypes.get_errno())
            print("PROBE-DONE")
        """)
        assert_done(res)
        assert "ALLOWED" not in res.output, res.output


async def test_system_view_read_only(harness):
    before = set(os.listdir("/usr/bin"))
    async with harness.session() as sb:
        res = await sh(sb, """
            for p in /usr/bin/pwned /etc/pwned /pwned /usr/lib/python3/pwned /.swe/pwned /.swe/template/pwned \\
                     /root/.pyenv/pwned /proc/pwned /sys/pwned; do
              (echo x > "$p") 2>/dev/null && echo "WROTE $p"
            done
            chmod 777 /usr/bin/ls 2>/dev/null && echo CHMOD
            mv /usr/bin/ls /usr/bin/ls2 2>/dev/null && echo MOVED
            echo x >> /etc/passwd 2>/dev/null && echo APPENDED
            sp=$(python3 -c 'import sys; print([p for p in sys.path if "site-packages" in p or "dist-packages" in p][0])')
            echo 'print("hijack")' > "$sp/sitecustomize.py" 2>/dev/null && echo "WROTE $sp"
            for f in /proc/sysrq-trigger /proc/sys/kernel/core_pattern /proc/sys/kernel/hostname /sys/kernel/uevent_helper; do
              python3 -c "import os,sys; os.close(os.open(sys.argv[1], os.O_WRONLY))" "$f" 2>/dev/null && echo "OPENW $f"
            done
            echo done""")
        assert res.output.rstrip().endswith("done"), res
        for word in ("WROTE", "CHMOD", "MOVED", "APPENDED", "OPENW"):
            assert word not in res.output, res.output
    assert set(os.listdir("/usr/bin")) == before
    assert socket.gethostname() != "pwned"


async def test_cgroup_and_rlimits_cannot_be_raised(harness):
    async with harness.session() as sb:
        res = await py(sb, """
            import os, resource
            for name in ("RLIMIT_NPROC", "RLIMIT_AS", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_CPU"):
                res = getattr(resource, name); soft, hard = resource.getrlimit(res)
                try:
                    resource.setrlimit(res, (resource.RLIM_INFINITY, resource.RLIM_INFINITY)); print("RAISED", name)
                except (ValueError, OSError): print("kept", name, hard)
            w = []
            for dp, dn, fn in os.walk("/sys/fs/cgroup"):
                for n in fn:
                    p = os.path.join(dp, n)
                    try: os.close(os.open(p, os.O_WRONLY)); w.append(p)
                    except OSError: pass
            print("WRITABLE", w[:10])
        """)
        assert "RAISED" not in res.output and res.output.count("kept") == 5, res.output
        assert "WRITABLE []" in res.output, res.output


async def test_other_session_ipc_unreachable(harness):
    """Abstract unix sockets and SysV shared memory of one session are invisible to another."""
    async with harness.session() as a, harness.session() as b:
        listener = asyncio.create_task(py(a, """
            import socket, time, ctypes
            s = socket.socket(socket.AF_UNIX); s.bind("\\0sbx-session-a"); s.listen(1)
            libc = ctypes.CDLL(None, use_errno=True)
            print("SHM", libc.shmget(0x5b5b, 4096, 0o1666), flush=True)
            time.sleep(4)
            c = socket.socket(socket.AF_UNIX); c.connect("\\0sbx-session-a"); print("SELF-CONNECTED")
        """, timeout=30))
        await asyncio.sleep(2)
        res = await py(b, """
            import socket, ctypes
            s = socket.socket(socket.AF_UNIX)
            try: s.connect("\\0sbx-session-a"); print("CONNECTED")
            except OSError as e: print("refused", e.errno)
            libc = ctypes.CDLL(None, use_errno=True)
            print("SHMGET", libc.shmget(0x5b5b, 0, 0o666), ctypes.get_errno())
        """)
        own = await listener
        assert "SELF-CONNECTED" in own.output and "SHM -1" not in own.output, f"probe broken: {own.output}"
        assert "refused" in res.output and "SHMGET -1 2" in res.output, res.output


async def test_killing_the_host_parent_leaves_no_sandbox_process(harness, tmp_path):
    """SIGKILL the process that opened the session (the env server): the jail and
    everything the agent started must go with it."""
    import sys
    import textwrap
    import time

    from sandbox_support import RUN_TOKEN, runtime_pids, wait_no_procs

    # pooled: the parent also holds idle pre-started jails (and one starting), which must go too
    # (a busy machine may fail or slow a background start: the parent waits for two idle jails, as a refill
    # brings them, before it says it is ready)
    opener = ("pool = WarmPool(3, 3); await pool.warm(spec, cfg); sb = await pool.open(spec, cfg)\n"
              "            for _ in range(600):\n"
              "                if pool.stats()['idle'] >= 2: break\n"
              "                await asyncio.sleep(0.1)"
              if harness.pooled else "pool = None; sb = await open_sandbox(spec, cfg)")
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(f"""
        import asyncio, json, sys
        from pathlib import Path
        from sandbox import open_sandbox, WarmPool, WorkspaceSpec, SandboxConfig
        async def main():
            spec = WorkspaceSpec(repo_path=Path({str(harness.repo.path)!r}), base_commit={harness.repo.base_commit!r},
                                 env={{"SWE_TEST_RUN": {RUN_TOKEN!r}}})
            cfg = SandboxConfig(backend={harness.backend!r}, cache_dir=Path({str(harness.cache_dir)!r}))
            {opener}
            await sb.run("(setsid sleep 778001 &); (nohup sleep 778002 >/dev/null 2>&1 &); echo up")
            print("ready", sb.id, json.dumps(pool.stats() if pool else {{}}), flush=True)
            await asyncio.sleep(600)
        asyncio.run(main())
    """))
    baseline = set(host_procs())
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        line = parent.stdout.readline().split()
        assert line[:1] == ["ready"], line
        assert host_procs("778001"), "probe broken: the sandbox's sleepers are not visible on the host"
        if harness.pooled:  # the claimed jail and at least two idle ones
            assert len(runtime_pids()) >= 3, \
                f"probe broken: the pool's jails are not up: {runtime_pids()}, pool {' '.join(line[2:])}"
        os.kill(parent.pid, 9)
        parent.wait()
        time.sleep(0.5)
        left = wait_no_procs(baseline, 15.0, "778001", "778002")
        assert not left, f"sandbox processes outlived their parent: {left}"
        # a later server start (a new process) must not be left with the dead session's resources
        restart = tmp_path / "restart.py"
        restart.write_text(script.read_text().replace("await asyncio.sleep(600)",
                                                      "await sb.close(); pool and await pool.close()"))
        subprocess.run([sys.executable, str(restart)], check=True, timeout=120, capture_output=True)
        # a session's cgroup is s-<pid of its maker>-<session id> (sandbox/cgroup.py, SessionCgroup.name)
        stale = [str(p) for p in Path("/sys/fs/cgroup").glob(f"**/s-*-{line[1]}") if p.is_dir()]
        for p in stale:  # clean up after ourselves; the assertion below reports it
            with contextlib.suppress(OSError):
                os.rmdir(p)
        assert not stale, f"cgroups of a killed session are left on the host: {stale}"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
