"""One demo-task episode with mini-swe-agent's own agent (run with the mini-swe-agent venv's python).

    python minisweagent_episode.py {fix|noop|lost|budget} BASE_URL INSTANCE_ID GOLD_PATCH_FILE OUT_DIR

mini-swe-agent's `DefaultAgent` with its SWE-bench config (`config/benchmarks/swebench.yaml`: its
templates, step limit, observation template) exactly as the package ships it, its deterministic
tool-call test model (`DeterministicToolcallModel`, replies made with `make_toolcall_output`) and
`env_client.adapters.minisweagent.SWEOpenEnvEnvironment` made from the config's `environment`
section. fix: `ls`, a failing command, a long output, the gold patch applied by bash, `git diff >
patch.txt`, then the submit command. noop: `git diff > patch.txt` with nothing changed, then the
submit command. lost: `ls`, then the session's socket is cut before the next command. budget: `ls`
until the env's step budget ends the episode. Each command's observation as the agent rendered it
(the config's jinja observation_template) is returned beside the server's observation, and the
template is also rendered for a few observations made up here (a timeout's exception, a refused
call), for the test to compare with the contract's renderer. Prints one JSON line.
"""

from __future__ import annotations

import json
import sys
from importlib import metadata
from pathlib import Path

from jinja2 import StrictUndefined, Template
from minisweagent.agents.default import DefaultAgent
from minisweagent.config import get_config_from_spec
from minisweagent.exceptions import Submitted
from minisweagent.models.test_models import DeterministicToolcallModel, make_toolcall_output

from env_client.adapters.minisweagent import SWEOpenEnvEnvironment

SENTINEL_SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt"


def reply(n: int, command: str) -> dict:
    """The model's n-th answer: a thought and one bash tool call, as litellm's tool-call models return it."""
    call_id = f"call_{n}"
    tool_call = {"id": call_id, "type": "function",
                 "function": {"name": "bash", "arguments": json.dumps({"command": command})}}
    out = make_toolcall_output(f"THOUGHT: step {n}", [tool_call], [{"command": command, "tool_call_id": call_id}])
    out["extra"]["cost"] = 0.0  # a scripted model is free (make_toolcall_output bills 1.0: swebench.yaml's
    return out                  # cost_limit of 3 would stop the agent at its third call)


def commands(mode: str, gold: str) -> list[str]:
    if mode == "fix":
        return ["ls", "pwd; echo 'to stderr' >&2; exit 3", "seq 1 3000",
                f"cat > /tmp/gold.patch <<'GOLD_EOF'\n{gold}GOLD_EOF\ngit apply /tmp/gold.patch",
                "git diff -- six.py > patch.txt", SENTINEL_SUBMIT]
    if mode == "noop":
        return ["git diff > patch.txt", SENTINEL_SUBMIT]
    if mode == "lost":
        return ["ls", "ls", "ls"]
    if mode == "budget":
        return ["ls"] * 6
    raise ValueError(mode)


def record(env: SWEOpenEnvEnvironment, seen: list[dict], lose_at: int | None) -> None:
    """Record the server's observation of each command on the environment itself (its class stays the
    adapter's); in `lost` mode, cut its session's socket before the second command, as a replica that
    goes away mid-episode."""
    execute = env.execute

    def recorded(action, cwd="", *, timeout=None):
        if lose_at is not None and len(seen) == lose_at and env.session is not None:
            env.client.run(env.session.remote.connection.close())
        try:
            return execute(action, cwd, timeout=timeout)
        finally:
            seen.append(env.observation)

    env.execute = recorded


def render(template: str, output: dict) -> str:
    return Template(template, undefined=StrictUndefined).render(output=output)


def main() -> None:
    mode, url, instance_id, gold_file, out_dir = sys.argv[1:6]
    out = Path(out_dir)
    config = get_config_from_spec("swebench.yaml")  # the package's own file, unmodified
    template = config["model"]["observation_template"]
    script = commands(mode, Path(gold_file).read_text(encoding="utf-8"))
    model = DeterministicToolcallModel(outputs=[reply(n, c) for n, c in enumerate(script)],
                                       observation_template=template)
    env = SWEOpenEnvEnvironment(urls=[url], instance_id=instance_id, **config["environment"])
    seen: list[dict] = []
    record(env, seen, 1 if mode == "lost" else None)
    agent = DefaultAgent(model, env, **config["agent"])
    info = agent.run(env.issue)
    traj = out / f"{mode}.traj.json"
    agent.save(traj)
    tool_messages = [m for m in agent.messages if m.get("role") == "tool"]
    observations = [{"server": obs, "agent": msg["content"]} for obs, msg in zip(seen, tool_messages)]
    made_up = [  # observations the scripted runs do not produce, rendered by the config's template too
        {"output": "partial\n", "metadata": {"returncode": -1, "exception_info":
                                             "An error occurred while executing the command: the command timed out "
                                             "after 60 seconds"}},
        {"output": "", "metadata": {"returncode": 0}},
        {"output": "x" * 9_999, "metadata": {"returncode": 0}},
        {"output": "y" * 10_000 + "\n", "metadata": {"returncode": 1}},
        {"output": "Error: unknown tool 'view'", "metadata": {"error_kind": "unknown_tool",
                                                              "error_message": "unknown tool 'view'"}},
    ]
    rendered = [{"server": obs, "agent": render(template, SWEOpenEnvEnvironment.output_of(obs))} for obs in made_up]
    env.close()
    print(json.dumps({
        "version": metadata.version("mini-swe-agent"), "info": info, "result": env.result,
        "issue": env.issue, "episode_id": env.episode_id, "steps": env.steps, "n_calls": agent.n_calls,
        "messages": [{"role": m.get("role"), "content": m.get("content")} for m in agent.messages],
        "observations": observations, "made_up": rendered, "trajectory": str(traj),
        "submitted_is_minisweagents": issubclass(Submitted, Exception),
        "template_vars": sorted(env.get_template_vars()), "serialized": env.serialize(),
        "commands": script}))


if __name__ == "__main__":
    main()
