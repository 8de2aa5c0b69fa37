"""`trainer-client evaluate --profile bash-only`: the default loop shows the model the profile's one
tool and instructions, renders outputs as mini-swe-agent's template, and scores what the sentinel line
submitted (kept as the prediction); a model that never prints it scores 0 without a grading; a wrong
profile name is one line."""

from __future__ import annotations

from pathlib import Path

from eval_support import result_lines, trainer_client
from support.policy_double import PolicyDouble

from contract import SUBMIT_SENTINEL, get_profile


def test_evaluate_under_the_bash_only_profile(env_url: str, gold_tasks_file: Path, gold_rows, tmp_path: Path):
    profile = get_profile("bash-only")
    out = tmp_path / "gold"
    with PolicyDouble(gold_tasks_file, "bash-gold", tmp_path / "gold-double") as double:
        proc = trainer_client("evaluate", "--model", double.base_url, "--env-url", env_url, "--tasks",
                              gold_tasks_file, "--profile", "bash-only", "--concurrency", 2, "--out", out)
        requests = double.requests()
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = result_lines(out)
    assert len(results) == len(gold_rows)
    assert all(r["status"] == "resolved" and r["end_reason"] == "submitted" for r in results), results
    assert all(r["turns"] == 3 for r in results)  # apply, git diff > patch.txt, the sentinel line
    # the prediction is the submitted patch (what was graded), not a workspace diff with patch.txt in it
    assert all("+++ " in r["model_patch"] and "patch.txt" not in r["model_patch"] for r in results)
    first = requests[0]
    assert [t["function"]["name"] for t in first["tools"]] == ["bash"]
    assert first["messages"][0]["content"].startswith(profile.prompt)
    later = next(r for r in requests if any(m["role"] == "tool" for m in r["messages"]))
    tool_message = next(m for m in later["messages"] if m["role"] == "tool")
    assert tool_message["content"].startswith("<returncode>0</returncode>\n<output>\n"), tool_message

    out = tmp_path / "silent"
    with PolicyDouble(gold_tasks_file, "explore", tmp_path / "explore-double", turns=50) as double:
        proc = trainer_client("evaluate", "--model", double.base_url, "--env-url", env_url, "--tasks",
                              gold_tasks_file, "--profile", "bash-only", "--max-turns", 2, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = result_lines(out)
    # never submitted (explore only runs ls here): 0, no grading, nothing to predict
    assert all(r["status"] == "unresolved" and r["reward"] == 0.0 and r["end_reason"] == "turn_limit"
               for r in results), results
    assert all(r["model_patch"] is None and r["patch_error"] == "nothing was submitted" for r in results)
    assert SUBMIT_SENTINEL not in (out / "results.jsonl").read_text()

    proc = trainer_client("evaluate", "--model", "http://127.0.0.1:9", "--env-url", env_url, "--tasks",
                          gold_tasks_file, "--profile", "bash_only", "--out", tmp_path / "bad")
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "did you mean 'bash-only'" in lines[0], proc.stderr
