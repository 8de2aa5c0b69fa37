"""Blocked tools are absent by every route, and nothing written can be executed."""

from __future__ import annotations

import hashlib
import os

from sandbox_support import assert_done, py, sh

from sandbox.models import DEFAULT_BLOCKED_TOOLS

BIN_DIRS = ("/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/local/bin", "/usr/local/sbin", "/usr/games")


def _host_blocked_binaries() -> dict[str, int]:
    """sha256 -> size of every blocked tool on the host (aliases and JDK copies included)."""
    names = set(DEFAULT_BLOCKED_TOOLS)
    found: dict[str, int] = {}
    for root in ("/usr", "/opt"):
        for dirpath, dirnames, filenames in os.walk(root):
            for name in filenames:
                if name not in names:
                    continue
                path = os.path.realpath(os.path.join(dirpath, name))
                if not os.access(path, os.X_OK) or path.startswith("/usr/share/"):
                    continue  # e.g. /usr/share/binfmts/jar: a config file, not the tool
                try:
                    with open(path, "rb") as f:
                        data = f.read()
                except OSError:
                    continue
                found[hashlib.sha256(data).hexdigest()] = len(data)
    return found


async def test_blocked_tools_absent_by_name_and_absolute_path(harness):
    names = " ".join(DEFAULT_BLOCKED_TOOLS)
    dirs = " ".join(BIN_DIRS)
    async with harness.session() as sb:
        res = await sh(sb, f"""
            for t in {names}; do
              command -v "$t" && echo "FOUND-ON-PATH $t"
              for d in {dirs}; do [ -e "$d/$t" ] || [ -L "$d/$t" ] && echo "FOUND $d/$t"; done
            done; echo done""")
        assert res.ok and res.output.strip().endswith("done"), res
        assert "FOUND" not in res.output, res.output
        # the absent files are not merely unreadable
        res = await sh(sb, "ls -la /usr/bin/find /usr/bin/unzip /usr/bin/zipinfo 2>&1; stat /usr/bin/find 2>&1")
        assert "No such file" in res.output and "->" not in res.output, res.output


async def test_no_copy_or_hardlink_alias_of_a_blocked_tool_in_view(harness):
    """No file anywhere in the system view has the content of a blocked tool (hard links,
    JDK copies, renamed copies)."""
    blocked = _host_blocked_binaries()
    assert blocked, "the host has none of the blocked tools: this test would prove nothing"
    async with harness.session() as sb:
        res = await py(sb, f"""
            import os, hashlib
            want = {blocked!r}
            sizes = set(want.values())
            hits = []
            for root in ("/usr", "/opt", "/bin", "/sbin", "/lib", "/lib64", "/root", "/home", "/tmp", "/workspace", "/.swe"):
                for dp, dn, fn in os.walk(root, followlinks=False):
                    for n in fn:
                        p = os.path.join(dp, n)
                        try:
                            if os.path.islink(p) or os.path.getsize(p) not in sizes:
                                continue
                            if hashlib.sha256(open(p, "rb").read()).hexdigest() in want:
                                hits.append(p)
                        except OSError:
                            pass
            print("HITS", hits)
        """, timeout=180)
        assert res.ok, res
        assert "HITS []" in res.output, res.output


async def test_busybox_and_toybox_absent_in_whole_view(harness):
    async with harness.session() as sb:
        res = await py(sb, """
            import os
            hits = []
            for root in ("/usr", "/opt", "/root", "/home", "/etc"):
                for dp, dn, fn in os.walk(root):
                    hits += [os.path.join(dp, n) for n in fn if n in ("busybox", "toybox", "find", "unzip", "bsdtar", "7z", "7za")]
            print("HITS", hits)
        """, timeout=120)
        assert res.ok and "HITS []" in res.output, res.output
        res = await sh(sb, "busybox find / 2>&1; toybox find / 2>&1; echo rc=$?")
        assert "/workspace" not in res.output and "not found" in res.output, res.output


async def test_copied_binary_not_executable_in_any_writable_dir(harness):
    """cp an allowed binary into every writable place (fixed list + every mount point),
    chmod +x, exec: refused everywhere."""
    async with harness.session() as sb:
        res = await sh(sb, """
            dirs="/workspace /tmp /tmp/home /dev /dev/shm /dev/pts /dev/mqueue /.swe/upper /.swe/upper/u /var/tmp /run $HOME"
            dirs="$dirs $(cut -d' ' -f5 /proc/self/mountinfo)"
            dirs="$dirs $(python3 -c 'import sys; print(" ".join(sys.path[1:]))')"
            for d in $dirs; do
              [ -d "$d" ] || continue
              cp /usr/bin/id "$d/x-id" 2>/dev/null || continue
              chmod 755 "$d/x-id"
              out=$("$d/x-id" -u 2>&1) && echo "EXECUTED $d: $out"
              echo "tried $d"
            done""")
        assert "tried /workspace" in res.output and "tried /tmp" in res.output, res.output
        assert "EXECUTED" not in res.output, res.output


async def test_dynamic_loader_cannot_run_a_copy(harness):
    """`ld-linux ./copy` maps the file itself: it must fail wherever the agent can write."""
    async with harness.session() as sb:
        res = await sh(sb, """
            ld=$(ls /lib64/ld-linux-x86-64.so.2 /lib/ld-linux-aarch64.so.1 2>/dev/null | head -1)
            [ -n "$ld" ] || { echo NOLOADER; exit 0; }
            for d in /workspace /tmp /tmp/home /dev /dev/shm /.swe/upper/u; do
              cp /usr/bin/id "$d/ld-id" 2>/dev/null || continue
              out=$("$ld" "$d/ld-id" -u 2>&1) && echo "LOADED $d: $out"
              echo "tried $d"
            done""")
        assert "NOLOADER" not in res.output and "tried /workspace" in res.output, res.output
        assert "LOADED" not in res.output, res.output


async def test_memfd_exec_refused(harness):
    """An ELF brought in as bytes (e.g. a static busybox) run from a memfd: refused
    (seccomp refuses exec-capable memfds; a sealed-noexec one cannot be executed)."""
    async with harness.session() as sb:
        res = await py(sb, """
            import os, sys
            data = open("/usr/bin/id", "rb").read()
            try:
                fd = os.memfd_create("probe", 0)
            except OSError as e:
                print("EXIT refused-create", e.errno, flush=True)
                sys.exit(0)
            os.write(fd, data)
            pid = os.fork()
            if pid == 0:
                try:
                    os.execv("/proc/self/fd/%d" % fd, ["probe", "-u"])
                except OSError as e:
                    print("refused", e, flush=True)
                    os._exit(3)
            _, status = os.waitpid(pid, 0)
            print("EXIT", os.waitstatus_to_exitcode(status))
        """)
        assert "EXIT" in res.output, res
        assert "EXIT 0" not in res.output, f"a memfd ELF ran inside the sandbox: {res.output}"


async def test_python_and_perl_interpreters_cannot_exec_written_scripts_directly(harness):
    """A script with a shebang in the workspace is not executable; python's os.execv of a
    written ELF fails too."""
    async with harness.session() as sb:
        res = await sh(sb, """
            printf '#!/bin/sh\\necho RAN-SCRIPT\\n' > run.sh; chmod +x run.sh; ./run.sh 2>&1
            python3 -c "import os,shutil; shutil.copy('/usr/bin/echo','/tmp/e'); os.chmod('/tmp/e',0o755); os.execv('/tmp/e',['e','RAN-ELF'])" 2>&1
            perl -e 'system("/workspace/run.sh") == 0 or print "perl refused\\n"' 2>&1
            echo PROBE-DONE""")
        assert_done(res)
        assert "RAN-SCRIPT" not in res.output and "RAN-ELF" not in res.output, res.output
