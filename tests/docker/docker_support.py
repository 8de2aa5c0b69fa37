"""Helpers shared by the docker backend tests (imported by name: tests/docker is on sys.path)."""

from __future__ import annotations

import time


def sandbox_containers(client, mine: bool = True) -> set[str]:
    """Ids of sandbox containers: this process's only (others may run tests beside us)."""
    from sandbox.docker_engine import LABEL, LABEL_OWNER, docker_engine

    labels = [f"{LABEL}=1"] + ([f"{LABEL_OWNER}={docker_engine().owner}"] if mine else [])
    # sparse: no inspect per container, which fails when one is removed between the list and the inspect
    return {c.id for c in client.containers.list(all=True, filters={"label": labels}, sparse=True)}


def wait_gone(client, ids: set[str], seconds: float = 10.0) -> set[str]:
    """The containers of ``ids`` still present after up to ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        left = sandbox_containers(client, mine=False) & ids
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)
