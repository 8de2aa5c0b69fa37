"""``Sandbox.run_isolated``: a command walled off from the runtime that reports on it.

What the grader relies on: whatever the command does, it cannot signal, trace, or open
the fds or memory of the runtime (the only holder of the channel to the host) or of any
process that is not its own; its output never stops it or breaks the channel; what it
leaves running is killed; and the process tree, environment and working directory it
sees are those an agent's own command sees. Also: an agent's ordinary shell can no
longer signal the runtime.
"""

from __future__ import annotations

import json

from support.requirements import missing
from sandbox_support import assert_done, py, sh

PROBE = r'''
import json, os, signal
me = os.getpid()
mine = {me, os.getppid()}
view = {"procs": [], "reach": {}}
for name in sorted(os.listdir("/proc"), key=lambda n: (len(n), n)):
    if not name.isdigit() or int(name) == me:
        continue
    pid = int(name)
    try:
        comm = open("/proc/%d/comm" % pid).read().strip()
    except OSError:
        continue
    view["procs"].append(comm)
    if pid in mine:
        continue
    got = []
    try:
        os.kill(pid, 0); got.append("signal")
    except OSError:
        pass
    for fd in ("0", "1", "2"):
        try:
            os.close(os.open("/proc/%d/fd/%s" % (pid, fd), os.O_WRONLY)); got.append("fd" + fd)
        except OSError:
            pass
    for what in ("mem", "environ"):
        try:
            open("/proc/%d/%s" % (pid, what), "rb").read(1); got.append(what)
        except OSError:
            pass
    view["reach"][comm + ":" + name] = got
view["env"] = sorted(k for k in os.environ if k not in ("_", "SHLVL"))
view["cwd"] = os.getcwd()
view["parent"] = open("/proc/%d/cmdline" % os.getppid(), "rb").read().replace(b"\0", b" ").decode().strip()
view["fds"] = sorted(os.listdir("/proc/self/fd"))
print("VIEW " + json.dumps(view))
'''


def _view(output: str) -> dict:
    line = next(ln for ln in output.splitlines() if ln.startswith("VIEW "))
    return json.loads(line[5:])


async def test_an_isolated_command_reaches_nothing_but_its_own(harness):
    async with harness.session() as sb:
        if sb.info.landlock_abi < 6:  # fails in CI, skips elsewhere (tests/support/requirements.py)
            missing("landlock", f"Landlock ABI {sb.info.landlock_abi}: no scoped domains on this kernel")
        await sb.write_file("probe.py", PROBE.encode())
        iso = await sb.run_isolated("python3 probe.py", timeout_s=60, output_limit=1 << 20)
        agent = await sh(sb, "python3 probe.py")
        a, b = _view(iso.output), _view(agent.output)
        assert iso.ok and a["reach"], iso
        assert all(got == [] for got in a["reach"].values()), a["reach"]  # runtime, init: out of reach
        # the grader's run looks like the agent's own: same processes, environment, cwd, parent, fds
        steady = [lambda v: sorted(p for p in v["procs"] if p != "sleep")]  # docker's watchdog naps come and go
        assert steady[0](a) == steady[0](b) and a["env"] == b["env"] and a["cwd"] == b["cwd"] == "/workspace"
        assert a["parent"] == b["parent"] == "bash --noprofile --norc" and a["fds"] == b["fds"]
        # the agent's own shell cannot signal or open the runtime either (it is outside its domain)
        assert not any("signal" in got or "fd1" in got for name, got in b["reach"].items()
                       if not name.startswith("bash")), b["reach"]


async def test_killing_everything_in_reach_does_not_kill_the_sandbox(harness):
    async with harness.session() as sb:
        if sb.info.landlock_abi < 6:
            missing("landlock", f"Landlock ABI {sb.info.landlock_abi}: no scoped domains on this kernel")
        res = await sb.run_isolated(
            "python3 -c 'import os; [os.kill(p, 9) for p in (1, 2, 3, 7, 10) if p != os.getpid() "
            "and not __import__(\"contextlib\").suppress(OSError)]' ; kill -9 -1; echo survived", 30, 4096)
        assert res.status.value in ("ok", "nonzero_exit"), res
        assert (await sh(sb, "echo alive")).output.strip() == "alive"
        assert sb.alive


async def test_output_floods_are_kept_head_and_tail_and_leftovers_are_killed(harness):
    async with harness.session() as sb:
        res = await sb.run_isolated("head -c 30000000 /dev/zero | tr '\\0' y; echo; echo THE-END; "
                                    "(sleep 301 &) ; exit 3", timeout_s=60, output_limit=64 * 1024)
        assert res.exit_code == 3 and res.truncated and res.output_bytes > 30_000_000
        assert res.output.rstrip().endswith("THE-END") and len(res.output) < 70 * 1024
        left = await py(sb, """
            import os
            print(len([p for p in os.listdir("/proc") if p.isdigit()
                       and open("/proc/%s/cmdline" % p, "rb").read() == b"sleep\\x00301\\x00"]))
            print("PROBE-DONE")
        """)
        assert_done(left)
        assert left.output.split() == ["0", "PROBE-DONE"], left.output  # the background sleep is gone
        late = await sb.run_isolated("sleep 30", timeout_s=1, output_limit=4096)
        assert late.status.value == "timeout" and late.duration_s < 10
