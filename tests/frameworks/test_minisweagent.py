"""mini-swe-agent: its own `DefaultAgent` and SWE-bench config drive demo-task episodes through
`env_client.adapters.minisweagent`, from its own venv (``framework_support``), against the real server
on loopback (bwrap sandbox, the `bash-only` profile).

A scripted fix (the gold patch applied by bash commands, `git diff > patch.txt`, the submit command)
ends in mini-swe-agent's own `Submitted` with the patch as the submission and the hidden tests'
reward 1.0 on the environment and in the saved trajectory; a scripted no-op submission scores 0.0;
a session cut mid-episode ends the agent with one line and leaves nothing open on the server; the
env's step budget ends it as `LimitsExceeded`. Every observation the agent was shown (the config's
own jinja template) equals the contract's rendering of the server's observation
(`format_tool_output(obs, style="returncode")`), for short, long (> 10,000 characters), failing and
made-up (timeout, refused) outputs. Sessions are released after each run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from framework_support import ROOT, framework_python, run_script, wait_no_sessions
from support.servers import run_server

from contract import format_tool_output
from env_server.config import ServerConfig
from env_server.episode import EpisodeConfig
from task_factory.demo_task import demo_tasks_file
from verifier.task import load_tasks

pytestmark = pytest.mark.slow

MINI_SWE_AGENT = "mini-swe-agent==2.4.6"  # keep in step with pyproject's `minisweagent` extra
SCRIPT = Path(__file__).with_name("minisweagent_episode.py")


@pytest.fixture(scope="module")
def msa_python() -> Path:
    return framework_python("mini-swe-agent-2.4.6", [MINI_SWE_AGENT], "mini-swe-agent")


def _episode(server, msa_python: Path, demo_task, tmp_path: Path, mode: str) -> dict:
    gold = tmp_path / "gold.patch"
    gold.write_text(demo_task.patch, encoding="utf-8")
    env = {"ENV_SERVER_TOKEN": server.token, "MSWEA_SILENT_STARTUP": "1",
           "MSWEA_GLOBAL_CONFIG_DIR": str(tmp_path / "mswea-config")}
    out = run_script(msa_python, SCRIPT, [mode, server.url, demo_task.instance_id, str(gold), str(tmp_path)],
                     tmp_path, env=env)
    assert out["version"] == MINI_SWE_AGENT.split("==")[1]
    assert wait_no_sessions(server) == []  # released at the end, whatever the end
    return out


def _same_rendering(observations: list[dict]) -> None:
    for pair in observations:
        assert pair["agent"] == format_tool_output(pair["server"], style="returncode"), pair


def test_default_agent_scripted_fix_resolves(server, msa_python, demo_task, tmp_path):
    out = _episode(server, msa_python, demo_task, tmp_path, "fix")
    info, result = out["info"], out["result"]
    # mini-swe-agent's own exit: Submitted, the submission the patch printed after the sentinel line
    assert info["exit_status"] == "Submitted", out
    assert info["submission"].startswith("diff --git a/six.py b/six.py\n")
    assert '+        return s.encode("latin-1")' in info["submission"] and "Submitted." not in info["submission"]
    assert out["messages"][-1] == {"role": "exit", "content": info["submission"]}
    # graded by the hidden tests, kept on the environment
    assert result["reward"] == 1.0 and result["resolved"] is True and result["exit_status"] == "Submitted"
    assert result["episode_id"] == out["episode_id"] and result["tests_failed"] == 0
    assert out["steps"] == len(out["commands"]) == out["n_calls"]
    # the agent's own first messages: the config's templates, the issue as {{task}}
    assert out["messages"][0]["role"] == "system" and "helpful assistant" in out["messages"][0]["content"]
    assert "<pr_description>" in out["messages"][1]["content"] and out["issue"] in out["messages"][1]["content"]
    # the trajectory mini-swe-agent saved carries the reward and the grade
    traj = json.loads(Path(out["trajectory"]).read_text(encoding="utf-8"))
    env_info = traj["info"]["swe_openenv"]
    assert env_info["reward"] == 1.0 and env_info["resolved"] is True and env_info["profile"] == "bash-only"
    assert env_info["grade"]["fail_to_pass"] and traj["info"]["exit_status"] == "Submitted"
    assert traj["info"]["config"]["environment_type"] == "env_client.adapters.minisweagent.SWEOpenEnvEnvironment"
    assert "token" not in traj["info"]["config"]["environment"]
    assert env_info["env_not_applied"] == {"BASH_ENV": "/root/.bashrc"}  # swebench.yaml's conda hook
    # what the agent was shown is what the contract renders from the server's observations
    obs = out["observations"]
    assert len(obs) == len(out["commands"]) - 1  # the submit raised: no observation rendered
    assert obs[0]["agent"].startswith("<returncode>0</returncode>\n<output>\n") and "six.py" in obs[0]["agent"]
    assert obs[1]["agent"] == "<returncode>3</returncode>\n<output>\n/workspace\nto stderr\n</output>"
    assert "<elided_chars>\n3893 characters elided\n</elided_chars>" in obs[2]["agent"]  # seq 1 3000: 13,893
    _same_rendering(obs)
    *commands, refused = out["made_up"]
    _same_rendering(commands)  # a timeout's exception, an empty output, 9,999 and 10,001 characters
    # a call the server refused before running anything (no return code; through mini-swe-agent only an
    # empty command can be one): mini-swe-agent's way, an exception with return code -1, where the
    # contract renders an <error> block (the one known difference, reported, not the adapter's to change)
    assert refused["agent"] == ("<exception>An error occurred while executing the command: unknown tool 'view'"
                                "</exception>\n<returncode>-1</returncode>\n<output>\n</output>")
    assert format_tool_output(refused["server"], style="returncode") == "<error>\nunknown tool 'view'\n</error>"
    # the server's trace: exactly these commands, under the bash-only profile
    records = server.service.store.load(out["episode_id"])
    assert records[0]["profile"] == "bash-only" and records[0]["instance_id"] == demo_task.instance_id
    assert [r["action"]["arguments"]["command"] for r in records[1:]] == out["commands"]
    assert records[-1]["observation"]["reward"] == 1.0


def test_default_agent_scripted_noop_scores_zero(server, msa_python, demo_task, tmp_path):
    out = _episode(server, msa_python, demo_task, tmp_path, "noop")
    assert out["info"] == {"exit_status": "Submitted", "submission": ""}
    assert out["result"]["reward"] == 0.0 and out["result"]["resolved"] is False
    _same_rendering(out["observations"])


def test_lost_session_is_one_line_and_nothing_stays_open(server, msa_python, demo_task, tmp_path):
    out = _episode(server, msa_python, demo_task, tmp_path, "lost")
    info = out["info"]
    assert info["exit_status"] == "EnvironmentLost" and info["submission"] == ""
    line = info["exception_info"]
    # the client reconnected; the server had closed the session with its socket
    assert "\n" not in line and line.startswith(f"env session lost (episode {out['episode_id']}, "
                                                f"{demo_task.instance_id}, after 1 commands): EnvSessionError: "
                                                "SESSION_NOT_FOUND")
    assert out["messages"][-1] == {"role": "exit", "content": line}
    assert out["result"]["reward"] is None and out["n_calls"] == 2  # the agent stopped at the lost command


@pytest.fixture(scope="module")
def budget_server(bwrap, tmp_path_factory):
    """A server whose episodes have a step budget of 3."""
    tasks = demo_tasks_file()
    config = ServerConfig(tasks_path=tasks, data_dir=tmp_path_factory.mktemp("budget") / "data",
                          auth_token="budget-token", episode=EpisodeConfig(max_steps=3))
    with run_server(config, load_tasks(tasks)) as srv:
        srv.token = "budget-token"
        yield srv


def test_env_step_budget_ends_the_agent_as_limits_exceeded(budget_server, msa_python, demo_task, tmp_path):
    out = _episode(budget_server, msa_python, demo_task, tmp_path, "budget")
    assert out["info"] == {"exit_status": "LimitsExceeded", "submission": "", "env_step_budget": True}
    assert out["result"]["reward"] == 0.0 and out["result"]["exit_status"] == "LimitsExceeded"
    assert out["steps"] == 3 and out["n_calls"] == 3


# ---------------------------------------------------------------- trainer-client evaluate --harness mini-swe-agent

DOUBLE_KEY = "sk-double-0123456789"  # the model double answers 401 without it
SWE_BENCH_ID = "benjaminp__six-demo"  # the demo task again, labelled as a SWE-bench row: predictions.jsonl has it


@pytest.fixture(scope="module")
def two_tasks(tmp_path_factory) -> Path:
    """The demo task and a copy of it under another id with `source: swe-bench` (evaluate writes
    predictions for SWE-bench tasks only): two tasks the real grader scores."""
    row = json.loads(demo_tasks_file().read_text(encoding="utf-8").splitlines()[0])
    base = demo_tasks_file().parent
    for key in ("repo_path", "python_env"):
        if row.get(key):
            row[key] = str((base / row[key]).resolve())
    path = tmp_path_factory.mktemp("two-tasks") / "tasks.jsonl"
    # the copy first, its issue text set apart: the model double tells tasks apart by their issue text
    copy = {**row, "instance_id": SWE_BENCH_ID, "source": "swe-bench",
            "problem_statement": "(the same bug, as a SWE-bench row) " + row["problem_statement"]}
    path.write_text(json.dumps(copy) + "\n" + json.dumps(row) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def two_task_server(bwrap, two_tasks, tmp_path_factory):
    config = ServerConfig(tasks_path=two_tasks, data_dir=tmp_path_factory.mktemp("eval-msa") / "data",
                          auth_token="eval-token")
    with run_server(config, load_tasks(two_tasks)) as srv:
        srv.token = "eval-token"
        yield srv


def _policy_double():
    """tests/support/policy_double.py."""
    import support.policy_double

    return support.policy_double


def _trainer_client(*args: object, timeout: float = 540, env: dict[str, str] | None = None
                    ) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "trainer-client"
    head = [str(exe)] if exe.exists() else [sys.executable, "-m", "trainer_client.cli"]
    base = {k: v for k, v in os.environ.items() if k not in ("ENV_SERVER_TOKEN", "PYTHONPATH")}
    return subprocess.run([*head, *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**base, "PYTHONUNBUFFERED": "1", **(env or {})})


@pytest.fixture(scope="module")
def harness_run(two_task_server, two_tasks, msa_python, tmp_path_factory):
    """`trainer-client evaluate --harness mini-swe-agent` on the two tasks, 2 samples each, the model a
    test double (an OpenAI-compatible server scripted per task: tests/support/policy_double.py) that
    fixes the SWE-bench-labelled task and submits nothing for the other, through mini-swe-agent's
    LitellmModel; (out, the double's requests, the process, seconds)."""
    PolicyDouble = _policy_double().PolicyDouble
    logs = tmp_path_factory.mktemp("msa-double")
    out = tmp_path_factory.mktemp("msa-eval") / "out"
    with PolicyDouble(two_tasks, "bash-gold", logs, task_modes={"six__demo-1": "bash-noop"},
                      api_key=DOUBLE_KEY) as double:
        start = time.monotonic()
        proc = _trainer_client("evaluate", "--harness", "mini-swe-agent", "--harness-python", msa_python,
                               "--model", double.base_url, "--env-url", two_task_server.url, "--env-token",
                               two_task_server.token, "--tasks", two_tasks, "--samples", 2, "--concurrency", 2,
                               "--out", out, "--price-in", 1.0, "--price-out", 2.0, "--api-key-env", "MSA_TEST_KEY",
                               env={"MSA_TEST_KEY": DOUBLE_KEY})
        seconds = time.monotonic() - start
        requests = double.requests()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return out, requests, proc, seconds


def test_evaluate_harness_reports_resolved_rate_pass_at_k_and_predictions(harness_run, two_task_server):
    out, _, proc, _ = harness_run
    assert "resolved 2/4 = 50.0%" in proc.stdout, proc.stdout
    # four episodes, two at a time: two harness processes (mini-swe-agent and litellm imported twice, not 4x)
    started = [line for line in proc.stderr.splitlines() if line.startswith("mini-swe-agent: harness process ")]
    assert len(started) == 2 and len({line.split("(pid ")[1].split(";")[0] for line in started}) == 2, proc.stderr
    rows = sorted((json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()),
                  key=lambda r: (r["instance_id"], r["sample"]))
    assert [(r["instance_id"], r["sample"], r["status"], r["reward"], r["end_reason"]) for r in rows] == [
        (SWE_BENCH_ID, 0, "resolved", 1.0, "submitted"), (SWE_BENCH_ID, 1, "resolved", 1.0, "submitted"),
        ("six__demo-1", 0, "unresolved", 0.0, "submitted"), ("six__demo-1", 1, "unresolved", 0.0, "submitted")]
    fixed, noop = rows[0], rows[2]
    assert fixed["turns"] == fixed["steps"] == 3 and noop["turns"] == noop["steps"] == 2
    assert fixed["task_source"] == "swe-bench" and noop["task_source"] == "synthetic-mutation"
    assert fixed["model_patch"].startswith("diff --git a/six.py b/six.py\n") and noop["model_patch"] == ""
    assert fixed["prompt_tokens"] > 0 and fixed["completion_tokens"] > 0  # the double's usage, through litellm
    assert fixed["cost_usd"] == pytest.approx((fixed["prompt_tokens"] + 2 * fixed["completion_tokens"]) / 1e6)
    assert all(r["attempts"] == 1 and not r["lost_reasons"] for r in rows)
    # the report: the resolved rate with its interval, pass@k, the harness among the settings
    report = json.loads((out / "report.json").read_text())
    o = report["summary"]["overall"]
    assert (o["resolved"], o["scored"], o["lost"], o["resolved_rate"]) == (2, 4, 0, 0.5)
    assert 0.0 < o["ci95"][0] < 0.5 < o["ci95"][1] < 1.0
    assert {k: v["value"] for k, v in report["summary"]["pass_at_k"].items()} == {"pass@1": 0.5, "pass@2": 0.5}
    assert report["describe"]["harness"] == "mini-swe-agent 2.4.6"
    assert report["describe"]["harness_config"] == "swebench.yaml" and report["limits"]["max_turns"] == 250
    md = (out / "report.md").read_text()
    assert "**Resolved 2 / 4 episodes = 50.0%**" in md and "| harness | mini-swe-agent 2.4.6 |" in md
    # predictions.jsonl: SWE-bench's format, read back by swebench's own loader
    from swebench.harness.utils import get_predictions_from_file

    predictions = get_predictions_from_file(str(out / "predictions.jsonl"), dataset_name="unused", split="test")
    assert predictions == [{"instance_id": SWE_BENCH_ID, "model_name_or_path": "policy-double",
                            "model_patch": fixed["model_patch"]}]
    # the rollouts: the server's record of each episode
    rollouts = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert sorted(r["episode_id"] for r in rollouts) == sorted(r["episode_id"] for r in rows)
    # each episode ran under the bash-only profile; every session was released
    for r in rows:
        records = two_task_server.service.store.load(r["episode_id"])
        assert records[0]["profile"] == "bash-only" and records[-1]["observation"]["done"] is True
    assert wait_no_sessions(two_task_server) == []


def test_evaluate_harness_runs_mini_swe_agents_own_loop(harness_run):
    """What reached the model is mini-swe-agent's (its templates, its bash tool, the swebench model_kwargs),
    and each sample left mini-swe-agent's own trajectory with the env's grade in it."""
    out, requests, _, _ = harness_run
    assert len(requests) == 2 * 3 + 2 * 2 and all(r["status"] == 200 for r in requests)
    first = next(r for r in requests if len(r["messages"]) == 2 and "SWE-bench row" in r["messages"][1]["content"])
    system, user = first["messages"]
    assert system == {"role": "system", "content": "You are a helpful assistant that can interact with a computer "
                                                   "shell to solve programming tasks."}
    assert user["content"].startswith("<pr_description>\nConsider the following PR description:\n(the same bug")
    assert "Regular source code files in /workspace (this is the working directory" in user["content"]
    assert "/testbed" not in user["content"]  # the one change to the config: where the repository is
    assert [t["function"]["name"] for t in first["tools"]] == ["bash"]
    assert first["tools"][0]["function"]["description"] == "Execute a bash command"
    assert "parallel_tool_calls" in first["fields"] and "temperature" in first["fields"]
    later = next(r for r in requests if len(r["messages"]) == 4)
    assert later["messages"][-1]["role"] == "tool" and later["messages"][-1]["content"].startswith("<returncode>0")
    trajectories = sorted((out / "trajectories").rglob("*.traj.json"))
    assert [p.name for p in trajectories] == [f"{SWE_BENCH_ID}.s0.traj.json", f"{SWE_BENCH_ID}.s1.traj.json",
                                              "six__demo-1.s0.traj.json", "six__demo-1.s1.traj.json"]
    traj = json.loads(trajectories[0].read_text())
    assert traj["info"]["exit_status"] == "Submitted" and traj["info"]["mini_version"] == "2.4.6"
    assert traj["info"]["swe_openenv"]["reward"] == 1.0 and traj["info"]["swe_openenv"]["resolved"] is True
    assert traj["info"]["config"]["agent"]["step_limit"] == 250
    assert traj["info"]["config"]["model"]["model_name"] == "openai/policy-double"
    # the key reached the model (every request was authorized) but no trajectory holds it
    assert all(r["authorized"] for r in requests)
    assert traj["info"]["config"]["model"]["model_kwargs"]["api_key"] == "[redacted]"
    assert not any(DOUBLE_KEY in p.read_text() for p in trajectories)


def test_evaluate_harness_settings_are_checked_first(harness_run, two_tasks, msa_python, tmp_path):
    """A rerun of the folder with the default loop is another evaluation (refused); flags the harness
    does not use, and a python without mini-swe-agent, are one line each before anything runs."""
    out = harness_run[0]
    common = ["--model", "http://127.0.0.1:9/v1", "--model-name", "policy-double", "--env-url", "http://127.0.0.1:9",
              "--tasks", two_tasks, "--samples", 2]
    proc = _trainer_client("evaluate", *common, "--out", out)
    assert proc.returncode == 1 and "holds an evaluation with other settings (limits, policy)" in proc.stderr, \
        proc.stderr
    proc = _trainer_client("evaluate", "--harness", "mini-swe-agent", "--harness-python", msa_python, "--logprobs",
                           *common, "--out", tmp_path / "a")
    assert proc.returncode == 1 and "--logprobs: not used by --harness mini-swe-agent" in proc.stderr, proc.stderr
    proc = _trainer_client("evaluate", "--harness", "mini-swe-agent", "--harness-python", sys.executable, *common,
                           "--out", tmp_path / "b")
    assert proc.returncode == 1 and f"mini-swe-agent cannot run from {sys.executable}" in proc.stderr
    assert '--harness-python .venv-mini/bin/python' in proc.stderr, proc.stderr
    proc = _trainer_client("evaluate", "--harness-config", "swebench.yaml", *common, "--out", tmp_path / "c")
    assert proc.returncode == 1 and "--harness-config needs --harness mini-swe-agent" in proc.stderr, proc.stderr
