"""One of two env server replicas killed (SIGKILL to its process group) while an evaluation runs:
the episodes it held are retried on the live one, so every episode still ends scored and
resolved; none is reported as a 0 because of the kill."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

from eval_support import result_lines, run_eval

from support.servers import start_server_process
from support.policy_double import PolicyDouble

from env_client.processes import signal_group

SAMPLES = 2  # 6 episodes at concurrency 4: b holds some in flight when the first result is in


def test_a_replica_killed_mid_run_loses_no_episode(gold_tasks_file: Path, gold_rows, tmp_path: Path):
    total = len(gold_rows) * SAMPLES
    out = tmp_path / "out"
    a = start_server_process(gold_tasks_file, tmp_path / "data-a")
    b = start_server_process(gold_tasks_file, tmp_path / "data-b")
    killed: list[int] = []
    stop = threading.Event()

    def kill_b() -> None:
        """Once the run is under way (a result is in), SIGKILL b while an episode is in flight
        there: its trace (b's data dir) holds the reset but no final (done) step yet."""
        while not stop.is_set():
            if result_lines(out) and any('"done":true' not in p.read_text(encoding="utf-8")
                                         for p in (tmp_path / "data-b" / "traces").glob("*.jsonl")):
                signal_group(b.proc, signal.SIGKILL)
                killed.append(len(result_lines(out)))
                return
            time.sleep(0.02)

    watcher = threading.Thread(target=kill_b, daemon=True)
    try:
        with PolicyDouble(gold_tasks_file, "gold", tmp_path, delay=0.3) as double:
            watcher.start()
            summary = run_eval([a.url, b.url], gold_tasks_file, double.base_url, out, samples=SAMPLES,
                               concurrency=4, retry_backoff_s=0.2, max_attempts=3)
    finally:
        stop.set()
        watcher.join(10)
        a.stop()
        b.stop()
    assert killed and 1 <= killed[0] < total, "the replica was killed while episodes were left to run"
    assert b.returncode is not None and b.returncode < 0, "replica b died of the SIGKILL"

    results = result_lines(out)
    assert len(results) == total
    lost = [r for r in results if r["status"] == "lost"]
    assert all(r["reward"] is None and r["lost_reasons"] for r in lost), "a lost episode is never scored"
    assert not lost, f"three attempts with a live replica left should not lose an episode: {lost}"
    assert all(r["status"] == "resolved" and r["reward"] == 1.0 for r in results), \
        [(r["instance_id"], r["sample"], r["status"], r["lost_reasons"]) for r in results if r["status"] != "resolved"]
    retried = [r for r in results if r["attempts"] > 1]
    assert retried, "some episode was on the killed replica and was retried"
    assert all(len(r["lost_reasons"]) == r["attempts"] - 1 and all(x.startswith("env") for x in r["lost_reasons"])
               for r in retried), [r["lost_reasons"] for r in retried]
    host_a = a.url.split("//")[1]
    assert all(host_a in r["replica"] for r in retried), "the retry ran on the live replica"

    o = summary["overall"]
    assert (o["scored"], o["lost"], o["resolved_rate"]) == (total, 0, 1.0)
    assert summary["retried_episodes"] == len(retried)
