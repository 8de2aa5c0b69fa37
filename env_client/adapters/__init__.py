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

import atexit
import json
import threading
from pathlib import Path
from typing import Any

__all__ = ["MARKER_KEYS", "shared_client", "step_info", "write_rows"]

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


_CLIENTS: dict[tuple, Any] = {}
_CLIENTS_LOCK = threading.Lock()


def shared_client(urls: tuple[str, ...], token: str | None) -> Any:
    """One ``EnvClient`` per (replicas, token) per process, closed at exit: frameworks step their
    environments from thread pools, and those share one /mux socket per replica."""
    from env_client import EnvClient

    with _CLIENTS_LOCK:
        client = _CLIENTS.get((urls, token))
        if client is None:
            client = _CLIENTS[(urls, token)] = EnvClient(list(urls), token=token)
        return client


@atexit.register
def _close_clients() -> None:
    with _CLIENTS_LOCK:
        for client in _CLIENTS.values():
            client.close()
        _CLIENTS.clear()


def write_rows(rows: list[dict[str, Any]], out: str | Path, what: str) -> int:
    """Write dataset ``rows`` to ``out``: ``.parquet`` (pyarrow) or JSON lines (``.jsonl`` / ``.json``);
    the number of rows. ``what``: who reads the file, for the error naming the suffixes."""
    from env_client.errors import MissingDependencyError

    out = Path(out)
    suffix = out.suffix.lower()
    if suffix not in (".parquet", ".jsonl", ".json"):
        raise ValueError(f"{out}: {what} reads .parquet, .jsonl or .json files")
    if suffix == ".parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise MissingDependencyError("writing a .parquet dataset needs pyarrow (pip install pyarrow), "
                                         "or write .jsonl") from None
        out.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), out)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return len(rows)
