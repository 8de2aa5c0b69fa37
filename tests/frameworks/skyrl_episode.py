"""One demo-task episode through skyrl-gym's own API (run with the skyrl venv's python).

    python skyrl_episode.py {fix|control|truncated} BASE_URL INSTANCE_ID

What SkyRL's generator does per trajectory: `skyrl_gym.make(env_class, env_config, extras=row)`,
`init(prompt)`, `step(model_text)` until done, `get_metrics`, `close`; the model's replies are
scripted Hermes `<tool_call>` texts. fix: a command that does not exist (error markers), the
gold edit, submit. control: a malformed call, `ls`, submit. truncated: `ls` with max_turns 1
(the adapter submits). Prints one JSON line: the init info and every step's
output. Imports only what the venv installed (skyrl-gym and this project's client).
"""

from __future__ import annotations

import json
import sys
from importlib import metadata

import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv

from env_client.adapters.skyrl import ENV_ID, register, system_prompt

FIX = {"path": "six.py", "old": 'return s.encode("utf-8")', "new": 'return s.encode("latin-1")'}


def call(name: str, **arguments: object) -> str:
    return f"Let me run {name}.\n<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


SCRIPTS = {  # mode -> (the model's replies, max_turns)
    "fix": ([call("bash", command="no-such-tool --version"), call("str_replace", **FIX), call("submit")], 8),
    "control": (["<tool_call>{not json</tool_call>", call("bash", command="ls"), call("submit")], 8),
    "truncated": ([call("bash", command="ls")], 1),  # max_turns reached: the client submits
}


def main() -> None:
    mode, url, instance_id = sys.argv[1:4]
    register([url])  # the replicas this process's envs use (SkyRL: in its Ray entrypoint)
    replies, max_turns = SCRIPTS[mode]
    env = skyrl_gym.make(ENV_ID, env_config={}, extras={"instance_id": instance_id, "max_turns": max_turns})
    assert isinstance(env, BaseTextEnv), type(env)
    prompt = [{"role": "system", "content": system_prompt()}, {"role": "user", "content": "Fix this issue:\n\n"}]
    messages, info = env.init(prompt)
    steps = []
    for text in replies:
        out = env.step(text)
        steps.append({"observations": out["observations"], "reward": out["reward"], "done": out["done"],
                      "metadata": out["metadata"]})
        if out["done"]:
            break
    metrics = env.get_metrics()
    env.close()
    print(json.dumps({"version": metadata.version("skyrl-gym"), "env_type": type(env).__name__,
                      "spec_id": env.spec.id, "messages": messages, "info": info, "steps": steps,
                      "metrics": metrics, "aggregated": type(env).aggregate_metrics([metrics])}))


if __name__ == "__main__":
    main()
