"""VeRL: the real package's tool and advantage interfaces, through `env_client.adapters.verl`.

From the verl venv (``framework_support``: verl 0.9.1 installed without its dependencies, plus the
ones its tool, agent loop and advantage modules import, torch's CPU build among them), against the
real server on loopback (bwrap sandbox): VeRL's own loader reads the generated tool config; the tools
driven through their `BaseTool` methods score the gold patch applied with the bash tool 1.0 and no
change 0.0, carry a failed call's error-site markers in the response's metadata and the metrics, and
`release` closes the session on the server (its /metrics gauge, read between the scenarios, and its
session table afterwards); a session lost under a call is one line and released. The agent loop keeps
one episode per trajectory through VeRL's own per-call `_call_tool`. The `swe_openenv` estimator
equals `compute_grpo_outcome_advantage` with its weights at 0 and the hand-computed values otherwise.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from framework_support import framework_python, run_script, wait_no_sessions
from support.venvs import pip, venv_step

from env_client.adapters.verl import AGENT_LOOP, ESTIMATOR, VERL_VERSION, build_parser, dataset_rows, tool_config
from task_factory.demo_task import demo_tasks_file

pytestmark = pytest.mark.slow

VERL = f"verl=={VERL_VERSION}"  # installed with --no-deps: its own dependencies pull ray[default], wandb, vllm-era pins
#: what `verl.tools`, `verl.trainer.ppo.core_algos` and `verl.experimental.agent_loop` import (verl 0.9.1's
#: declared ranges: tensordict<=0.10.0, transformers<5.11); torch is the CPU build the Makefile installs
VERL_DEPS = [
    "torch==2.13.0", "numpy==2.4.6", "packaging==25.0", "pyyaml==6.0.4", "ray==2.60.0", "tensordict==0.10.0",
    "omegaconf==2.3.1", "hydra-core==1.3.8", "transformers==5.10.4", "codetiming==1.4.0", "orjson==3.13.0",
    "pillow==13.0.0", "datasets==5.2.0", "cachetools==8.0.2", "fastapi==0.165.0", "uvicorn==0.54.0",
]
SCRIPT = Path(__file__).with_name("verl_episode.py")
TOOLS = {"bash", "view", "str_replace", "create", "submit"}
ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs/frameworks/verl.md"


def _doc_commands(program: str) -> list[list[str]]:
    """The words (comments cut, backslash continuations joined) of each command of the page's fenced
    blocks that runs `program`."""
    blocks = re.findall(r"^\s*```\w*\n(.*?)^\s*```", DOC.read_text(encoding="utf-8"), flags=re.S | re.M)
    commands = []
    for block in blocks:
        for command in re.sub(r"\\\n", " ", block).splitlines():
            if command.strip().startswith(program):
                commands.append(shlex.split(command, comments=True))
    return commands


def _doc_config_keys() -> list[str]:
    """The VeRL config keys the page's main_ppo command sets (not the `+` ones it adds)."""
    (words,) = _doc_commands("python -m verl.trainer.main_ppo")
    return [w.split("=", 1)[0] for w in words if re.match(r"^[a-z_]+(\.[a-z_0-9]+)+=", w)]


@pytest.fixture(scope="module")
def verl_python() -> Path:
    python = framework_python(f"verl-{VERL_VERSION}", VERL_DEPS, "verl")
    venv = python.parent.parent
    venv_step(venv, ".verl-no-deps", VERL,
              lambda: pip(python, ["install", "--quiet", "--no-deps", VERL], "verl", f"pip install --no-deps {VERL} into {venv}"))
    return python


@pytest.fixture(scope="module")
def tools_run(server, demo_task, verl_python, tmp_path_factory) -> dict:
    """One run of the tool scenarios (fix, control, abandoned, lost, agent loop) against the server."""
    workdir = tmp_path_factory.mktemp("verl")
    patch = workdir / "gold.patch"
    patch.write_text(demo_task.patch)
    out = run_script(verl_python, SCRIPT, ["tools", server.url, str(demo_tasks_file()), demo_task.instance_id,
                                           str(patch), str(workdir)], workdir,
                     env={"ENV_SERVER_TOKEN": server.token})
    assert out["version"] == VERL_VERSION
    assert out["sessions_before"] == 0
    assert wait_no_sessions(server) == []  # nothing any scenario opened stays open
    return out


@pytest.fixture(scope="module")
def estimator_run(verl_python, tmp_path_factory) -> dict:
    out = run_script(verl_python, SCRIPT, ["estimator", json.dumps(_doc_config_keys())],
                     tmp_path_factory.mktemp("verl-estimator"))
    assert out["version"] == VERL_VERSION
    return out


def _trace(server, episode_id: str) -> list[dict]:
    records = server.service.store.load(episode_id)
    assert records[0]["kind"] == "reset" and records[0]["episode_id"] == episode_id
    return records


def test_verl_loads_the_generated_tool_config(tools_run):
    loaded = tools_run["loaded"]
    assert set(loaded) == TOOLS
    for name, tool in loaded.items():
        assert tool["class"] == "env_client.adapters.verl.SWEOpenEnvTool" and tool["base_tool"], tool
        assert tool["profile"] == "default"
        # what VeRL renders into the chat template is exactly the schema generated from the contract
        assert tool["schema"] == tools_run["generated"][name], name
    bash = loaded["bash"]["schema"]["function"]
    assert bash["parameters"]["required"] == ["command"] and set(bash["parameters"]["properties"]) == {"command",
                                                                                                        "timeout"}
    assert loaded["submit"]["schema"]["function"]["parameters"]["properties"] == {}
    assert tools_run["bash_only"] == {"bash": "bash-only"}  # the bash-only profile: mini-swe-agent's one tool
    assert tools_run["agent_loop_registered"] == {"_target_": "env_client.adapters.verl.SWEOpenEnvAgentLoop"}


def test_verl_tools_gold_patch_via_bash_scores_one_with_markers(server, demo_task, tools_run):
    fix = tools_run["fix"]
    created = fix["created"]
    assert created["type"] == "SWEToolResponse" and "six.b()" in created["text"]  # create returns the issue
    episode_id = created["metadata"]["episode_id"]
    assert created["metadata"]["instance_id"] == demo_task.instance_id
    assert fix["joined_ids"] == [fix["instance_id"]] * 4 and fix["open"] == 1 and fix["sessions_open"] == 1

    failed = fix["failed"]  # a command that does not exist: the markers in the response metadata and the metrics
    for where in (failed["metadata"], failed["metrics"]):
        assert where["error_kind"] == "command_not_found" and where["hint_template_key"] == "shell.command_not_found"
        assert where["error_source"] == "agent" and where["tool_name"] == "bash"
        assert where["episode_id"] == episode_id and where["instance_id"] == demo_task.instance_id
        assert where["step"] == 1
    assert failed["reward"] == 0.0 and "not found" in failed["text"]
    missing = fix["view_missing"]["metadata"]
    assert missing["tool_name"] == "view" and missing["error_source"] == "agent" and missing["error_kind"]
    assert "error_kind" not in fix["applied"]["metadata"] and fix["applied"]["reward"] == 0.0
    assert "six.py" in fix["diff"]["text"]

    assert fix["reward"] == 1.0 and fix["reward_again"] == 1.0  # calc_reward submits once, then returns the grade
    assert fix["sessions_after_submit"] == 0  # the replica's slot is freed at submit
    assert "episode is over" in fix["after_done"]["text"] and fix["after_done"]["metadata"]["episode_done"] is True
    record = fix["record"]
    assert record["resolved"] is True and record["submitted"] is True and record["reward"] == 1.0
    assert [s["tool_name"] for s in record["steps"]] == ["bash", "view", "bash", "bash", "submit"]
    assert record["steps"][-1]["origin"] == "client"
    assert fix["open_after_release"] == {}

    records = _trace(server, episode_id)
    assert [r["action"].get("tool_name") for r in records[1:]] == ["bash", "view", "bash", "bash", "submit"]
    assert records[-1]["action"]["metadata"] == {"origin": "client"}  # left out of state(t)
    assert records[-1]["observation"]["reward"] == 1.0


def test_verl_tools_without_a_fix_score_zero(server, tools_run):
    control = tools_run["control"]
    assert "six.py" in control["ls"]["text"] and "error_kind" not in control["ls"]["metadata"]
    assert control["sessions_open"] == 1
    assert control["reward"] == 0.0 and control["record"]["resolved"] is False
    assert control["sessions_after_release"] == 0
    records = _trace(server, control["record"]["episode_id"])
    assert [r["action"].get("tool_name") for r in records[1:]] == ["bash", "submit"]
    assert records[-1]["observation"]["reward"] == 0.0


def test_verl_release_closes_the_session_on_the_server(server, tools_run):
    """release() without calc_reward: the session is closed (the server's gauge drops to 0), the episode
    never graded although the gold edit is in; the instance is gone afterwards."""
    abandoned = tools_run["abandoned"]
    assert abandoned["sessions_open"] == 1 and abandoned["sessions_after_release"] == 0
    assert abandoned["open_after_release"] == {}
    assert "Edited six.py" in abandoned["edit"]["text"] and abandoned["record"]["done"] is False
    assert "no open episode" in abandoned["after_release"]
    records = _trace(server, abandoned["record"]["episode_id"])
    assert [r["action"].get("tool_name") for r in records[1:]] == ["str_replace"]
    assert not any((r.get("observation") or {}).get("done") for r in records[1:])  # never graded


def test_verl_lost_session_is_one_line_and_released(tools_run):
    lost = tools_run["lost"]
    assert lost["sessions_open"] == 1
    error = lost["error"]
    assert error["type"] == "EnvSessionError" and "\n" not in error["message"], error
    assert "was lost during a bash call" in error["message"] and "it was released" in error["message"]
    assert "connection to the replica lost (simulated)" in error["message"]
    assert lost["record"]["lost"] and lost["record"]["done"] is True
    assert lost["open"] == {} and lost["sessions_after"] == 0  # nothing stays open on the server


def test_verl_agent_loop_keeps_one_episode_per_trajectory(server, demo_task, tools_run):
    agent = tools_run["agent_loop"]
    submits, truncated = agent["submits"], agent["truncated"]
    # every tool got the trajectory key in its create_kwargs, beside the row's instance id
    kwargs = submits["tools_kwargs"]
    assert set(kwargs) == TOOLS
    keys = {entry["create_kwargs"]["trajectory"] for entry in kwargs.values()}
    assert len(keys) == 1 and all(e["create_kwargs"]["instance_id"] == demo_task.instance_id for e in kwargs.values())

    record = submits["record"]  # the policy's own submit: the hidden tests' reward is the trajectory's
    assert submits["reward_score"] == 1.0 and submits["tool_rewards"] == [0.0, 0.0, 0.0, 1.0]
    assert [(s["tool_name"], s["turn"]) for s in record["steps"]] == [("bash", 0), ("str_replace", 1), ("bash", 2),
                                                                     ("submit", 3)]
    assert record["steps"][0]["error_kind"] == "command_not_found" and record["resolved"] is True
    assert submits["tool_texts"][2].strip() == "1"  # the edit of turn 1 is there at turn 2: one episode
    assert "not found" in submits["tool_texts"][0]

    other = truncated["record"]  # ran at the same time, in its own episode; submitted by the loop at its end
    assert other["episode_id"] != record["episode_id"]
    assert truncated["reward_score"] == 1.0 and other["steps"][-1]["origin"] == "client"
    assert [s["tool_name"] for s in other["steps"]] == ["str_replace", "bash", "submit"]
    assert agent["open_after"] == {} and agent["sessions_after"] == 0

    no_submit = agent["no_submit"]  # submit_on_truncation: false: ends ungraded, reward 0.0 though the fix is in
    assert no_submit["reward_score"] == 0.0 and no_submit["record"]["submitted"] is False
    assert [s["tool_name"] for s in no_submit["record"]["steps"]] == ["str_replace", "bash"]
    records = _trace(server, no_submit["record"]["episode_id"])
    assert not any((r.get("observation") or {}).get("done") for r in records[1:])

    assert agent["no_calls"]["reward_score"] == 0.0 and agent["no_calls"]["record"]["episode_id"] is None

    plain = agent["plain_loop"]  # VeRL's plain ToolAgentLoop: refused with the fix named, nothing left open
    (text,) = plain["tool_texts"]
    assert text.startswith("Error executing tool 'bash'") and "swe_openenv_agent" in text
    assert agent["plain_open_after"] == {} and agent["sessions_end"] == 0


def test_verl_estimator_is_grpo_at_weights_zero(estimator_run):
    assert estimator_run["registered"] is True  # get_adv_estimator_fn("swe_openenv")
    # torch.equal: the same values exactly, with both std modes, an AlgoConfig without the node, and
    # the extra inputs given but weighted 0
    assert estimator_run["equal_to_grpo"] == {"True": True, "False": True, "algo_config": True,
                                              "inputs_ignored": True}


def _hand(alpha: float, beta: float, norm: bool = True) -> list[list[float]]:
    """The estimator's values computed by hand (plain floats) for the script's batch."""
    mask = [[1, 1, 0, 1], [1, 1, 1, 0], [1, 0, 1, 1]]
    old = [[-1.0, -2.0, -9.0, -0.5], [-0.2, -0.4, -0.6, -9.0], [-1.5, -9.0, -0.1, -0.3]]
    hint = [[-0.5, -1.0, -9.0, -0.5], [-0.3, -0.1, -0.2, -9.0], [-1.0, -9.0, -0.4, -0.1]]
    sites = [[0, 1, 1, 1], [0, 0, 0, 0], [1, 1, 1, 0]]
    pairs = [[0, 0, 0, -1], [-1, -1, 0, 0], [0, 0, 0, 0]]
    # group "a" = rows 0, 1 (scores 1.0, 0.0): mean 0.5, unbiased std sqrt(0.5); group "b" = row 2 alone: mean 0, std 1
    eps = 1e-6
    if norm:
        outcome = [0.5 / (math.sqrt(0.5) + eps), -0.5 / (math.sqrt(0.5) + eps), 0.5 / (1.0 + eps)]
    else:
        outcome = [0.5, -0.5, 0.5]
    return [[(outcome[i] + alpha * sites[i][t] * (hint[i][t] - old[i][t]) + beta * pairs[i][t]) * mask[i][t]
             for t in range(4)] for i in range(3)]


def _close(got: list[list[float]], want: list[list[float]]) -> bool:
    return all(math.isclose(g, w, rel_tol=1e-6, abs_tol=1e-6) for gr, wr in zip(got, want) for g, w in zip(gr, wr))


def test_verl_estimator_adds_the_hint_and_pair_terms(estimator_run):
    assert _close(estimator_run["grpo"], _hand(0.0, 0.0))
    want = _hand(0.1, 0.05)
    assert _close(estimator_run["keywords"], want), estimator_run["keywords"]
    assert _close(estimator_run["batch"], want), estimator_run["batch"]  # the inputs from a TensorDict batch
    # row 0 token 1, by hand: 0.5/(sqrt(0.5)+1e-6) + 0.1*(-1.0 - -2.0) = 0.80710... ; token 2 is masked out
    assert math.isclose(estimator_run["keywords"][0][1], 0.7071057 + 0.1, rel_tol=1e-5)
    assert estimator_run["keywords"][0][2] == 0.0
    assert _close(estimator_run["alpha_only"], _hand(0.5, 0.0))
    assert _close(estimator_run["beta_only_unnormalized"], _hand(0.0, 1.0, norm=False))
    errors = estimator_run["errors"]
    assert "hints.weight=0.1 needs swe_hint_log_probs, old_log_probs, swe_hint_mask" in errors["alpha"]
    assert "pairs.weight=0.1 needs swe_pair_scores" in errors["beta"]
    assert "hints.weight must be >= 0" in errors["negative"]
    assert errors["moved"] == f"algorithm.{ESTIMATOR}.alpha: moved to algorithm.{ESTIMATOR}.hints.weight"


def test_verl_estimator_inputs_from_episode_records(estimator_run):
    helpers = estimator_run["helpers"]
    # mask [1,1,0,0,1,0,1,1]: turns 0 | 1 | 2 ; [0,1,1,0,1,1,0,0]: turns 0 | 1
    assert helpers["turns"] == [[0, 0, -1, -1, 1, -1, 2, 2], [-1, 0, 0, -1, 1, 1, -1, -1]]
    # row 0's first agent error is at turn 1: its hint counts the tokens of turn 2; row 1's error is the
    # infrastructure's: no error site
    assert helpers["first_error"] == [1, None]
    assert helpers["hint_mask"] == [[0, 0, 0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 0, 0, 0, 0]]
    # the pair of ep-1 rejected its step 0 (turn 0), the pair of ep-2 its step 1 (turn 1)
    assert helpers["pair_turns"] == [{"0": -1.0}, {"1": -1.0}]
    assert helpers["pair_scores"] == [[-1, -1, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, -1, -1, 0, 0]]


def test_tool_config_is_generated_from_the_contract():
    """Runs in the project's venv (no verl): the generator and the shipped example agree."""
    import yaml

    from contract import get_profile
    from env_client.adapters import verl as adapter

    config = tool_config()
    names = [t["tool_schema"]["function"]["name"] for t in config["tools"]]
    assert names == [t["function"]["name"] for t in get_profile(None).policy_tools()]
    assert all(t["class_name"] == adapter.TOOL_CLASS and t["config"]["type"] == "native" for t in config["tools"])
    assert all("token" not in t["config"] for t in config["tools"])  # read from the variable token_var names
    root = Path(__file__).resolve().parents[2]
    regenerate = "python -m env_client.adapters.verl {} --out examples/verl/{}"
    shipped = yaml.safe_load((root / "examples/verl/swe_openenv_tools.yaml").read_text())
    assert shipped == config, "regenerate: " + regenerate.format("tool-config", "swe_openenv_tools.yaml")
    loops = yaml.safe_load((root / "examples/verl/swe_openenv_agent_loops.yaml").read_text())
    assert loops == adapter.agent_loop_config(), "regenerate: " + regenerate.format("agent-loop-config",
                                                                                    "swe_openenv_agent_loops.yaml")


def test_import_needs_no_framework():
    """Without verl (hidden from the interpreter, whether or not it is installed): the module imports
    neither verl nor torch; the names that need verl say so in one line naming the install."""
    code = ("import sys\n"
            "class NoVerl:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'verl':\n"
            "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
            "sys.meta_path.insert(0, NoVerl())\n"
            "import env_client.adapters.verl as v\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'verl', 'torch', 'ray'}))\n"
            "try:\n    v.SWEOpenEnvTool\nexcept ImportError as exc:\n    print(type(exc).__name__, exc)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    modules, error = proc.stdout.splitlines()[:2]
    assert modules == "[]"
    assert error.startswith("MissingDependencyError env_client.adapters.verl.SWEOpenEnvTool needs verl 0.9.1: ")
    assert 'pip install -e ".[client]" "verl==0.9.1"' in error


def test_dataset_rows_and_command(tmp_path, demo_task):
    (row,) = dataset_rows(demo_tasks_file())
    assert row["agent_name"] == AGENT_LOOP and row["data_source"] == "swe_openenv"
    (message,) = row["prompt"]
    assert message["role"] == "user" and message["content"].endswith(demo_task.problem_statement)
    assert message["content"].startswith("You are working in a Python repository at /workspace.")
    kwargs = row["extra_info"]["tools_kwargs"]
    assert set(kwargs) == TOOLS and all(k["create_kwargs"] == {"instance_id": demo_task.instance_id}
                                        for k in kwargs.values())
    (bash_only,) = dataset_rows(demo_tasks_file(), profile="bash-only")
    assert bash_only["extra_info"]["tools_kwargs"] == {"bash": {"create_kwargs": {
        "instance_id": demo_task.instance_id, "profile": "bash-only"}}}
    with pytest.raises(ValueError, match="not in"):
        dataset_rows(demo_tasks_file(), instance_ids=["nope"])
    out = tmp_path / "train.jsonl"
    proc = subprocess.run([sys.executable, "-m", "env_client.adapters.verl", "dataset", "--tasks",
                           str(demo_tasks_file()), "--out", str(out)], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert proc.returncode == 0 and "wrote 1 rows" in proc.stdout, proc.stderr
    assert json.loads(out.read_text()) == row


def test_doc_names_the_tested_version_and_its_lines_work():
    page = DOC.read_text(encoding="utf-8")
    assert f"**verl {VERL_VERSION}**" in page
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    installs = _doc_commands("pip install")
    assert installs, "the page says how to install the client"
    for words in installs:  # this project from the checkout, with extras pyproject defines
        target = words[words.index("-e") + 1]
        m = re.fullmatch(r"\.\[([\w,-]+)\]", target)
        assert m and set(m.group(1).split(",")) <= set(extras), words
    commands = _doc_commands("python -m env_client.adapters.verl")
    assert {c[3] for c in commands} == {"tool-config", "agent-loop-config", "dataset"}
    for words in commands:
        build_parser().parse_args(words[3:])
    keys = _doc_config_keys()
    assert len(keys) >= 12 and "algorithm.adv_estimator" in keys
    (run,) = _doc_commands("python -m verl.trainer.main_ppo")
    assert f"algorithm.adv_estimator={ESTIMATOR}" in run
    assert f"actor_rollout_ref.rollout.agent.default_agent_loop={AGENT_LOOP}" in run
    assert f"+algorithm.{ESTIMATOR}.hints.weight=0.0" in run and f"+algorithm.{ESTIMATOR}.pairs.weight=0.0" in run


def test_doc_config_keys_are_verls(estimator_run):
    """Every key the page's main_ppo command sets is a key of verl 0.9.1's own trainer config."""
    assert estimator_run["doc_keys_missing"] == []
