"""`trainer-client evaluate` killed mid-run (SIGKILL to its process group) and run again: the
rerun finishes the evaluation, keeps what was finished and runs only what was missing; a rerun
with other settings is refused; `--fresh` starts over."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

from eval_support import ROOT, cli_argv, cli_env, report, result_lines, trainer_client
from support.policy_double import PolicyDouble

from env_client import read_jsonl

SAMPLES = 3


def test_resume_after_kill_runs_only_the_missing_episodes(env_url: str, gold_tasks_file: Path, gold_rows,
                                                          tmp_path: Path):
    out = tmp_path / "out"
    total = len(gold_rows) * SAMPLES
    with PolicyDouble(gold_tasks_file, "gold", tmp_path, delay=0.4) as double:
        args = ["evaluate", "--model", double.base_url, "--env-url", env_url, "--tasks", gold_tasks_file,
                "--samples", SAMPLES, "--concurrency", 2, "--out", out]
        log = open(tmp_path / "first-run.log", "w")
        proc = subprocess.Popen(cli_argv(*args), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=cli_env(),
                                start_new_session=True)
        try:
            deadline = time.monotonic() + 120
            while len(result_lines(out)) < 2:
                assert proc.poll() is None, (tmp_path / "first-run.log").read_text()
                assert time.monotonic() < deadline, "no two results within 120 s"
                time.sleep(0.05)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
            log.close()
        assert proc.returncode == -signal.SIGKILL
        before = {(r["instance_id"], r["sample"]): r["episode_id"] for r in result_lines(out)}
        assert 2 <= len(before) < total, "killed mid-run: some finished, some not"
        time.sleep(0.5)  # a request the killed run sent just before dying is counted before, not after
        stats_killed = double.stats()

        again = trainer_client(*args)
        assert again.returncode == 0, again.stderr[-3000:]
        stats_rerun = double.stats()

        lines = result_lines(out)
        keys = Counter((r["instance_id"], r["sample"]) for r in lines)
        assert keys == Counter({(row["instance_id"], s): 1 for row in gold_rows for s in range(SAMPLES)}), \
            "every (instance, sample) exactly once"
        after = {(r["instance_id"], r["sample"]): r["episode_id"] for r in lines}
        assert all(after[k] == before[k] for k in before), "episodes finished before the kill are kept, not rerun"
        assert all(r["status"] == "resolved" for r in lines)
        assert f"{len(before)} episodes already in" in again.stderr

        # the double saw only the missing episodes again: two requests (patch, submit) each
        missing = Counter(k[0] for k in after if k not in before)
        assert stats_rerun["requests"] - stats_killed["requests"] == 2 * sum(missing.values())
        for row in gold_rows:
            iid = row["instance_id"]
            delta = stats_rerun["by_instance"].get(iid, 0) - stats_killed["by_instance"].get(iid, 0)
            assert delta == 2 * missing[iid], iid

        rollouts = read_jsonl(out / "rollouts.jsonl")
        assert sorted(r.episode_id for r in rollouts) == sorted(after.values()), \
            "one rollout per reported episode (none of an episode cut by the kill)"
        assert report(out)["summary"]["overall"]["scored"] == total

        # other settings in the same --out: refused, nothing touched
        changed = trainer_client(*[a if a != SAMPLES else 2 for a in args])
        assert changed.returncode == 1
        err = changed.stderr.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err
        assert err.startswith("trainer-client evaluate: error:"), err
        assert "other settings (samples)" in err and "--fresh" in err, err
        assert result_lines(out) == lines

        # --fresh: the earlier results go, the run starts over with the new settings
        stats_before_fresh = double.stats()
        fresh = trainer_client(*[a if a != SAMPLES else 1 for a in args], "--fresh")
        assert fresh.returncode == 0, fresh.stderr[-3000:]
        new = result_lines(out)
        assert sorted((r["instance_id"], r["sample"]) for r in new) == sorted(
            (row["instance_id"], 0) for row in gold_rows)
        assert not {r["episode_id"] for r in new} & set(after.values()), "every episode run again"
        assert double.stats()["requests"] - stats_before_fresh["requests"] == 2 * len(gold_rows)
        assert json.loads((out / "eval_config.json").read_text())["samples"] == 1
        assert len(read_jsonl(out / "rollouts.jsonl")) == len(gold_rows)
        assert report(out)["summary"]["samples_per_task"] == 1
