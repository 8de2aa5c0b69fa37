"""The env server's client library: torch-free, for any RL framework (docs/client.md).

Async: `ReplicaPool` (sessions over replicas) -> `RemoteSession` over one `MuxConnection` per
replica (`/mux`), or `WsSession` over its own OpenEnv `/ws` socket; both reset / step /
call_tool / state / close. HTTP: `AsyncHttpClient` (health, metadata, episodes, state(t),
traces, export). Blocking: `EnvClient` -> `SyncSession`. Training records: `RolloutRecord`
(`session.export()`, `write_jsonl`, `write_parquet`). Errors are typed (`EnvClientError` and
its subclasses); wire types come from the contract (`contract`), the only project package it imports.
Install it alone, from a checkout: `pip install -e ".[client]"`.
"""

from .config import TOKEN_ENV, ClientConfig, auth_headers, resolve_token, split_token
from .errors import (EnvAuthError, EnvCapacityError, EnvClientError, EnvConnectionError, EnvForkError,
                     EnvGraderBusyError, EnvImageError, EnvNotFoundError,
                     EnvRequestError, EnvSandboxError, EnvServerError, EnvSessionError, EnvTimeoutError,
                     MissingDependencyError, NoLiveReplicaError, http_error, server_error)
from .export import (EpisodeRecorder, PolicyTurn, RolloutRecord, TurnRecord, preference_pairs, read_jsonl, read_parquet,
                     rollout_from_states, rollout_from_trace, sft_examples, write_jsonl, write_parquet)
from .http import AsyncHttpClient
from .mux import MuxConnection
from .pool import ReplicaPool
from .session import RemoteSession, SessionBase, observation_from_reply
from .sync import EnvClient, SyncSession
from .urls import http_base, mux_url, ws_url
from .ws import WsReplica, WsSession

__all__ = [
    "TOKEN_ENV", "AsyncHttpClient", "ClientConfig", "EnvAuthError", "EnvCapacityError", "EnvClient",
    "EnvClientError", "EnvConnectionError", "EnvForkError", "EnvGraderBusyError", "EnvImageError", "EnvNotFoundError", "EnvRequestError", "EnvSandboxError",
    "EnvServerError", "EnvSessionError", "EnvTimeoutError", "EpisodeRecorder", "MissingDependencyError",
    "MuxConnection", "NoLiveReplicaError", "PolicyTurn", "RemoteSession", "ReplicaPool", "RolloutRecord",
    "SessionBase", "SyncSession", "TurnRecord", "WsReplica", "WsSession", "auth_headers", "http_base",
    "http_error", "mux_url", "observation_from_reply", "preference_pairs", "read_jsonl", "read_parquet",
    "resolve_token", "rollout_from_states", "rollout_from_trace", "server_error", "sft_examples",
    "split_token", "write_jsonl", "write_parquet", "ws_url",
]
