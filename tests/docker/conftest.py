"""Fixtures of the docker backend's own tests (a real engine and the real image).

Without an engine or the sandbox image these tests skip, unless CI=true or
``SWE_REQUIRE_DOCKER=1`` turns that into a failure (tests/support/requirements.py). After every
test no sandbox container created during it may be left.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from docker_support import sandbox_containers, wait_gone
from support.git_repos import commit_files
from support.requirements import docker_engine_client, missing

from sandbox import DockerBackend, SandboxConfig, WorkspaceSpec

IMAGE = os.environ.get("SWE_SANDBOX_IMAGE", "swe-openenv-sandbox:latest")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.docker)
            if not item.get_closest_marker("timeout"):
                item.add_marker(pytest.mark.timeout(120))


@pytest.fixture(scope="session")
def client():
    return docker_engine_client()


@pytest.fixture(scope="session")
def image(client) -> str:
    import docker.errors

    try:
        client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        missing("docker", f"image {IMAGE} missing (run docker/build-images.sh)")
    return IMAGE


@pytest.fixture(autouse=True)
def no_leaked_containers(request: pytest.FixtureRequest):
    """Fail a test that leaves a sandbox container behind (and remove it)."""
    if "client" not in request.fixturenames:
        yield
        return
    client = request.getfixturevalue("client")
    before = sandbox_containers(client)
    yield
    leaked = wait_gone(client, sandbox_containers(client) - before, seconds=5.0)
    for cid in leaked:
        client.api.remove_container(cid, force=True)
    assert not leaked, f"sandbox containers leaked: {leaked}"


@pytest.fixture(scope="session")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("dockerrepo") / "repo"
    commit_files(path, {"pkg/__init__.py": "", "pkg/core.py": "def f():\n    return 41\n"})
    return path


@pytest.fixture(scope="session")
def config(tmp_path_factory: pytest.TempPathFactory, image: str) -> SandboxConfig:
    return SandboxConfig(backend=DockerBackend(image=image), cache_dir=tmp_path_factory.mktemp("dcache"))


@pytest.fixture
def spec(repo: Path) -> WorkspaceSpec:
    return WorkspaceSpec(repo_path=repo)
