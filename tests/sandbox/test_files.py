"""read_file / write_file / diff stay inside the workspace whatever the agent plants."""

from __future__ import annotations

import asyncio

import pytest
from sandbox_support import SH_MARK, assert_done, sh

from sandbox import PathError

ESCAPES = ["/etc/passwd", "../../etc/passwd", "/workspace/../etc/passwd", "pkg/../../etc/passwd",
           "/proc/self/environ", "/tmp/outside", "//etc/passwd", "/workspace/../../../../tmp/outside",
           "../workspace2/x", "/.swe/runtime.py"]


async def _refused(coro, what: str) -> str:
    try:
        await asyncio.wait_for(coro, 30)
    except PathError as e:
        return e.reason
    pytest.fail(f"{what!r} was accepted")


async def test_read_file_refuses_paths_and_symlinks_out(harness):
    async with harness.session() as sb:
        await sh(sb, "echo outside > /tmp/outside; ln -s /etc/passwd l-passwd; ln -s ../../../etc l-up; "
                     "ln -s / l-root; ln -s /tmp/outside l-tmp; ln -s l-tmp l-chain; mkdir -p d; "
                     "ln -s ../../tmp d/l-rel; ln -s /dev/zero l-zero; "
                     f"ln -s {harness.repo.host_secret_file} l-host")
        for path in ESCAPES + ["l-passwd", "l-up/passwd", "l-root/etc/passwd", "l-tmp", "l-chain",
                               "d/l-rel/outside", "l-zero", "l-host",
                               "/workspace/l-root/tmp/outside"]:
            reason = await _refused(sb.read_file(path), path)
            assert reason in ("outside_workspace", "not_found", "bad_path"), (path, reason)
        assert (await sb.read_file("pkg/core.py")).startswith(b"def feature")


async def test_read_file_symlink_into_proc_root_is_a_path_error(harness):
    async with harness.session() as sb:
        await sh(sb, "ln -s /proc/1/root l-proc1")
        assert await _refused(sb.read_file("l-proc1/etc/passwd"), "l-proc1/etc/passwd") == "outside_workspace"


async def test_write_file_refuses_paths_and_symlinks_out(harness):
    async with harness.session() as sb:
        await sh(sb, "echo orig > /tmp/victim; ln -s /tmp/victim l-victim; ln -s /tmp l-tmpdir; "
                     "ln -s /etc/passwd l-passwd; ln -s ../../../tmp l-up; mkfifo fifo")
        for path in ESCAPES + ["l-victim", "l-tmpdir/new", "l-passwd", "l-up/new",
                               f"{harness.repo.host_secret_file}"]:
            await _refused(sb.write_file(path, b"pwned\n"), path)
        res = await sh(sb, "cat /tmp/victim; ls /tmp; head -1 /etc/passwd; echo PROBE-DONE")
        assert_done(res)
        assert "pwned" not in res.output and "new" not in res.output.split(), res.output
    assert harness.repo.host_secret_file.read_text().endswith("-hostfile\n")


async def test_read_file_special_files_do_not_hang(harness):
    async with harness.session(max_file_read_bytes=1 << 20) as sb:
        await sh(sb, "mkfifo fifo; head -c 3000000 /dev/zero > big; mkdir dir")
        for path, reasons in (("fifo", {"not_a_file", "bad_path", "unreadable"}), ("big", {"too_large"}),
                              ("dir", {"is_directory"}), ("missing", {"not_found"})):
            assert await _refused(sb.read_file(path), path) in reasons, path
        assert (await sh(sb, "echo ok")).output.strip() == "ok"


async def test_symlink_swap_race_cannot_redirect_writes(harness):
    """A background loop flips a directory into a symlink to /tmp while writes go on
    (background jobs kept alive between commands for this)."""
    async with harness.session(policy={"kill_background": False}) as sb:
        await sh(sb, """mkdir -p /tmp/target; python3 -c '
import os, time
end = time.time() + 60
while time.time() < end:
    try: os.mkdir("race"); os.rmdir("race"); os.symlink("/tmp/target", "race"); os.unlink("race")
    except OSError: pass
' >/dev/null 2>&1 &""")
        alive = await sh(sb, "for i in $(seq 200); do [ -L race ] && echo L; sleep 0.005; done | sort -u")
        assert "L" in alive.output, f"probe broken: the race loop is not running: {alive.output}"
        for i in range(4000):
            try:
                await sb.write_file(f"race/f{i}", b"x")
            except PathError:
                pass
            if i % 500 == 499 and (await sh(sb, "ls /tmp/target | wc -l")).output.strip() != "0":
                break
        res = await sh(sb, "kill %1 2>/dev/null; sleep 0.2; ls /tmp/target | wc -l")
        assert res.output.strip().splitlines()[-1] == "0", f"writes escaped to /tmp: {res.output}"


async def _plant_git_config(sb, cmd: str) -> None:
    await sh(sb, f"""
        git config core.fsmonitor "{cmd}"
        git config diff.external "{cmd}"
        git config core.pager "{cmd}"
        git config diff.evil.textconv "{cmd}"
        git config filter.evil.clean "{cmd}"
        git config filter.evil.process "{cmd}"
        git config core.hooksPath /workspace/hooks
        mkdir -p hooks; printf '#!/bin/sh\\n{cmd}\\n' > hooks/post-index-change; chmod +x hooks/post-index-change
        printf '* diff=evil filter=evil\\n' > .gitattributes
        echo change >> pkg/core.py; echo {SH_MARK}-diff > new.py""")


async def test_diff_never_runs_agent_git_config_on_host(harness, tmp_path):
    """Whatever the agent plants in .git/config or .gitattributes, diff() runs nothing on
    the host and comes back with the changes."""
    flag = tmp_path / "ran-on-host"
    async with harness.session() as sb:
        await _plant_git_config(sb, f"sh -c 'touch {flag}; cat'")
        diff = await asyncio.wait_for(sb.diff(), 150)
        assert "pkg/core.py" in diff and "new.py" in diff, diff[:2000]
    assert not flag.exists(), "agent-planted git config ran on the host"


async def test_diff_runs_no_agent_git_filter_in_sandbox(harness):
    async with harness.session() as sb:
        await _plant_git_config(sb, "sh -c 'touch /workspace/AGENT-CODE-RAN; cat'")
        await asyncio.wait_for(sb.diff(), 150)
        res = await sh(sb, "ls AGENT-CODE-RAN 2>&1")
        assert "No such file" in res.output, f"agent-planted git config ran during diff(): {res.output}"



@pytest.mark.parametrize("sabotage", [
    "mkdir -p /tmp/.swe-diff-index.lock",
    "rm -rf .git",
    "git config core.bare true",
    "git replace $(git rev-parse HEAD:pkg) $(git rev-parse HEAD:tests)",
], ids=["index-lock", "rm-git", "core-bare", "replace-ref"])
async def test_diff_survives_agent_sabotage_of_git(harness, sabotage):
    async with harness.session() as sb:
        await sh(sb, f"{sabotage}; echo change >> pkg/core.py")
        diff = await asyncio.wait_for(sb.diff(), 150)
        assert "+change" in diff and "new file mode" not in diff, diff[:2000]


async def test_files_changed_tracks_every_kind_of_workspace_change(harness):
    """`files_changed` after each command: False only when the workspace is as the last command
    left it (the env server then skips the trace diff). Creation, removal (back to the base, too),
    in-place edits of the same size, renames, chmod and new directories all count; /tmp does not."""
    async with harness.session() as sb:
        async def changed(cmd: str) -> bool | None:
            res = await sb.run(cmd)
            assert res.exit_code == 0, (cmd, res.output)
            return res.files_changed

        assert await changed("true") is False
        assert await changed("cat README* >/dev/null 2>&1; ls -la >/dev/null") is False  # reads change nothing
        assert await changed("echo x > new.txt") is True
        assert await changed("true") is False
        assert await changed("rm new.txt") is True  # the workspace is the base again ...
        assert await changed("true") is False  # ... and stays unchanged
        target = (await sh(sb, "git ls-files | grep '\\.py$' | head -1")).output.strip()
        assert target, "probe broken: no tracked .py file"
        assert await changed(f"printf '#' | dd of={target} bs=1 count=1 conv=notrunc 2>/dev/null") is True
        assert await changed(f"mv {target} {target}.moved && mv {target}.moved {target}") is True
        assert await changed(f"chmod +x {target}") is True
        assert await changed("mkdir -p deep/er/dir") is True
        assert await changed("touch deep/er/dir/f && rm deep/er/dir/f") is True  # the dir's ctime moved
        assert await changed("echo scratch > /tmp/scratch") is False  # outside the workspace
        assert await changed("true") is False
        assert await changed("mkdir -p /tmp/d/e && echo a > /tmp/d/e/f && mv /tmp/d moved") is True
        assert await changed("echo b >> moved/e/f") is True  # inside a directory moved in
        assert await changed("mv moved moved2") is True
        assert await changed("echo c >> moved2/e/f") is True  # ... and renamed since
        assert await changed("rm -r moved2 deep") is True
        assert await changed("true") is False


async def test_files_changed_ignores_the_agents_git_metadata(harness):
    """git's own bookkeeping (.git at the top) is not a workspace change, from a fresh workspace too."""
    async with harness.session() as sb:
        res = await sb.run("git add -A && git status --short >/dev/null && echo ok")
        assert res.output.strip() == "ok", res.output
        assert res.files_changed is False
        assert (await sb.run("echo x > y.txt && git add y.txt")).files_changed is True
        assert (await sb.run("git reset -q y.txt")).files_changed is False
