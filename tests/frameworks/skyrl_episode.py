"""One demo-task episode through skyrl-gym's own API (run with the skyrl venv's python).

    python skyrl_episode.py {fix|control|truncated|cutoff} BASE_URL DATASET_JSONL

What SkyRL does per trajectory: its `PromptDataset` row (the first of DATASET_JSONL, written by
`env_client.adapters.skyrl_dataset`) split into `prompt`, `env_class` and the extras (every other
column); the generator's `extras["max_turns"]`, `skyrl_gym.make(env_class, env_config, extras)`,
`init(prompt)`, `step(model_text)` until done, `get_metrics`, `close`. The model's replies are
scripted Hermes `<tool_call>` texts. fix: a command that does not exist (error markers), the
gold edit, submit. control: a malformed call, `ls`, submit. truncated: the gold edit, `ls`, ...
with max_turns 2 (the adapter submits at turn 2). cutoff: a long output, the gold edit, `ls`, ...
with max_turns 2 and `submit_on_truncation` false (the episode ends at turn 2 unsubmitted), the
other settings from other sources: the URL from $SWE_OPENENV_URLS, the token and
`max_output_chars` from `register()` (winning over $ENV_SERVER_TOKEN and the env_config's
`max_output_chars`), `submit_on_truncation` from the env_config, a chosen `episode_id` in the
row. After done, one more step (SkyRL would not make it) must stay done without an env call.
Prints one JSON line. Imports only what the venv installed (skyrl-gym and this project's client).
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from importlib import metadata

import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv

from env_client.adapters.skyrl import register

FIX = {"path": "six.py", "old": 'return s.encode("utf-8")', "new": 'return s.encode("latin-1")'}
MAX_OUTPUT_CHARS = 80


def call(name: str, **arguments: object) -> str:
    return f"Let me run {name}.\n<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


LS = call("bash", command="ls")
SCRIPTS = {  # mode -> (the model's replies, max_turns)
    "fix": ([call("bash", command="no-such-tool --version"), call("str_replace", **FIX), call("submit")], 8),
    "control": (["<tool_call>{not json</tool_call>", LS, call("submit")], 8),
    # max_turns reached at turn 2: the client submits the fixed repository (graded: 1.0)
    "truncated": ([call("str_replace", **FIX), LS, LS, LS, LS], 2),
    # max_turns reached at turn 2 without submitting: reward 0.0 although the fix is in
    "cutoff": ([call("bash", command="seq 1 2000"), call("str_replace", **FIX), LS, LS, LS], 2),
}


def main() -> None:
    mode, url, dataset = sys.argv[1:4]
    replies, max_turns = SCRIPTS[mode]
    row = json.loads(open(dataset, encoding="utf-8").readline())
    prompt, env_class = row.pop("prompt"), row.pop("env_class")  # PromptDataset.__getitem__
    extras, env_config = {**row, "max_turns": max_turns}, {}  # the generator sets max_turns
    if mode == "cutoff":
        register(token=os.environ["SKYRL_TEST_TOKEN"], max_output_chars=MAX_OUTPUT_CHARS)  # urls: $SWE_OPENENV_URLS
        env_config = {"submit_on_truncation": False, "max_output_chars": 100_000}
        extras["episode_id"] = f"skyrl-cutoff-{uuid.uuid4().hex[:12]}"
    else:
        register([url])  # the replicas this process's envs use (SkyRL: in its Ray entrypoint)
    env = skyrl_gym.make(env_class, env_config=env_config, extras=extras)
    assert isinstance(env, BaseTextEnv), type(env)
    messages, info = env.init(prompt)
    steps = []
    for text in replies:
        out = env.step(text)
        steps.append({"observations": out["observations"], "reward": out["reward"], "done": out["done"],
                      "metadata": out["metadata"]})
        if out["done"]:
            break
    after = env.step(call("bash", command="echo after-done"))  # past done: no env call
    metrics = env.get_metrics()
    env.close()
    print(json.dumps({"version": metadata.version("skyrl-gym"), "env_type": type(env).__name__,
                      "spec_id": env.spec.id, "env_class": env_class, "extras": extras, "messages": messages,
                      "info": info, "steps": steps, "after_done": {k: after[k] for k in ("observations", "reward",
                                                                                          "done")},
                      "metrics": metrics, "aggregated": type(env).aggregate_metrics([metrics]),
                      "max_output_chars": MAX_OUTPUT_CHARS}))


if __name__ == "__main__":
    main()
