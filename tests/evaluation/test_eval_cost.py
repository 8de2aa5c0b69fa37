"""A paid API, end to end through `trainer-client evaluate`: the policy double stands in for an
endpoint that wants a key, refuses vLLM's `return_token_ids` and bills every answer (`usage`).
One env replica is killed (SIGKILL) while the first episode runs on it, so that attempt is lost
after an answer was billed. The report's token and cost totals hold every attempt, the lost
one's share shown; the progress lines, report.png, report.json's hack counts and the Parquet
rollouts are checked on the same run."""

from __future__ import annotations

import importlib.util
import re
import signal
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from eval_support import MODEL, report, result_lines, trainer_client
from support.servers import start_server_process
from support.policy_double import PolicyDouble

from env_client import read_jsonl, read_parquet
from env_client.processes import free_port, signal_group

KEY_VAR = "SWE_EVAL_TEST_API_KEY"
KEY = "sk-test-0123456789"
PRICE_IN, PRICE_OUT = 2.5, 10.0  # USD per million tokens
PROGRESS = re.compile(r"^\[(\d+)/(\d+)\] (\S+) #0: (resolved|unresolved) in \d+ turns · resolved (\d+)/(\d+) "
                      r"\(\d+\.\d%\) · lost 0 · \d+\.\d episodes/min · ETA (\d+\.\d) min$")


def _cost(usage: dict) -> float:
    return (usage["prompt_tokens"] * PRICE_IN + usage["completion_tokens"] * PRICE_OUT) / 1e6


@pytest.fixture(scope="module")
def paid_run(env_url: str, gold_tasks_file: Path, tmp_path_factory: pytest.TempPathFactory):
    """The run: replicas [doomed, live]; the first episode opens on doomed (the pool's first
    choice), which is killed as soon as the double gets its first request, before it answers."""
    tmp = tmp_path_factory.mktemp("paid-run")
    out = tmp / "out"
    doomed = start_server_process(gold_tasks_file, tmp / "data-doomed")
    killed = threading.Event()
    stop = threading.Event()
    try:
        with PolicyDouble(gold_tasks_file, "gold", tmp, delay=0.5, logprobs=True, api_key=KEY,
                          reject_fields=("return_token_ids",)) as double:

            def kill_doomed() -> None:
                while not stop.is_set():
                    if double.stats()["requests"] >= 1:
                        signal_group(doomed.proc, signal.SIGKILL)
                        killed.set()
                        return
                    time.sleep(0.02)

            watcher = threading.Thread(target=kill_doomed, daemon=True)
            watcher.start()
            proc = trainer_client("evaluate", "--model", double.base_url, "--api-key-env", KEY_VAR,
                                  "--price-in", PRICE_IN, "--price-out", PRICE_OUT, "--logprobs", "--parquet",
                                  "--env-url", doomed.url, "--env-url", env_url, "--tasks", gold_tasks_file,
                                  "--concurrency", 1, "--max-attempts", 2, "--out", out, env={KEY_VAR: KEY})
            stop.set()
            watcher.join(10)
            requests = double.requests()
    finally:
        stop.set()
        doomed.stop()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert killed.is_set()
    return out, proc, requests, env_url


def test_the_key_reaches_the_endpoint_and_return_token_ids_is_dropped_once(paid_run):
    out, _, requests, _ = paid_run
    assert requests and all(r["authorized"] for r in requests), "every request carries Authorization: Bearer KEY"
    assert [r["status"] for r in requests].count(400) == 1 and requests[0]["status"] == 400
    assert "return_token_ids" in requests[0]["fields"] and "logprobs" in requests[0]["fields"]
    assert all("return_token_ids" not in r["fields"] and "logprobs" in r["fields"] for r in requests[1:]), \
        "refused once, never sent again; log-probs still asked"
    records = read_jsonl(out / "rollouts.jsonl")
    assert records and all(t.logprobs and t.token_ids is None for r in records for t in r.turns), \
        "log-probs kept; no token ids from an endpoint that does not return them"


def test_cost_and_tokens_count_every_attempt(paid_run, gold_rows):
    out, _, requests, live = paid_run
    answered = [r["usage"] for r in requests if r["status"] == 200]
    results = result_lines(out)
    assert len(results) == len(gold_rows) and all(r["status"] == "resolved" for r in results)
    (retried,) = [r for r in results if r["attempts"] > 1]
    assert retried["attempts"] == 2 and retried["lost_reasons"][0].startswith("env"), retried["lost_reasons"]
    assert live.split("//")[1] in retried["replica"], "the retry ran on the live replica"
    first = answered[0]  # the answer billed to the attempt lost with the killed replica
    assert retried["lost_usage"] == {"attempts": 1, "turns": 1, "prompt_tokens": first["prompt_tokens"],
                                     "completion_tokens": first["completion_tokens"],
                                     "cost_usd": pytest.approx(_cost(first))}

    s = report(out)["summary"]
    assert s["tokens"] == {"prompt": sum(u["prompt_tokens"] for u in answered),
                           "completion": sum(u["completion_tokens"] for u in answered)}, "every billed answer"
    assert s["cost_usd"] == pytest.approx(sum(_cost(u) for u in answered))
    assert s["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in results) + _cost(first))
    assert s["lost_attempts"] == retried["lost_usage"]
    md = (out / "report.md").read_text(encoding="utf-8")
    assert (f"cost ${s['cost_usd']:.4f}; of which 1 lost attempts (retried or lost episodes, never scored): "
            f"{first['prompt_tokens']} prompt + {first['completion_tokens']} completion tokens, "
            f"${_cost(first):.4f}") in md, md


def test_progress_lines_count_down_to_the_end(paid_run, gold_rows):
    _, proc, _, _ = paid_run
    n = len(gold_rows)
    lines = [m for m in map(PROGRESS.match, proc.stderr.splitlines()) if m]
    assert [int(m.group(1)) for m in lines] == list(range(1, n + 1)), proc.stderr
    assert all(int(m.group(2)) == n for m in lines)
    assert [(int(m.group(5)), int(m.group(6))) for m in lines] == [(k, k) for k in range(1, n + 1)]
    assert lines[-1].group(7) == "0.0", "nothing left: ETA 0"
    assert f"resolved {n}/{n} = 100.0%" in proc.stdout


def test_report_parts_png_hack_counts_and_parquet(paid_run):
    out, _, _, _ = paid_run
    png = out / "report.png"
    if importlib.util.find_spec("matplotlib") is not None:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert not png.exists()
    data = report(out)
    assert data["model_name"] == MODEL, "the model list was read with the key"
    s = data["summary"]
    assert (s["reward_hacking"], s["suspicious"], s["suspicious_reasons"]) == (0, 0, {})
    assert ("- reward_hacking (grading detected tampering, reward 0): 0; suspicious (monitor flags, reward "
            "unchanged): 0\n") in (out / "report.md").read_text(encoding="utf-8")

    jsonl = read_jsonl(out / "rollouts.jsonl")
    table = pq.read_table(out / "rollouts.parquet")
    assert table.num_rows == len(jsonl) == len(result_lines(out))
    assert table.column("episode_id").to_pylist() == [r.episode_id for r in jsonl]
    assert read_parquet(out / "rollouts.parquet") == jsonl, "the Parquet rollouts are the JSONL ones"


def test_missing_api_key_variable_is_one_line(gold_tasks_file: Path, tmp_path: Path):
    dead = f"http://127.0.0.1:{free_port()}"
    proc = trainer_client("evaluate", "--model", f"{dead}/v1", "--api-key-env", "SWE_EVAL_NO_SUCH_VARIABLE",
                          "--env-url", dead, "--tasks", gold_tasks_file, "--out", tmp_path / "out")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line == ("trainer-client evaluate: error: --api-key-env SWE_EVAL_NO_SUCH_VARIABLE: the variable "
                    "$SWE_EVAL_NO_SUCH_VARIABLE is not set (or empty) in this environment"), line
    assert not (tmp_path / "out").exists(), "nothing started"
