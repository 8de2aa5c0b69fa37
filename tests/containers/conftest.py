"""tests/containers: the Docker image, compose and cluster-manifest tests.

Holds the fixtures several modules share: the engine, the compose binary, the offline-built env
image and the small real task pack (session-scoped: built once per run).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from containers_support import ENV_UID, ROOT, TIMINGS, compose_command, unavailable


@pytest.fixture(scope="session")
def engine():
    try:
        import docker

        client = docker.from_env(timeout=60)
        client.ping()
    except Exception as exc:  # no SDK, no socket, engine down
        unavailable(f"no Docker engine answers: {exc!r}"[:300])
    return client


@pytest.fixture(scope="session")
def compose(engine) -> list[str]:
    cmd = compose_command()
    if cmd is None:
        unavailable("neither docker-compose nor `docker compose` is installed")
    return cmd


@pytest.fixture(scope="session")
def env_image(engine) -> str:
    """Build (or find up to date) the env image offline; cached by its build-inputs label."""
    start = time.monotonic()
    proc = subprocess.run(["bash", str(ROOT / "docker" / "build-env-image.sh")], capture_output=True, text=True,
                          timeout=1200, cwd=ROOT)
    TIMINGS["image_build_s"] = time.monotonic() - start
    assert proc.returncode == 0, f"build-env-image.sh failed:\n{proc.stderr[-4000:]}"
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def task_pack(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    """A copy of the small real task pack owned by the container's uid (git checks owners)."""
    from support.taskpacks import build_small_pack

    src = build_small_pack(3).parent
    dest = tmp_path_factory.mktemp("pack") / "pack"
    shutil.copytree(src, dest, symlinks=True)
    if os.geteuid() == 0:
        for path in [dest, *dest.rglob("*")]:
            os.lchown(path, ENV_UID, ENV_UID)
    dest.parent.chmod(0o755)
    tasks = [json.loads(line) for line in (dest / "tasks.jsonl").read_text().splitlines() if line.strip()]
    return dest, tasks
