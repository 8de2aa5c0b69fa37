"""Git history beyond the base commit is gone: refs, reflog, stash, remotes, objects."""

from __future__ import annotations

from sandbox_support import PY_MARK, assert_done, assert_no_secret, make_secret_repo, py, sh
from support.git_repos import git


async def test_git_log_all_reflog_stash_show_one_commit(harness):
    async with harness.session() as sb:
        res = await sh(sb, "git rev-list --all --reflog | wc -l")
        assert res.ok and res.output.strip() == "1", res
        res = await sh(sb, "git log --all --reflog --oneline; git reflog --all; git stash list; "
                           "git branch -a; git tag -l; git remote -v; git notes list; "
                           "git show-ref; git for-each-ref; cat .git/packed-refs .git/ORIG_HEAD "
                           ".git/FETCH_HEAD .git/logs/HEAD .git/refs/stash 2>&1; echo PROBE-DONE")
        assert_done(res)
        assert_no_secret(res.output)
        refs = await sh(sb, "git for-each-ref --format='%(refname)'")
        assert refs.output.split() == ["refs/heads/main"], refs.output
        for what in ("ORIG_HEAD", "FETCH_HEAD", "refs/stash", "packed-refs", "logs"):
            r = await sh(sb, f"test -e .git/{what} && echo PRESENT; echo PROBE-DONE")
            assert_done(r)
            assert "PRESENT" not in r.output, what


async def test_git_objects_of_other_commits_unreachable_by_sha(harness):
    """The host knows the shas of every secret commit/blob; none resolves inside."""
    shas = " ".join(harness.repo.secret_objects.values())
    async with harness.session() as sb:
        res = await sh(sb, f"for s in {shas}; do git cat-file -e $s 2>/dev/null && "
                           f"{{ echo FOUND $s; git cat-file -p $s; }}; done; "
                           f"git cat-file -p {harness.repo.base_commit} 2>&1; echo done")
        assert res.output.rstrip().endswith("done"), res
        assert "FOUND" not in res.output, res.output
        assert_no_secret(res.output)


async def test_git_batch_all_objects_fsck_and_packs_hold_no_secret(harness):
    async with harness.session() as sb:
        res = await sh(sb, "git cat-file --batch-all-objects --batch; "
                           "git fsck --full --lost-found --unreachable --dangling --no-reflogs 2>&1; "
                           "ls .git/lost-found/*/ 2>/dev/null | head; cat .git/lost-found/*/* 2>/dev/null; "
                           "for p in .git/objects/pack/*.idx; do [ -e \"$p\" ] && git verify-pack -v \"$p\"; done; "
                           "git count-objects -v; echo PROBE-DONE", timeout=60)
        assert_done(res)
        assert "unreachable" not in res.output and "dangling" not in res.output, res.output
        assert_no_secret(res.output)
        res = await py(sb, f"""
            import os, zlib
            mark, hits = {PY_MARK}.encode(), []
            for dp, dn, fn in os.walk(".git"):
                for n in fn:
                    data = open(os.path.join(dp, n), "rb").read()
                    try: data += zlib.decompress(data)
                    except Exception: pass
                    if mark in data: hits.append(os.path.join(dp, n))
            alt = ".git/objects/info/alternates"
            print("ALT", open(alt).read() if os.path.exists(alt) else None)
            print("HITS", hits)
        """)
        assert "HITS []" in res.output and "ALT None" in res.output, res.output


async def test_git_restore_does_not_bring_back_purged_files(harness):
    """The planted caches were committed in the base commit: git must not restore them."""
    async with harness.session() as sb:
        res = await sh(sb, "git ls-tree -r --name-only HEAD; git checkout -- . 2>&1; git restore . 2>&1; "
                           "git reset -q --hard 2>&1; git stash pop 2>&1; git checkout ORIG_HEAD 2>&1; "
                           "git checkout HEAD~1 2>&1; git checkout fix 2>&1; git checkout v1 2>&1; ls -a . pkg dist; "
                           "echo PROBE-DONE")
        assert_done(res)
        assert "__pycache__" not in res.output and ".pyc" not in res.output, res.output
        assert ".mypy_cache" not in res.output and "secret.zip" not in res.output, res.output
        res = await sh(sb, 'python3 -c "import pkg.core; print(pkg.core.feature())" 2>&1; cat pkg/core.py; '
                           'echo PROBE-DONE')
        assert_done(res)
        assert_no_secret(res.output)


async def test_git_remote_and_host_repo_unreachable(harness):
    remote, repo = harness.repo.remote_path, harness.repo.path
    async with harness.session() as sb:
        res = await sh(sb, f"git config -l; git fetch {remote} 2>&1; git fetch origin 2>&1; "
                           f"git ls-remote {remote} 2>&1; git ls-remote {repo} 2>&1; "
                           f"ls {repo} {remote} 2>&1; git log --all --oneline; echo PROBE-DONE")
        assert_done(res)
        assert "remote." not in res.output.split("fatal")[0], res.output
        assert str(remote) not in res.output.split("\n")[0], res.output
        assert_no_secret(res.output)
        count = await sh(sb, "git rev-list --all | wc -l")
        assert count.output.strip() == "1", count


async def test_git_history_squashed_when_directory_taken_as_is(harness, tmp_path):
    """base_commit=None: the tree as it is, still with no history."""
    repo = make_secret_repo(tmp_path)
    spec = harness.spec(repo_path=repo.path, base_commit=None)
    shas = " ".join(repo.secret_objects.values())
    async with harness.session(spec) as sb:
        res = await sh(sb, f"git rev-list --all --reflog | wc -l; for s in {shas}; do git cat-file -e $s 2>/dev/null "
                           f"&& echo FOUND $s; done; git stash list; git remote -v; "
                           f"python3 -c 'import pkg.helpers as h; print(h.helper())'; ls pkg; echo PROBE-DONE")
        assert_done(res)
        lines = res.output.splitlines()
        assert lines and lines[0].strip() == "1", res.output
        assert "FOUND" not in res.output and "__pycache__" not in res.output, res.output
        assert_no_secret(res.output)
    # the host repository itself was not modified by preparing the workspace
    assert "WIP" in git(repo.path, "stash", "list")
