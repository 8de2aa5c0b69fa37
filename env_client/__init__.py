"""The env server's client library: torch-free, for any RL framework (docs/client.md).

Async: `ReplicaPool` (sessions over replicas) -> `RemoteSession` (reset/step/call_tool/state/close)
over one `MuxConnection` per replica. Blocking: `EnvClient` -> `SyncSession`. Errors are typed
(`EnvClientError` and its subclasses); wire types come from the contract, `env_server.protocol`.
Install it alone with `pip install "swe-openenv[client]"`.
"""

from .config import TOKEN_ENV, ClientConfig, auth_headers, resolve_token, split_token
from .errors import (EnvAuthError, EnvCapacityError, EnvClientError, EnvConnectionError, EnvSandboxError,
                     EnvServerError, EnvSessionError, EnvTimeoutError, NoLiveReplicaError, server_error)
from .mux import MuxConnection, mux_url
from .pool import ReplicaPool
from .session import RemoteSession, observation_from_reply
from .sync import EnvClient, SyncSession

__all__ = [
    "TOKEN_ENV", "ClientConfig", "EnvAuthError", "EnvCapacityError", "EnvClient", "EnvClientError",
    "EnvConnectionError", "EnvSandboxError", "EnvServerError", "EnvSessionError", "EnvTimeoutError",
    "MuxConnection", "NoLiveReplicaError", "RemoteSession", "ReplicaPool", "SyncSession", "auth_headers",
    "mux_url", "observation_from_reply", "resolve_token", "server_error", "split_token",
]
