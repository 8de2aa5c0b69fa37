"""Bombs, floods, fills, timeouts and attacks on the runtime stay inside the session."""

from __future__ import annotations

import asyncio
import os
import time

from sandbox_support import DONE, assert_done, host_procs, py, runtime_pids, sh

from sandbox import CommandStatus, SandboxDied

PROCS_IN_SANDBOX = ("import os; print('PROCS', sum(1 for p in os.listdir('/proc') if p.isdigit()))")


async def _procs(sb) -> int:
    res = await sh(sb, f'python3 -c "{PROCS_IN_SANDBOX}"')
    return int(res.output.split("PROCS")[1].split()[0])


async def test_process_limit_caps_forks(harness):
    """A bounded probe first (200 forks against a limit of 48)."""
    async with harness.session(pids=48) as sb:
        res = await py(sb, """
            import os, time
            kids = []
            for i in range(200):
                try:
                    pid = os.fork()
                except OSError:
                    break
                if pid == 0:
                    time.sleep(20); os._exit(0)
                kids.append(pid)
            print("FORKED", len(kids))
            for k in kids: os.kill(k, 9)
            for k in kids: os.waitpid(k, 0)
        """)
        forked = int(res.output.split("FORKED")[1].split()[0])
        assert forked < 48, f"{forked} processes forked under a limit of 48"


async def test_fork_bomb_contained(harness):
    async with harness.session(pids=48) as sb:
        probe = await py(sb, """
            import os, time
            n = 0
            for i in range(120):
                try: pid = os.fork()
                except OSError: break
                if pid == 0: time.sleep(5); os._exit(0)
                n += 1
            print("FORKED", n); os.system("kill -9 $(jobs -p) 2>/dev/null")
        """)
        forked = int(probe.output.split("FORKED")[1].split()[0])
        assert forked < 48, "the process limit does not hold: not launching a real fork bomb"
        await sh(sb, "pkill -9 -f 'time.sleep' 2>/dev/null; sleep 0.5; true")
        start = time.monotonic()
        res = await sb.run(":(){ :|:& };:", timeout_s=5)
        assert res.status in (CommandStatus.timeout, CommandStatus.nonzero_exit, CommandStatus.ok), res
        assert time.monotonic() - start < 40
        await asyncio.sleep(1)
        after = await sh(sb, "echo alive")
        assert after.ok and after.output.strip().endswith("alive"), after  # bash may report the dead jobs first
        assert await _procs(sb) <= 6, "fork bomb processes survived the command"


async def test_memory_bomb_contained(harness):
    async with harness.session(memory_mb=256) as sb:
        res = await py(sb, """
            try:
                b = b"\\1" * (600 << 20); print("ALLOCATED-600")
            except MemoryError:
                print("refused")
            print("PROBE-DONE")
        """)
        # refused by the allocator (the probe then runs to its end), or killed by the OOM killer
        assert ("refused" in res.output and res.output.rstrip().endswith(DONE)) or res.exit_code == 137, res
        assert "ALLOCATED-600" not in res.output, res.output
        # many processes below the per-process cap: the session's total is bounded too
        res = await py(sb, """
            import os, time
            kids = []
            for i in range(6):
                pid = os.fork()
                if pid == 0:
                    try:
                        b = b"\\1" * (200 << 20); print("CHILD-ALLOC", flush=True); time.sleep(4)
                    except MemoryError:
                        pass
                    os._exit(0)
                kids.append(pid)
            for k in kids: os.waitpid(k, 0)
        """, timeout=60)
        assert res.output.count("CHILD-ALLOC") <= 2, f"6 x 200 MB held at once under 256 MB: {res.output}"
        ok = await sh(sb, "echo alive")
        assert ok.output.strip() == "alive"


async def test_workspace_disk_fill_bounded(harness):
    async with harness.session(workspace_mb=32) as sb:
        res = await sh(sb, "dd if=/dev/zero of=big bs=1M count=200 2>&1; du -sm big; df -m . | tail -1", timeout=60)
        mb = int(res.output.split("\n")[-3].split()[0]) if "big" in res.output else 0
        assert "No space left" in res.output or "File size limit" in res.output, res.output
        assert mb <= 33, res.output
        res = await sh(sb, "rm big && echo x > after.txt && cat after.txt")
        assert res.output.strip() == "x", res


async def test_tmp_and_shm_fill_bounded(harness):
    async with harness.session(tmp_mb=16) as sb:
        res = await sh(sb, "dd if=/dev/zero of=/tmp/big bs=1M count=200 2>&1; du -sm /tmp/big", timeout=60)
        assert int(res.output.strip().split("\n")[-1].split()[0]) <= 17, res.output
        res = await sh(sb, "dd if=/dev/zero of=/dev/shm/big bs=1M count=300 2>&1; du -sm /dev/shm/big 2>/dev/null "
                           "|| echo '0 none'", timeout=60)
        assert int(res.output.strip().split("\n")[-1].split()[0]) <= 100, res.output
        res = await sh(sb, "for d in /dev /tmp/home /.swe/upper /var/tmp /run; do "
                           "dd if=/dev/zero of=$d/big bs=1M count=300 2>/dev/null; "
                           "s=$(du -sm $d/big 2>/dev/null | cut -f1); echo \"$d ${s:-0}\"; rm -f $d/big; done", timeout=90)
        for line in res.output.strip().splitlines():
            d, size = line.rsplit(" ", 1)
            assert int(size) <= 100 or d in ("/tmp/home",) and int(size) <= 17, res.output


async def test_huge_single_file_rlimit_fsize(harness):
    async with harness.session(file_size_mb=4, tmp_mb=64) as sb:
        res = await sh(sb, "dd if=/dev/zero of=/tmp/huge bs=1M count=20 2>&1; stat -c %s /tmp/huge")
        assert int(res.output.strip().split("\n")[-1]) <= 4 << 20, res.output
        res = await py(sb, """
            import os, signal
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            with open("/workspace/huge", "wb", buffering=0) as f:  # unbuffered: close() has nothing left to write
                try:
                    f.seek(100 << 20); f.write(b"x"); f.flush(); print("SPARSE-WRITTEN")
                except OSError as e: print("refused", e.errno)
            print("PROBE-DONE")
        """)
        assert_done(res)
        assert "SPARSE-WRITTEN" not in res.output, res.output


async def test_output_flood_truncated_and_killed(harness):
    async with harness.session(max_output_bytes=4096, output_kill_bytes=2 << 20) as sb:
        start = time.monotonic()
        res = await sb.run("yes flood", timeout_s=60)
        assert res.status is CommandStatus.output_limit and res.truncated, res.status
        assert len(res.output.encode()) < 4096 + 300 and "truncated" in res.output, len(res.output)
        assert time.monotonic() - start < 30
        res = await sb.run("cat /dev/zero", timeout_s=60)  # no newlines at all
        assert res.status is CommandStatus.output_limit and len(res.output.encode()) < 4096 + 300, res.status
        res = await sb.run("head -c 100000 /dev/zero | tr '\\0' a; echo", timeout_s=30)
        assert res.ok and res.truncated and res.output_bytes == 100001, res.status
        assert "truncated" in res.output and len(res.output.encode()) < 4096 + 300
        assert await _procs(sb) <= 6


async def test_background_flood_after_command_bounded(harness):
    async with harness.session(max_output_bytes=4096, output_kill_bytes=2 << 20) as sb:
        await sb.run("(yes bgflood &) ; sleep 0.2; echo started", timeout_s=30)
        for _ in range(3):
            res = await sb.run("echo ok", timeout_s=30)
            assert len(res.output.encode()) < 4096 + 300, len(res.output)
        res = await sb.run("echo clean", timeout_s=30)
        assert res.output.strip() == "clean", res.output[:300]


async def test_sleep_forever_times_out_and_shell_survives(harness):
    async with harness.session() as sb:
        await sh(sb, "export KEEP=kept; cd pkg")
        start = time.monotonic()
        res = await sb.run("sleep 100000", timeout_s=2)
        assert res.status is CommandStatus.timeout, res
        assert time.monotonic() - start < 10
        res = await sh(sb, "echo $KEEP $(pwd)")
        assert res.output.strip() == "kept /workspace/pkg", res.output
        res = await sb.run("trap '' INT TERM HUP; while :; do :; done", timeout_s=2)
        assert res.status is CommandStatus.timeout, res


async def test_timeout_kills_background_setsid_and_daemons(harness):
    baseline = set(host_procs())  # what other fixtures of the run (an env server) already hold
    async with harness.session() as sb:
        res = await sb.run(
            "setsid sleep 777001 & nohup sleep 777002 >/dev/null 2>&1 & "
            "(trap '' TERM HUP INT; exec -a sbx-survivor sleep 777003) & disown -a; "
            "python3 -c 'import os,time; os.fork() and os._exit(0); os.setsid(); os.fork() and os._exit(0); "
            "time.sleep(777004)' & sleep 100000", timeout_s=2)
        assert res.status is CommandStatus.timeout, res
        await asyncio.sleep(0.5)
        res = await sh(sb, "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep 77700 | grep -v grep; echo PROBE-DONE")
        assert_done(res)
        assert "77700" not in res.output, f"processes survived the timeout: {res.output}"
    survivors = {p: c for p, c in host_procs("77700").items() if p not in baseline}
    assert not survivors, survivors


async def test_zombies_reaped(harness):
    async with harness.session() as sb:
        await py(sb, """
            import os
            for i in range(40):
                if os.fork() == 0: os._exit(0)
            if os.fork() == 0:  # orphaned grandchildren exit later
                for i in range(20):
                    if os.fork() == 0: os._exit(0)
                os._exit(0)
        """)
        await sh(sb, "sleep 0.3")
        res = await sh(sb, "grep -l '^State:.*Z' /proc/[0-9]*/status 2>/dev/null | wc -l")
        assert int(res.output.strip()) == 0, res.output


async def test_kill_all_visible_processes(harness):
    async with harness.session() as sb:
        res = await sb.run("kill -9 -1; for p in /proc/[0-9]*; do kill -9 ${p#/proc/} 2>/dev/null; done; echo after",
                           timeout_s=20)
        assert res.status in (CommandStatus.shell_exited, CommandStatus.sandbox_died, CommandStatus.ok,
                              CommandStatus.nonzero_exit), res
        await _still_answers_or_reports_death(sb, res)


async def _still_answers_or_reports_death(sb, first) -> None:
    """After an attack on the session itself: it works on, or it says it died (as data,
    then as SandboxDied) - never a hang, never a half-alive session."""
    try:
        res = await asyncio.wait_for(sb.run("echo again", timeout_s=10), 40)
    except SandboxDied:
        assert first.status is CommandStatus.sandbox_died and not sb.alive, first
        return
    assert res.output.strip() == "again" and sb.alive, res


async def test_kill_runtime_reported_as_died(harness):
    async with harness.session() as sb:
        res = await sb.run("kill -9 $(ps -o ppid= -p $$) 2>&1; sleep 2; echo survived", timeout_s=20)
        if "survived" in res.output and res.ok:  # the runtime could not be killed: fine
            return
        assert res.status in (CommandStatus.sandbox_died, CommandStatus.shell_exited), res
        await _still_answers_or_reports_death(sb, res)


async def test_cpu_policy_applies_to_everything_and_cannot_be_raised(harness):
    """'idle': the shell and all it starts run under SCHED_IDLE, and the agent cannot climb back."""
    probe = """
        import os
        print("POLICY", os.sched_getscheduler(0))
        try:
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
            print("RAISED", os.sched_getscheduler(0))
        except PermissionError:
            print("REFUSED")
    """
    async with harness.session(cpu_policy="idle") as sb:
        assert sb.info.cpu_policy == "idle"
        res = await py(sb, probe)
        assert f"POLICY {os.SCHED_IDLE}" in res.output and "REFUSED" in res.output, res.output
    async with harness.session() as sb:  # the library default competes as an equal
        assert sb.info.cpu_policy == "normal"
        res = await py(sb, probe)
        assert f"POLICY {os.SCHED_OTHER}" in res.output, res.output


async def test_runtime_that_stops_answering_is_declared_dead(harness, monkeypatch):
    """The agent cannot stop its runtime (it is outside the shell's Landlock domain); a runtime
    wedged anyway (here: SIGSTOP from the host) hits the host's deadline: the session says it
    died instead of hanging, and later calls fail at once."""
    import signal

    import sandbox.channel as channel

    monkeypatch.setattr(channel, "WATCHDOG_PERIOD_S", 0.1)
    async with harness.session() as sb:
        tried = await sb.run("kill -STOP $(ps -o ppid= -p $$)")
        if sb.info.landlock_abi >= 6:
            assert tried.status is CommandStatus.nonzero_exit and "not permitted" in tried.output, tried
            assert (await sb.run("echo alive")).output == "alive\n"
        runtimes = runtime_pids()  # this session's (other sessions on the host are not this run's)
        assert len(runtimes) == 1, runtimes
        assert channel.RUN_GRACE_S == 15.0  # the host's grace past a command's timeout ...
        monkeypatch.setattr(channel, "RUN_GRACE_S", 3.0)  # ... shortened here: the same deadline, waited sooner
        os.kill(runtimes[0], signal.SIGSTOP)
        start = time.monotonic()
        res = await sb._channel.run("echo hi", timeout_s=0.5)  # deadline: 0.5 s + the grace
        waited = time.monotonic() - start
        assert res.status is CommandStatus.sandbox_died, res
        assert 3.5 <= waited < 13.5, waited
        try:
            await sb.run("echo again")
        except SandboxDied:
            pass
        else:
            raise AssertionError("a dead session answered")
        os.kill(runtimes[0], signal.SIGCONT)


async def test_a_killed_runtime_reads_as_died_once_then_raises(harness):
    """Every backend alike: the first command after the runtime is gone comes back as sandbox_died
    saying why, the session is no longer alive, and every later call raises SandboxDied."""
    import signal

    import pytest

    async with harness.session() as sb:
        res = await sb.run("echo up", timeout_s=-1)  # a non-positive timeout means the default one
        assert res.ok and res.output == "up\n", res
        runtimes = runtime_pids()
        assert len(runtimes) == 1, runtimes
        os.kill(runtimes[0], signal.SIGKILL)
        res = await sb.run("echo hi")
        assert res.status is CommandStatus.sandbox_died and res.output.startswith("[sandbox died: "), res
        assert not sb.alive
        with pytest.raises(SandboxDied):
            await sb.run("echo again")
        with pytest.raises(SandboxDied):
            await sb.write_file("after.txt", b"x")


async def test_swept_background_jobs_leave_no_notice_in_later_output(harness):
    """bash reports a job killed by a signal at its next chance; the runtime's sweeps
    (after a command, after a timeout) must not bleed such notices into later output."""
    async with harness.session() as sb:
        for _ in range(2):
            res = await sb.run("sleep 1000 & sleep 1001 & echo started")
            assert res.output == "started\n", res.output
            res = await sb.run("echo next")
            assert res.output == "next\n", res.output
        res = await sb.run("sleep 1002 & sleep 1000", timeout_s=1)
        assert res.status is CommandStatus.timeout, res
        res = await sb.run("echo after-timeout")
        assert res.output == "after-timeout\n", res.output
        res = await sb.run("true")
        assert res.output == "", res.output


async def test_exec_redirections_do_not_blind_later_commands(harness):
    """`exec >file` or closing stdout lasts for that command only: the next commands'
    output and exit codes still come back (a shell whose output went elsewhere for the
    rest of the episode would leave the agent blind)."""
    async with harness.session() as sb:
        res = await sb.run("exec >/tmp/log 2>&1; echo hidden; ls /nonexistent", timeout_s=10)
        assert res.output == "" and res.status is CommandStatus.nonzero_exit, res
        res = await sb.run("echo visible; ls /nonexistent", timeout_s=10)
        assert res.output.startswith("visible\nls: cannot access"), res.output
        res = await sb.run("exec >&- 2>&-; echo gone", timeout_s=10)
        res = await sb.run("exec 62>/tmp/a 63>/tmp/b; echo q", timeout_s=10)
        assert res.output == "q\n", res.output
        res = await sb.run("cat /tmp/log; exit 4", timeout_s=10)
        assert res.output.startswith("hidden\nls: cannot access") and res.exit_code == 4, res
        # traps fire outside the command too (where the shell speaks to the runtime)
        res = await sb.run("trap 'echo TRAP; echo 0123456789abcdef 0' DEBUG; trap 'echo ERR' ERR", timeout_s=10)
        res = await sb.run("echo hi; false", timeout_s=10)
        assert res.status is CommandStatus.nonzero_exit and "hi\n" in res.output, res
        res = await sb.run("trap - DEBUG ERR; echo plain", timeout_s=10)
        res = await sb.run("echo plain", timeout_s=10)
        assert res.output == "plain\n" and res.ok, res


async def test_lone_surrogate_command_is_refused_and_session_lives(harness):
    import pytest

    async with harness.session() as sb:
        with pytest.raises(ValueError, match="not valid Unicode"):
            await sb.run("echo \ud800")
        assert (await sb.run("echo ok")).output == "ok\n"
