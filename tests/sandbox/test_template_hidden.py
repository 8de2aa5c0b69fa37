"""No pristine copy of a test module is readable from the sandbox (issue 33, item 1).

The runtime keeps the read-only template (its overlay's lower layer, the repository its diff
reads) under /.swe; every shell (the agent's persistent one, ``run_isolated``'s, anything they
start) runs under a Landlock layer that reads only beneath the other entries of /. So the
pristine test module is not at /.swe/template, nor through /proc/<pid>/root, /cwd or /fd of any
process, while the runtime goes on reading it (the diff below is against the template).
The workspace's own repository (/workspace/.git) is the agent's and is left out of the search.
"""

from __future__ import annotations

import base64
import uuid

import pytest
from sandbox_support import py, sh
from support.git_repos import commit_files

from sandbox import CommandResult, LayerMode

TOKEN = uuid.uuid4().hex[:10]
MODULE = f"test_pristine_{TOKEN}.py"
MARK = "PRISTINE" + "-" + TOKEN  # in the template's copy only (the agent's copy loses it first)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("hidden") / "repo"
    commit_files(root, {"pkg/__init__.py": "def f():\n    return 1\n",
                        f"tests/{MODULE}": f'def test_f():\n    """{MARK}"""\n    assert True\n'})
    return root


# Every way in that a shell could try: the template's own path, its .git through git, and every
# process's root, cwd and fds; then a walk of every root a shell can name (the mount points, the
# usual top-level names, /.swe) for a file of the module's name or holding the pristine text.
PROBE = f"""
import os, stat, subprocess
name, mark, hits, named = {MODULE!r}, {MARK!r}.encode(), [], []

def look(p):
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode) and mark in os.read(fd, 1 << 20): hits.append(p)
    except OSError: pass
    finally: os.close(fd)

for cmd in (["ls", "/.swe/template"], ["cat", "/.swe/template/tests/" + name],
            ["git", "--git-dir=/.swe/template/.git", "log", "-1"], ["ls", "/.swe"]):
    r = subprocess.run(cmd, capture_output=True)
    print("CMD", cmd[0], r.returncode, mark in r.stdout)
walks = []
for pid in [p for p in os.listdir("/proc") if p.isdigit()] + ["self", "thread-self"]:
    for base in ("/proc/%s/root" % pid, "/proc/%s/cwd" % pid):
        for rel in ("/.swe/template/tests/", "/template/tests/", "/tests/", "/workspace/tests/"):
            look(base + rel + name)
        walks.append(base + "/.swe")
    try:
        for fd in os.listdir("/proc/%s/fd" % pid): look("/proc/%s/fd/%s" % (pid, fd))
    except OSError: pass
tops = {{"bin", "etc", "home", "lib", "lib64", "opt", "root", "sbin", "srv", "tmp", "usr", "var", "workspace", ".swe"}}
for line in open("/proc/self/mountinfo"):
    tops.add(line.split()[4].strip("/").split("/")[0])
for root in ["/" + t for t in sorted(tops) if t not in ("", "proc", "sys")] + walks:
    for dp, dn, fn in os.walk(root):
        if dp == "/workspace": dn[:] = [d for d in dn if d != ".git"]  # the agent's own repository
        for n in fn:
            p = os.path.join(dp, n)
            if n == name: named.append(p)
            if n == name or "/.swe" in p: look(p)
print("HITS", hits)
print("NAMED", sorted(set(named)))
print("PROBE-DONE")
"""


def _check(res: CommandResult) -> None:
    assert res.output.rstrip().endswith("PROBE-DONE"), res
    for line in res.output.splitlines():
        if line.startswith("CMD "):
            _, cmd, code, leaked = line.split()
            # a folder's names can be listed (they are the workspace's own); no file can be read
            assert leaked == "False" and (cmd == "ls" or code != "0"), line
    assert "HITS []" in res.output, res.output
    named = eval(next(line for line in res.output.splitlines() if line.startswith("NAMED "))[6:])  # noqa: S307
    # names can be listed everywhere (a folder's names are the workspace's own): the search saw the
    # workspace's copy, so it is not blind, and could read no other
    assert any(p.startswith("/workspace/tests/") for p in named), named
    assert any("/.swe/" in p for p in named), "the walk never reached the template: it proves nothing"


async def test_no_shell_reads_the_template(harness, repo):
    async with harness.session(harness.spec(repo_path=repo, base_commit=None)) as sb:
        # the agent's copy no longer holds the pristine text: any copy that does is the template's
        res = await sh(sb, f"sed -i 's/{MARK}/changed/' tests/{MODULE} && grep -c changed tests/{MODULE}")
        assert res.output.strip() == "1", res
        _check(await py(sb, PROBE, timeout=240))
        # what a graded run sees: the isolated shell, walled off the same way
        blob = base64.b64encode(PROBE.encode()).decode()
        _check(await sb.run_isolated(f"python3 -c \"import base64;exec(base64.b64decode('{blob}'))\"", 240, 1 << 20))
        # ... while the runtime still reads the template: the diff is against it
        d = await sb.diff_exact(0)
        assert f"-    \"\"\"{MARK}\"\"\"" in d.text and '+    """changed"""' in d.text, d.text


async def test_the_probe_finds_the_template_where_no_landlock_walls_it(harness, repo):
    """The probe is not blind: without the Landlock layer (policy off: the documented limit) it
    finds the pristine module under /.swe/template and through /proc/<pid>/root."""
    spec = harness.spec(repo_path=repo, base_commit=None)
    async with harness.session(spec, policy={"landlock": LayerMode.off}) as sb:
        await sh(sb, f"sed -i 's/{MARK}/changed/' tests/{MODULE}")
        res = await py(sb, PROBE, timeout=240)
        assert res.output.rstrip().endswith("PROBE-DONE"), res
        hits = next(line for line in res.output.splitlines() if line.startswith("HITS "))
        assert f"/.swe/template/tests/{MODULE}" in hits and "/root/.swe/template/" in hits, hits


async def test_shells_still_read_the_system_and_the_workspace(harness, repo):
    """The read wall is around /.swe only: tools, the environment, /proc, pipes and the workspace work."""
    async with harness.session(harness.spec(repo_path=repo, base_commit=None)) as sb:
        res = await sh(sb, "cat <(echo piped) && head -c4 /proc/self/status && ls /usr/bin | grep -cx bash && "
                           "python3 -c 'import json, sqlite3; print(\"stdlib\")' && git log --oneline | wc -l && "
                           "ls /tmp /dev/null >/dev/null && grep -c root /etc/passwd && ls / && "
                           "(cat /.swe/template/pkg/__init__.py 2>&1; true)")
        out = res.output
        assert res.ok and "piped" in out and "Name" in out and "stdlib" in out, res
        assert "workspace" in out.split() and "usr" in out.split(), out  # / lists as usual
        assert "Permission denied" in out and "def f" not in out, out  # the template's files stay unread
