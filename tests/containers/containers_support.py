"""Helpers of the container deployment tests (imported by name: tests/containers is on sys.path)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from support.requirements import missing

from env_client.processes import free_port

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "compose.yaml"
ENV_UID = 10001  # the env image's non-root user; owns the task pack copy
TIMINGS: dict[str, float] = {}  # printed at the end of the deployments' teardown
PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"


def unavailable(reason: str) -> None:
    """Skip, or fail when CI=true or SWE_REQUIRE_DOCKER=1 says the engine must be there."""
    missing("docker", reason)


def compose_command() -> list[str] | None:
    """`docker-compose` (v1, Debian's) or `docker compose` (v2); SWE_COMPOSE overrides."""
    if os.environ.get("SWE_COMPOSE"):
        return os.environ["SWE_COMPOSE"].split()
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"],
                                                 capture_output=True).returncode == 0:
        return ["docker", "compose"]
    return None


def free_port_pair() -> int:
    """A base port b with b and b+1 free on 127.0.0.1 (other people run servers here too)."""
    for _ in range(200):
        base = free_port()
        if base > 65000:
            continue
        try:
            with socket.socket() as s2:
                s2.bind(("127.0.0.1", base + 1))
        except OSError:
            continue
        return base
    raise RuntimeError("no two consecutive free ports")


def project_objects(client, project: str) -> dict[str, list[str]]:
    """Containers, networks and volumes the engine still holds for compose project ``project``."""
    flt = {"label": f"{PROJECT_LABEL}={project}"}
    return {
        "containers": [c.name for c in client.containers.list(all=True, filters=flt)],
        "networks": [n.name for n in client.networks.list(filters=flt)]
        + [n.name for n in client.networks.list(names=[f"{project}_default"]) if n.name == f"{project}_default"],
        "volumes": [v.name for v in client.volumes.list(filters=flt)]
        + [v.name for v in client.volumes.list() if v.name.startswith(f"{project}_")],
    }


def wait_healthy(client, project: str, n: int, timeout_s: float) -> tuple[list, float]:
    """The ``n`` env containers of ``project`` once all report healthy, and the seconds it took."""
    start = time.monotonic()
    flt = {"label": [f"{PROJECT_LABEL}={project}", f"{SERVICE_LABEL}=env"]}
    states: dict[str, str] = {}
    while time.monotonic() - start < timeout_s:
        containers = client.containers.list(all=True, filters=flt)
        states = {c.name: (c.attrs["State"].get("Health") or {}).get("Status", c.status) for c in containers}
        if len(containers) == n and all(s == "healthy" for s in states.values()):
            return containers, time.monotonic() - start
        if any(c.status in ("exited", "dead") for c in containers):
            break
        time.sleep(0.5)
    logs = "\n".join(f"--- {c.name}\n{c.logs(tail=30).decode(errors='replace')}"
                     for c in client.containers.list(all=True, filters=flt))
    raise AssertionError(f"env replicas not healthy after {time.monotonic() - start:.0f}s: {states}\n{logs}")


def host_port(container, port: int = 8000) -> int:
    container.reload()
    bindings = container.attrs["NetworkSettings"]["Ports"][f"{port}/tcp"]
    return int(bindings[0]["HostPort"])


def container_ips(container) -> list[str]:
    nets = container.attrs["NetworkSettings"]["Networks"].values()
    return [n["IPAddress"] for n in nets if n.get("IPAddress")] + [n["Gateway"] for n in nets if n.get("Gateway")]
