"""Fixtures of the adversarial sandbox suite.

* ``secret_repo``: a git repository whose base commit has the feature removed
  while its parent, a later commit, a branch, a tag, a stash, a remote, notes,
  the reflog, ORIG_HEAD and a dangling blob still hold it; the base tree also
  carries planted bytecode, type/test caches and archives of the secret code.
  Every secret contains ``MARK`` so one substring check finds any leak.
* ``backend``: every backend of the registry (``sandbox.backend_names()``: "bwrap" and
  "docker"); a missing bwrap or Docker engine skips, or fails under CI (see tests/support/requirements.py).
  A module with ``pytestmark = sandbox_support.WITH_POOLED`` also runs on "bwrap+pool": its sessions
  are claimed warm from a primed ``WarmPool`` (tests/sandbox/test_isolation.py does).
* ``harness``: opens real sessions (``async with harness.session() as sb``).
* After every test: a fresh session must still answer ``echo ok`` and no host
  process started by the test may be left.

pytest-asyncio is not a dependency: ``async def`` tests here run under
``asyncio.run`` (see ``pytest_pyfunc_call`` in conftest.py at the repository root).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import pytest

from support.requirements import missing
from sandbox import backend_names
from sandbox_support import CACHE_DIR, CommandResult, Harness, SecretRepo, host_procs, make_secret_repo, wait_no_procs

TEST_TIMEOUT_S = 240


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here) and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(TEST_TIMEOUT_S))


@pytest.fixture(scope="session")
def secret_repo(tmp_path_factory: pytest.TempPathFactory) -> SecretRepo:
    return make_secret_repo(tmp_path_factory.mktemp("secret"))


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sbcache")


# --------------------------------------------------------------- backends
def _docker_missing() -> str | None:
    try:
        import docker

        docker.from_env(timeout=5).ping()
    except Exception as exc:  # no SDK, no socket, engine down
        return f"no Docker engine answers: {exc!r}"[:200]
    return None


@pytest.fixture(scope="session", params=backend_names())
def backend(request: pytest.FixtureRequest) -> str:
    """Missing backends fail under CI / SWE_REQUIRE_<BACKEND>=1 and skip otherwise."""
    base = request.param.partition("+")[0]  # "bwrap+pool" (sandbox_support.POOLED) needs bwrap
    if base == "docker":
        import sandbox.docker  # noqa: F401 - the project's own backend: never optional

        reason = _docker_missing()
        if reason:
            missing("docker", reason)
    elif base == "bwrap":
        request.getfixturevalue("bwrap")
    return request.param


@pytest.fixture
def harness(backend: str, secret_repo: SecretRepo, cache_dir: Path) -> Harness:
    return Harness(backend, secret_repo, cache_dir)


async def _health(h: Harness) -> CommandResult:
    async with h.session() as sb:
        return await asyncio.wait_for(sb.run("echo ok", timeout_s=30), 60)


@pytest.fixture(autouse=True)
def sandbox_layer_healthy(request: pytest.FixtureRequest, cache_dir: Path):
    """After each test: a fresh session answers and no process of the test is left."""
    if not CACHE_DIR:
        CACHE_DIR.append(cache_dir)
    if "harness" not in request.fixturenames:
        yield
        return
    h: Harness = request.getfixturevalue("harness")
    baseline = set(host_procs())
    yield
    leaked = wait_no_procs(baseline)
    res = asyncio.run(_health(h))
    assert res.ok and res.output.strip() == "ok", f"sandbox layer unhealthy after the test: {res!r}"
    leaked.update(wait_no_procs(baseline, 3.0))
    if leaked:
        for pid in leaked:  # do not let one test's leak poison the next ones
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
    assert not leaked, f"host processes leaked by the test: {leaked}"
