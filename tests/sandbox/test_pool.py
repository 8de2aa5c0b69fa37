"""The warm pool (sandbox/pool.py): pre-started jails, handed out once, bounded, and as fresh as cold ones.

Real jails throughout; the suite's conftest checks after each test that no process is left.
Most tests run on bwrap only (the pool's logic does not depend on the backend); the leftovers
probe runs on every backend.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import uuid

import pytest

from sandbox import SandboxStartError, WarmPool, WorkspaceError
from sbxlib import DONE, assert_done, host_procs, py, runtime_pids, sh, wait_no_procs

BWRAP_ONLY = pytest.mark.parametrize("backend", ["bwrap"], indirect=True, scope="session")


def idle_boxes(pool: WarmPool) -> list:
    return [box for k in pool._keys.values() for box, _ in k.idle]


async def wait_for(predicate, seconds: float = 30.0, what: str = "condition") -> None:
    for _ in range(int(seconds / 0.02)):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@BWRAP_ONLY
async def test_concurrent_claims_get_distinct_working_jails_and_close_leaves_nothing(harness):
    baseline = set(host_procs())
    spec, config = harness.spec(), harness.config()
    pool = WarmPool(4)
    assert pool.per_key == 4
    assert await pool.warm(spec, config) == 4
    boxes = await asyncio.gather(*(pool.open(spec, config) for _ in range(16)))
    try:
        stats = pool.stats()
        assert stats["claims_warm"] == 4 and stats["claims_cold"] == 12, stats
        assert len({id(b) for b in boxes}) == 16 and len({b.id for b in boxes}) == 16, [b.id for b in boxes]
        assert len({b._proc.pid for b in boxes}) == 16  # sixteen jails, not sixteen handles on fewer
        assert not {b.id for b in boxes} & {b.id for b in idle_boxes(pool)}, "a claimed jail is still in the pool"
        # each one works, and is its own: a token written in one is not in any other
        await asyncio.gather(*(sh(b, f"echo {i} > /tmp/me-{i}") for i, b in enumerate(boxes)))
        seen = await asyncio.gather(*(sh(b, "cat /tmp/me-*") for b in boxes))
        for i, res in enumerate(seen):
            assert res.ok and res.output.split() == [str(i)], (i, res)
        assert len(runtime_pids()) >= 16
    finally:
        await asyncio.gather(*(b.close() for b in boxes))
        await pool.close()
    assert pool.stats()["idle"] == pool.stats()["starting"] == 0, pool.stats()
    assert not wait_no_procs(baseline), "the pool left processes behind"
    # a closed pool still opens (cold), and keeps nothing
    async with await pool.open(spec, config) as sb:
        assert (await sh(sb, "echo ok")).output.strip() == "ok"
    assert pool.stats()["idle"] == 0


@BWRAP_ONLY
@pytest.mark.parametrize("delay", [0.0, 0.03, 0.08])  # before the starts run, in prepare/launch, in handshake
async def test_close_cancels_starts_in_flight_and_leaves_nothing(harness, delay):
    baseline = set(host_procs())
    spec, config = harness.spec(), harness.config()
    pool = WarmPool(3, close_grace_s=0.0)  # no grace: starts in flight are cancelled mid-way
    assert pool.prime(spec, config) == 3
    await asyncio.sleep(delay)
    keys = list(pool._keys.values())
    await pool.close()
    assert [(len(k.idle), k.starting) for k in keys] == [(0, 0)], "close() left jails counted"
    assert not wait_no_procs(baseline), "a cancelled start left processes behind"
    assert pool.prime(spec, config) == 0  # closed: starts nothing


@BWRAP_ONLY
async def test_a_jail_that_died_idle_is_never_handed_out(harness):
    spec, config = harness.spec(), harness.config()
    async with WarmPool(2) as pool:
        assert await pool.warm(spec, config) == 2
        victim = idle_boxes(pool)[0]
        os.kill(victim._proc.pid, 9)  # the jail dies (its runtime with it: --die-with-parent)
        await wait_for(lambda: not victim.alive, what="the event loop to see the jail die")
        a = await pool.open(spec, config)
        b = await pool.open(spec, config)
        try:
            assert victim not in (a, b) and victim.id not in (a.id, b.id)
            for sb in (a, b):
                assert (await sh(sb, "echo ok")).output.strip() == "ok"
            stats = pool.stats()
            assert stats["discarded_dead"] == 1 and stats["claims_warm"] == 1 and stats["claims_cold"] == 1, stats
        finally:
            await a.close()
            await b.close()


@BWRAP_ONLY
async def test_an_idle_jail_past_its_age_is_replaced(harness):
    spec, config = harness.spec(), harness.config()
    async with WarmPool(1, max_idle_s=1.0) as pool:  # the janitor sweeps every 0.25 s
        assert await pool.warm(spec, config) == 1
        old = idle_boxes(pool)[0]
        await asyncio.sleep(0.6)
        pool.prime(spec, config)  # the key is in use: an expired jail of it is replaced
        await wait_for(lambda: pool.stats()["expired"] >= 1, 5, "the old jail to expire")
        await wait_for(lambda: pool.stats()["idle"] == 1, 30, "its replacement")
        assert not old.alive
        async with await pool.open(spec, config) as sb:
            assert sb is not old and sb.id != old.id
            assert (await sh(sb, "echo ok")).output.strip() == "ok"
        assert pool.stats()["claims_warm"] == 1, pool.stats()


@BWRAP_ONLY
async def test_bounded_over_keys_and_least_recently_used_key_evicted(harness):
    config = harness.config()
    a, b, c = (harness.spec(env={"POOL_KEY": name}) for name in "abc")  # three keys, one template
    pool = WarmPool(3, per_key=2)
    peak, sampling = [0], [True]

    def check() -> None:
        s = pool.stats()
        peak[0] = max(peak[0], s["idle"] + s["starting"])
        assert s["idle"] + s["starting"] <= 3, s

    async def sampler() -> None:
        while sampling[0]:
            check()
            await asyncio.sleep(0.002)

    watch = asyncio.create_task(sampler())
    try:
        assert pool.prime(a, config, 2) == 2
        assert pool.prime(b, config, 1) == 1  # the last slot; a's jails are starting, not idle: no eviction
        assert pool.prime(c, config, 2) == 0
        check()
        assert await pool.warm(a, config) == 2 and await pool.warm(b, config) == 1
        assert pool.stats()["idle"] == 3 and pool.stats()["evicted"] == 0, pool.stats()
        # c needs two: the least recently used other key (a) gives up its idle jails, b keeps its own
        assert await pool.warm(c, config) == 2
        assert pool.stats()["evicted"] == 2, pool.stats()
        sb = await pool.open(b, config)  # still warm
        await sb.close()
        assert pool.stats()["claims_warm"] == 1, pool.stats()
        sb = await pool.open(a, config)  # evicted: cold
        await sb.close()
        assert pool.stats()["claims_cold"] == 1, pool.stats()
        await pool.warm(a, config)
        check()
    finally:
        sampling[0] = False
        await watch
        await pool.close()
    assert peak[0] == 3, peak


@BWRAP_ONLY
async def test_a_failed_background_start_is_counted_and_the_claim_starts_cold(harness, tmp_path, caplog):
    repo = tmp_path / "repo"
    shutil.copytree(harness.repo.path, repo, symlinks=True)
    spec, config = harness.spec(repo_path=repo, base_commit=harness.repo.base_commit), harness.config()
    caplog.set_level(logging.WARNING, logger="sandbox.pool")
    async with WarmPool(2, per_key=1) as pool:
        assert await pool.warm(spec, config) == 1
        shutil.rmtree(repo)  # the task's repository is gone: the refill after the next claim fails
        async with await pool.open(spec, config) as sb:  # the jail started before still serves
            assert (await sh(sb, "echo ok")).output.strip() == "ok"
            await wait_for(lambda: pool.stats()["start_failures"] == 1, 30, "the refill to fail")
        assert pool.stats()["claims_warm"] == 1
        assert "background start" in caplog.text and "not a directory" in caplog.text, caplog.text
        with pytest.raises((WorkspaceError, SandboxStartError), match="not a directory"):
            await pool.open(spec, config)  # cold, and it raises as open_sandbox does
        stats = pool.stats()
        assert stats["claims_cold"] == 1 and stats["idle"] == stats["starting"] == 0, stats
        assert stats["start_failures"] == 1, "a failing key must not be refilled in a loop"


# ---------------------------------------------------------------- leftovers
async def test_leftovers_of_one_claim_never_reach_the_next(harness):
    """Episode 1 on a pooled jail plants files, a detached process, environment and git state,
    then closes; the next claim on the key (the jail the refill started right after the first
    claim, idle beside episode 1 all along) sees none of it."""
    tail = uuid.uuid4().hex[:10]
    token, sh_token = "LEFT" + "OVER-" + tail, '"LEFT""OVER-' + tail + '"'  # commands never spell it whole
    sleeper = str(770000 + os.getpid() % 10000)
    spec = harness.spec()
    config = harness.config(policy={"kill_background": False})  # the detached sleeper outlives its command

    def sleeping() -> list[str]:  # on the host
        return [cmd for cmd in host_procs(sleeper).values() if sleeper in cmd]
    async with WarmPool(1, per_key=1) as pool:
        assert await pool.warm(spec, config) == 1
        ep1 = await pool.open(spec, config)
        try:
            res = await sh(ep1, f"""
                T={sh_token}
                for d in /tmp /workspace "$HOME" /dev/shm; do echo "$T" > "$d/left.txt" && echo "PLANTED $d"; done
                mkdir -p "$HOME/.config" && echo "$T" > "$HOME/.config/left" && echo PLANTED config
                export SWE_LEFTOVER="$T"
                (setsid nohup bash -c 'exec -a "$0" sleep {sleeper}' "left-$T" >/dev/null 2>&1 &)
                echo "$T" > .git/left.txt && echo "$T" >> pkg/core.py && git add -A &&
                  git -c user.name=x -c user.email=x@x commit -qm "$T" && git tag left-tag &&
                  git branch left-branch && git config user.email "$T" && echo PLANTED git
                echo {DONE}""")
            assert_done(res)
            for where in ("/tmp", "/workspace", "PLANTED config", "PLANTED git"):
                assert where in res.output, f"probe broken: could not plant in {where}: {res.output}"
            res = await sh(ep1, "echo $SWE_LEFTOVER; sleep 0.2; cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '")
            assert res.output.count(token) >= 2 and sleeper in res.output, f"probe broken: {res.output}"
            assert sleeping(), "probe broken: the sleeper is not visible on the host"
        finally:
            await ep1.close()
        assert await pool.warm(spec, config) == 1  # the refill the first claim scheduled
        async with await pool.open(spec, config) as ep2:
            assert pool.stats()["claims_warm"] == 2, pool.stats()
            assert ep2 is not ep1 and ep2.id != ep1.id
            res = await py(ep2, f"""
                import os, subprocess
                tok, hits = ("LEFT" + "OVER-{tail}").encode(), []
                for root in ("/tmp", "/workspace", os.environ.get("HOME", "/tmp"), "/dev/shm"):
                    for dp, dn, fn in os.walk(root):
                        for n in fn + dn:
                            p = os.path.join(dp, n)
                            try:
                                if n.startswith("left") or (os.path.isfile(p) and tok in open(p, "rb").read()):
                                    hits.append(p)
                            except OSError as e:
                                hits.append((p, e.errno))
                for pid in filter(str.isdigit, os.listdir("/proc")):
                    for f in ("cmdline", "environ"):
                        try: data = open("/proc/%s/%s" % (pid, f), "rb").read()
                        except OSError: continue
                        if tok in data or b"{sleeper}" in data or b"SWE_LEFTOVER" in data: hits.append((pid, f))
                hits += [k for k, v in os.environ.items() if "LEFTOVER" in k or tok.decode() in v]
                git = lambda *a: subprocess.run(["git", *a], capture_output=True, text=True).stdout.split()
                print("HITS", hits)
                print("REFS", git("for-each-ref", "--format=%(refname)"), "COMMITS", len(git("rev-list", "--all")))
                print("EMAIL", git("config", "--get", "user.email"), "STATUS", git("status", "--porcelain"))
                print("{DONE}")
            """)
            assert_done(res)
            assert "HITS []" in res.output, f"episode 1 left something for the next claim: {res.output}"
            assert "REFS ['refs/heads/main'] COMMITS 1" in res.output, res.output
            assert "EMAIL [] STATUS []" in res.output, res.output
            assert (await ep2.diff()) == ""
            env = await sh(ep2, "env")
            assert "SWE_LEFTOVER" not in env.output and token not in env.output, env.output
        assert not sleeping(), "episode 1's detached process outlived its jail"
