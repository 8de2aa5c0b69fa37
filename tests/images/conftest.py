"""Fixtures of the image-store tests: a Docker engine and a real registry on loopback.

``registry`` (session) is one :class:`registry.LoopbackRegistry` (Debian's
``docker-registry`` on 127.0.0.1:PORT, storage in a temporary directory), stopped by its pid
at the end. Without the ``docker-registry`` binary (apt ``docker-registry``, installed by
.ci/system-deps.sh) or without an engine these tests skip, unless CI=true or
``SWE_REQUIRE_REGISTRY=1`` / ``SWE_REQUIRE_DOCKER=1`` turns that into a failure
(tests/support/requirements.py). ``own_registry`` is a fresh one for a single test, which may
``stop()`` it (an unreachable registry) without disturbing the shared one.

``source_image`` is the small offline base ``swe-openenv-base:bookworm`` (``make
docker-setup``); push a unique image derived from it with
``push_unique_image(client, registry, source_image, "name")``. For task-level tests use a
SWE-bench-layout image instead (``docker images | grep swe-openenv-layout``, built by
docker/swebench_layout.py; :func:`registry.layout_images` lists them, smallest first): the
``layout_image`` fixture gives the smallest one (a few hundred MB; its first push takes
~10 s, later pushes of images derived from it only send the new config).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from registry_support import LoopbackRegistry, RegistryError, layout_images, registry_binary
from support.requirements import docker_engine_client, missing

SOURCE_IMAGE = os.environ.get("SWE_REGISTRY_SOURCE_IMAGE", "swe-openenv-base:bookworm")


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


def _start_registry() -> LoopbackRegistry:
    if registry_binary() is None:
        missing("registry", "docker-registry is not on PATH (apt-get install docker-registry; "
                            ".ci/system-deps.sh installs it)")
    try:
        return LoopbackRegistry().start()
    except RegistryError as exc:
        missing("registry", f"docker-registry did not start: {exc}"[:2000])


@pytest.fixture(scope="session")
def registry(client):
    """One loopback registry for the session; stopped (by pid) and removed at the end."""
    reg = _start_registry()
    try:
        yield reg
    finally:
        reg.close()


@pytest.fixture
def own_registry(client):
    """A registry of this test's own, which it may stop; stopped and removed after it."""
    reg = _start_registry()
    try:
        yield reg
    finally:
        reg.close()


@pytest.fixture(scope="session")
def source_image(client) -> str:
    """A small local image to derive pushed images from (swe-openenv-base:bookworm)."""
    import docker.errors

    try:
        client.images.get(SOURCE_IMAGE)
    except docker.errors.ImageNotFound:
        missing("docker", f"image {SOURCE_IMAGE} missing (run make docker-setup)")
    return SOURCE_IMAGE


@pytest.fixture(scope="session")
def layout_image(client) -> str:
    """The smallest local SWE-bench-layout image (for task-level pull-on-demand tests)."""
    images = layout_images(client)
    if not images:
        missing("docker", "no swe-openenv-layout/* image (built by docker/swebench_layout.py, "
                          "e.g. by tests/docker/test_swebench_layout.py)")
    return images[0]
