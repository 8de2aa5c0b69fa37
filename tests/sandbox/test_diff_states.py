"""The workspace diff reads whatever state the agent leaves (issue 33, guarantee 4).

Every state below is made by the agent's own shell in a real session, on every backend.
The diff then holds what git can read (the agent's fix among it), lists each part it left
out with why (``ExactDiff.skipped``), and never blocks: nothing here may turn into an
infrastructure failure. What cannot be read at all (/workspace itself unreadable, a FIFO
where git must read the top .gitignore) fails fast with ``DiffUnreadable`` and one line
naming why: the agent's failure, not the server's.
"""

from __future__ import annotations

import time

import pytest
from sandbox_support import sh
from support.diff_states import FIX, HELD, STATES

from sandbox import DiffUnreadable


async def _diff(sb):
    start = time.monotonic()
    d = await sb.diff_exact(0)
    return d, time.monotonic() - start


async def test_every_state_at_once_keeps_the_fix_and_names_what_was_left_out(harness):
    async with harness.session() as sb:
        script = " && ".join([FIX] + [cmd for cmd, _ in STATES.values()] + [cmd for cmd, _ in HELD.values()])
        res = await sh(sb, script + " && echo made", timeout=120)
        assert res.output.rstrip().endswith("made"), res
        d, took = await _diff(sb)
        assert took < 30, f"the diff took {took:.1f} s"
        assert "+# the fix" in d.text, d.text[:3000]
        for name, (_, left_out) in STATES.items():
            assert any(left_out in s for s in d.skipped), (name, d.skipped)
        for name, (_, shown) in HELD.items():
            assert shown is None or shown in d.text, (name, d.text[:3000])
        assert d.lossy and d.patch is not None  # the binary file and the bytes that are not UTF-8
        # what was left out is not in the diff either
        for path in ("vendor/empty/f", "vendor/full/f", "vendor/sub/s", "lib/a/y", "lib/b/y", "junk.txt",
                     "locked/q", "a-fifo", "a-socket", "blocked/z", "linked/z", "huge.bin", ".GIT/config"):
            assert f"b/{path}\n" not in d.text, path
        # the bytes on disk, not a conversion of them (working-tree-encoding, eol, ident unset)
        assert "+not utf-16 \ufffd\n" in d.text and "+$Id$\r" in d.text, d.text
        pwned = await sh(sb, "ls /tmp/pwned 2>&1; echo done")
        assert "No such file" in pwned.output, pwned


@pytest.mark.parametrize("name", sorted(STATES))
async def test_each_state_alone_is_read_fast(harness, name):
    cmd, left_out = STATES[name]
    async with harness.session() as sb:
        res = await sh(sb, f"{FIX} && {cmd} && echo made", timeout=120)
        assert res.output.rstrip().endswith("made"), res
        d, took = await _diff(sb)
        assert took < 20, f"the diff took {took:.1f} s"
        assert "+# the fix" in d.text and any(left_out in s for s in d.skipped), (d.skipped, d.text[:2000])


async def test_a_part_made_readable_again_is_diffed_again(harness):
    """What was left out comes back once it can be read: no stale diff is served from the cache."""
    async with harness.session() as sb:
        await sh(sb, "mkdir locked && echo q > locked/q && chmod 000 locked")
        d, _ = await _diff(sb)
        assert any("locked (unreadable directory)" in s for s in d.skipped), d.skipped
        await sh(sb, "chmod 755 locked")
        d, _ = await _diff(sb)
        assert "+++ b/locked/q" in d.text and not d.skipped, (d.skipped, d.text)


async def test_a_part_left_out_is_the_bases_not_what_an_earlier_diff_read(harness):
    """A fix read by one diff, then walled off (a .git planted beside it): the next diff leaves the
    folder out whole, as the base has it, never with the content staged before."""
    async with harness.session() as sb:
        await sh(sb, FIX)
        d, _ = await _diff(sb)
        assert "+# the fix" in d.text
        await sh(sb, "echo '# more' >> pkg/core.py && git init -q pkg")
        d, _ = await _diff(sb)
        assert any(s.startswith("pkg (an embedded repository") for s in d.skipped), d.skipped
        assert "pkg/core.py" not in d.text, d.text
        await sh(sb, "rm -rf pkg/.git")
        d, _ = await _diff(sb)
        assert "+# the fix\n+# more" in d.text and not d.skipped, (d.skipped, d.text)


@pytest.mark.parametrize("cmd, why", [
    ("mkfifo .gitignore", "/workspace/.gitignore is a FIFO"),
    ("mkfifo /tmp/top-fifo && ln -s /tmp/top-fifo .gitattributes", "/workspace/.gitattributes is a symbolic link"),
    ("chmod 000 /workspace", "/workspace itself cannot be read"),
], ids=["fifo-gitignore", "symlinked-gitattributes", "chmod-000-workspace"])
async def test_a_workspace_git_cannot_read_at_all_fails_fast_in_one_line(harness, cmd, why):
    async with harness.session() as sb:
        res = await sh(sb, f"{FIX} && {cmd} && echo made")
        assert res.output.rstrip().endswith("made"), res
        start = time.monotonic()
        with pytest.raises(DiffUnreadable) as err:
            await sb.diff_exact(0)
        assert time.monotonic() - start < 10
        assert why in str(err.value) and "\n" not in str(err.value), str(err.value)
        assert sb.alive  # the session goes on: the agent can repair its workspace
        await sh(sb, "chmod 755 /workspace; rm -f /workspace/.gitignore /workspace/.gitattributes")
        d, _ = await _diff(sb)
        assert "+# the fix" in d.text, d.text
