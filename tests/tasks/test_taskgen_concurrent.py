"""Two ``task-factory build`` runs at once on one fresh cache both succeed (task_factory/cache.py).

Before the cache had one lock discipline, one run removed the venv the other was building ("Could
not locate Python interpreter .../envs/<key>/bin/python") or the work tree it was judging in. The
fresh cache is seeded with the sdist and the wheels only (no index is asked); everything else (the
unpacked source, the venv, the work trees, the verdicts, the verifier's checks) the two runs build
side by side.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.taskpacks import PACK_DIR, build_small_pack

PACKAGE = "inflection-0.5.1"


@pytest.mark.usefixtures("bwrap")  # each task is checked by the verifier in bwrap: skips without it; fails under CI
def test_two_concurrent_builds_on_one_fresh_cache_both_succeed(tmp_path: Path) -> None:
    build_small_pack(3)  # downloads the sdist and wheels this fresh cache is seeded with
    cache = tmp_path / "cache"
    shutil.copytree(PACK_DIR / "cache" / "sdists" / PACKAGE, cache / "sdists" / PACKAGE)
    shutil.copytree(PACK_DIR / "cache" / "wheels", cache / "wheels")
    cmd = [sys.executable, "-m", "task_factory", "build", "--packages", "inflection", "--max-tasks", "1",
           "--min-tasks", "1", "--cache-dir", str(cache), "--quiet"]
    runs = [subprocess.Popen([*cmd, "--out", str(tmp_path / f"out{i}")], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True) for i in (0, 1)]
    outputs = [run.communicate(timeout=600)[0] for run in runs]
    for run, out in zip(runs, outputs, strict=True):
        assert run.returncode == 0, out
        assert "1 task(s)" in out and "check: bwrap" in out and "ok" in out, out
    assert (tmp_path / "out0" / "tasks.jsonl").read_text() == (tmp_path / "out1" / "tasks.jsonl").read_text()
    # one venv, built once and complete; no private build folder left behind
    envs = sorted(p.name for p in (cache / "envs").iterdir())
    (env,) = [name for name in envs if (cache / "envs" / name).is_dir()]
    assert envs == [env, f"{env}.complete", f"{env}.lock"], envs
    assert not [p for p in cache.rglob(".*") if p.is_dir() and p.parent.name in ("envs", "src", "sdists")]
    # each run judged its candidates in a work tree of its own (or, one after the other, in the same one)
    assert {p.name for p in (cache / "work").iterdir() if p.is_dir()} <= {PACKAGE, f"{PACKAGE}-1"}


def test_an_entry_is_built_once_and_seen_only_complete(tmp_path: Path) -> None:
    """Eight threads ask for one entry at once: one builds it (in a private folder, renamed into
    place), the others wait for it and get it complete; a stale incomplete entry is replaced."""
    import threading
    import time

    from task_factory.cache import ensure_entry, marker_of

    dest = tmp_path / "envs" / "pkg-1"
    dest.mkdir(parents=True)
    (dest / "half-written").write_text("left by a run that died")  # no marker: incomplete
    builds: list[int] = []

    def make(work: Path) -> tuple[Path, str]:
        builds.append(1)
        time.sleep(0.3)  # the others ask meanwhile
        (work / "bin").mkdir()
        (work / "bin" / "python").write_text("#!/bin/sh\n")
        return work, "reqs\n"

    seen: list[set[str]] = []

    def ask() -> None:
        got = ensure_entry(dest, make)
        seen.append({p.name for p in got.iterdir()})

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert builds == [1] and seen == [{"bin"}] * 8
    assert marker_of(dest).read_text() == "reqs\n"
    assert sorted(p.name for p in dest.parent.iterdir()) == ["pkg-1", "pkg-1.complete", "pkg-1.lock"]


def test_a_work_slot_held_by_one_run_is_not_given_to_another(tmp_path: Path) -> None:
    from task_factory.cache import claim_slot

    with claim_slot(tmp_path, "pkg") as first, claim_slot(tmp_path, "pkg") as second:
        assert (first.name, second.name) == ("pkg", "pkg-1")
    with claim_slot(tmp_path, "pkg") as again:  # both free again: the first slot
        assert again.name == "pkg"
