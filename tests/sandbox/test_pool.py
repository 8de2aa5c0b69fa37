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
import time
import uuid

import pytest

from sandbox import SandboxStartError, WarmPool, WorkspaceError
from sandbox_support import DONE, assert_done, host_procs, py, runtime_pids, sh, wait_no_procs

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


class _StartLog:
    """Every ``open_sandbox`` the pool makes, timed (the real call; ``slow`` adds a pause before the
    calls whose number it names, as a busy machine's slow start would)."""

    def __init__(self, monkeypatch, slow: dict[int, float] | None = None) -> None:
        import sandbox.pool as pool_module

        self.calls: list[dict] = []
        real, slow = pool_module._open, slow or {}

        async def timed(spec, config):
            call = {"n": len(self.calls), "begin": time.monotonic(), "end": None,
                    "background": not getattr(asyncio.current_task(), "_claim", False)}
            self.calls.append(call)
            await asyncio.sleep(slow.get(call["n"], 0.0))
            try:
                return await real(spec, config)
            finally:
                call["end"] = time.monotonic()

        monkeypatch.setattr(pool_module, "_open", timed)


async def _claim(pool: WarmPool, spec, config):
    asyncio.current_task()._claim = True  # marks this task's calls for _StartLog
    return await pool.open(spec, config)


@BWRAP_ONLY
async def test_a_claim_never_waits_behind_a_refill_and_refills_wait_for_claims(harness, monkeypatch):
    """A claim that finds nothing warm starts cold at once while another key's jails are being
    started; no background start begins while a cold claim runs, nor within refill_delay_s of the
    last claim; background starts run refill_parallel at a time."""
    import sandbox.pool as pool_module

    monkeypatch.setattr(pool_module, "MAX_REFILL_DEFER_S", 120.0)  # a slow machine's starts defer no start here
    starts = _StartLog(monkeypatch)
    config = harness.config()
    a, b = harness.spec(env={"POOL_KEY": "a"}), harness.spec(env={"POOL_KEY": "b"})
    async with WarmPool(6, per_key=4, refill_parallel=1, refill_delay_s=0.3) as pool:
        assert pool.prime(a, config) == 4  # four background starts, one at a time
        await wait_for(lambda: len(starts.calls) >= 1, 10, "the first background start")
        sbs = await asyncio.gather(*(asyncio.create_task(_claim(pool, b, config)) for _ in range(3)))
        try:
            claims = [c for c in starts.calls if not c["background"]]
            assert len(claims) == 3, starts.calls
            first_claim = min(c["begin"] for c in claims)
            last_claim_end = max(c["end"] for c in claims)
            background = [c for c in starts.calls if c["background"]]
            # the claims began at once: no background start was waited for, whatever was running
            assert all(c["begin"] - first_claim < 0.05 for c in claims), claims
            # while they ran, no background start began
            assert not [c for c in background if first_claim <= c["begin"] <= last_claim_end], starts.calls
            await pool.warm(a, config)
            await wait_for(lambda: pool.stats()["starting"] == 0, 30, "the refills")
            background = [c for c in starts.calls if c["background"]]
            later = [c for c in background if c["begin"] > last_claim_end]
            assert later and min(c["begin"] for c in later) - last_claim_end >= 0.3 - 0.01, starts.calls
            spans = sorted((c["begin"], c["end"]) for c in background)
            assert all(spans[i][1] <= spans[i + 1][0] + 0.005 for i in range(len(spans) - 1)), spans  # one at a time
            stats = pool.stats()
            assert stats["claims_cold"] == 3 and stats["claims_warm"] == 0, stats
            for sb in sbs:
                assert (await sh(sb, "echo ok")).output.strip() == "ok"
        finally:
            await asyncio.gather(*(sb.close() for sb in sbs))


@BWRAP_ONLY
async def test_a_claim_takes_a_start_already_running_when_it_ends_first(harness, monkeypatch):
    """Nothing idle, a background start of the key running: the claim races a cold start against it
    and takes whichever ends first (here the running one: the cold start is slowed); the cold start
    that lost is kept warm, not killed, and nothing is handed out twice."""
    starts = _StartLog(monkeypatch, slow={1: 1.5})  # call 0: the background start; call 1: the claim's
    spec, config = harness.spec(), harness.config()
    async with WarmPool(2, per_key=1, refill_delay_s=0.0) as pool:
        assert pool.prime(spec, config) == 1
        await wait_for(lambda: pool._keys and next(iter(pool._keys.values())).running == 1, 10, "a running start")
        sb = await _claim(pool, spec, config)
        try:
            assert pool.stats()["claims_raced"] == 1 and pool.stats()["claims_cold"] == 0, pool.stats()
            assert starts.calls[0]["end"] is not None and starts.calls[1]["end"] is None  # served by the first
            await wait_for(lambda: pool.stats()["idle"] == 1 and pool.stats()["starting"] == 0, 30,
                           "the losing cold start to become idle")
            other = idle_boxes(pool)[0]
            assert other is not sb and other.id != sb.id and other.alive
            assert (await sh(sb, "echo ok")).output.strip() == "ok"
        finally:
            await sb.close()


@BWRAP_ONLY
async def test_a_burst_larger_than_the_share_is_served_and_the_share_follows_it(harness, monkeypatch):
    """A key first claimed once is kept at one jail; a burst of six at once (more than it holds) gets
    six distinct working jails, and the key is then kept at six (up to per_key): the share follows
    the group's size, and typical_burst says it for the task that comes next."""
    import sandbox.pool as pool_module

    monkeypatch.setattr(pool_module, "BURST_WINDOW_S", 0.5)  # claims 0.5 s apart are two bursts
    spec, config = harness.spec(), harness.config()
    async with WarmPool(8, per_key=8, refill_delay_s=0.05) as pool:
        sb = await pool.open(spec, config)
        await sb.close()
        await wait_for(lambda: pool.stats()["idle"] == 1 and pool.stats()["starting"] == 0, 30, "one jail")
        await asyncio.sleep(0.6)
        assert pool.stats()["idle"] == 1, pool.stats()  # one claim: one jail kept, not per_key
        assert pool.typical_burst() == 1
        boxes = await asyncio.gather(*(pool.open(spec, config) for _ in range(6)))
        try:
            assert len({b.id for b in boxes}) == 6
            outs = await asyncio.gather(*(sh(b, "echo ok") for b in boxes))
            assert [o.output.strip() for o in outs] == ["ok"] * 6
            stats = pool.stats()
            assert stats["claims_warm"] == 1 and stats["claims_cold"] + stats["claims_raced"] == 1 + 5, stats
            assert pool.typical_burst() == 6
            await wait_for(lambda: pool.stats()["idle"] == 6 and pool.stats()["starting"] == 0, 60, "six jails")
        finally:
            await asyncio.gather(*(b.close() for b in boxes))


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
