"""Adapters that let other RL frameworks drive env replicas through their own environment APIs.

One module per framework, each importing its framework only when it is itself imported
(`import env_client` never does):

- `env_client.adapters.skyrl`: a skyrl-gym `BaseTextEnv` (docs/frameworks/skyrl.md);
  `env_client.adapters.skyrl_dataset` (framework-free) writes the dataset SkyRL trains on from
  the env's task file (`python -m env_client.adapters.skyrl_dataset --tasks T --out train.parquet`).
- `env_client.adapters.verifiers`: a verifiers v1 `Taskset` + `Toolset` (docs/frameworks/verifiers.md).
- `env_client.adapters.verl`: VeRL tools (`BaseTool`), an agent loop with one episode per trajectory
  and the `swe_openenv` advantage estimator (docs/frameworks/verl.md).
- `env_client.adapters.minisweagent`: mini-swe-agent's `Environment` over the `bash-only` profile
  (docs/frameworks/mini-swe-agent.md).

All point at running replicas (URLs and a bearer token); none launches an environment.
Helpers they share (the per-step info every framework gets) live here, framework-free.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MARKER_KEYS", "step_info"]

#: per-step keys copied from the env's observation metadata into a framework's step info
MARKER_KEYS = ("episode_id", "instance_id", "step", "error_kind", "hint_template_key", "error_source")
_FINAL_KEYS = ("resolved", "tests_passed", "tests_failed", "grade_error", "grade_error_source", "reward_hacking")


def step_info(observation: dict[str, Any], tool_name: str | None = None) -> dict[str, Any]:
    """The episode id, instance id, step and (on a failed call) the error-site markers of one
    observation, plus the grading summary once it is done; keys the env left out stay out."""
    meta = observation.get("metadata") or {}
    info: dict[str, Any] = {k: meta[k] for k in MARKER_KEYS if k in meta}
    if tool_name is not None:
        info["tool_name"] = tool_name
    if observation.get("done"):
        info.update({k: meta[k] for k in _FINAL_KEYS if k in meta})
        info["reward"] = observation.get("reward")
    return info
