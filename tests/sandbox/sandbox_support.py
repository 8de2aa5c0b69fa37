"""Shared helpers of the adversarial sandbox suite (fixture repo, sessions, probes).

Every secret holds ``MARK``; commands never spell it (they build it from halves),
so its presence in any output or file is a leak.
"""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import io
import os
import shutil
import tarfile
import textwrap
import time
import uuid
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.git_repos import git

from sandbox import CommandResult, Limits, SandboxConfig, WarmPool, WorkspaceSpec, backend_names, open_sandbox

MARK = "QZV7" + "SECRET"
SH_MARK = '"QZV7""SECRET"'  # the shell spelling
PY_MARK = '("QZV7"+"SECRET")'  # the Python spelling
RUN_TOKEN = "swe-sbx-test-" + uuid.uuid4().hex[:12]
CACHE_DIR: list[Path] = []  # set by conftest: the run's sandbox cache

# A backend variant of the ``backend``/``harness`` fixtures: bwrap sessions claimed from a primed
# WarmPool (a jail started ahead of time, then handed out), for the isolation suite.
POOLED = "bwrap+pool"
# ``pytestmark = WITH_POOLED`` in a module runs its harness tests on every backend and on POOLED.
WITH_POOLED = pytest.mark.parametrize("backend", [*backend_names(), POOLED], indirect=True, scope="session")


# ------------------------------------------------------------------ the repo
def _secret_src(tag: str) -> str:
    return f'def feature():\n    return "{MARK}-{tag}"\n'


BASE_CORE = 'def feature():\n    raise NotImplementedError("removed for the task")\n'


def _pyc_bytes(src: str, name: str, *, unchecked: bool) -> bytes:
    """Bytecode of ``src`` (hash-based and unchecked: loaded whatever the source)."""
    import importlib._bootstrap_external as be

    code = compile(src, name, "exec")
    if unchecked:
        return bytes(be._code_to_hash_pyc(code, importlib.util.source_hash(src.encode()), checked=False))
    return bytes(be._code_to_timestamp_pyc(code, 0, len(src.encode())))


def _zip_with(path: Path, members: dict[str, str]) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in members.items():
            zf.writestr(name, text)


def _tgz_with(path: Path, members: dict[str, str]) -> None:
    with tarfile.open(path, "w:gz") as tf:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))


# Paths (relative to the repo) of planted caches and archives, all purged at start.
PLANTED = (
    "pkg/__pycache__/core.cpython-311.pyc",  # tracked, unchecked-hash: loads whatever core.py says
    "pkg/__pycache__/helpers.cpython-311.pyc",  # untracked, timestamp pyc matching helpers.py
    "ghost.pyc",  # standalone: importable as `ghost`
    "dist/secret.zip", "dist/secretpkg-0.1-py3-none-any.whl", "dist/secret.tar.gz", "dist/secret.pyz",
    ".mypy_cache/3.11/pkg/core.data.json", ".pytest_cache/v/cache/lastfailed",
    ".pytype/pyi/pkg/core.pyi",
)


@dataclass
class SecretRepo:
    path: Path
    base_commit: str
    secret_objects: dict[str, str] = field(default_factory=dict)  # what -> sha
    remote_path: Path | None = None
    host_secret_file: Path | None = None


def make_secret_repo(root: Path) -> SecretRepo:
    """Build the fixture repository under ``root`` (see module docstring)."""
    repo = root / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "pkg/__init__.py").write_text("")
    (repo / "README.md").write_text("fixture\n")
    (repo / "tests/test_core.py").write_text(
        "from pkg.core import feature\n\ndef test_feature():\n    assert feature()\n")
    (repo / "pkg/helpers.py").write_text("def helper():\n    return 1\n")
    secrets: dict[str, str] = {}

    # parent: the feature exists
    (repo / "pkg/core.py").write_text(_secret_src("parent"))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "feature")
    secrets["parent"] = git(repo, "rev-parse", "HEAD").strip()
    secrets["parent_blob"] = git(repo, "rev-parse", "HEAD:pkg/core.py").strip()

    # base: feature removed, caches and archives of the secret code committed too
    (repo / "pkg/core.py").write_text(BASE_CORE)
    for rel, data in {
        "pkg/__pycache__/core.cpython-311.pyc": _pyc_bytes(_secret_src("pyc"), "core.py", unchecked=True),
        "ghost.pyc": _pyc_bytes(_secret_src("ghost"), "ghost.py", unchecked=False),
        ".mypy_cache/3.11/pkg/core.data.json": f'{{"names": "{MARK}-mypy"}}'.encode(),
        ".pytest_cache/v/cache/lastfailed": f'{{"tests/test_core.py::{MARK}-lastfailed": true}}'.encode(),
        ".pytype/pyi/pkg/core.pyi": f"def feature() -> str: ...  # {MARK}-pytype\n".encode(),
    }.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_bytes(data)
    (repo / "dist").mkdir()
    _zip_with(repo / "dist/secret.zip", {"secretmod.py": _secret_src("zip")})
    _zip_with(repo / "dist/secretpkg-0.1-py3-none-any.whl",
              {"secretpkg/__init__.py": _secret_src("whl"),
               "secretpkg-0.1.dist-info/METADATA": "Name: secretpkg\n"})
    _zip_with(repo / "dist/secret.pyz", {"__main__.py": f'print("{MARK}-pyz")\n'})
    _tgz_with(repo / "dist/secret.tar.gz", {"secret/core.py": _secret_src("tgz")})
    git(repo, "add", "-Af")
    git(repo, "commit", "-qm", "remove feature")
    base = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "repack", "-qd")  # older objects packed, later ones loose

    # a later commit and a branch hold the solution
    (repo / "pkg/core.py").write_text(_secret_src("future"))
    git(repo, "commit", "-qam", "future fix")
    secrets["future"] = git(repo, "rev-parse", "HEAD").strip()
    secrets["future_blob"] = git(repo, "rev-parse", "HEAD:pkg/core.py").strip()
    git(repo, "tag", "-a", "v1", "-m", f"release {MARK}-tag")
    secrets["tag"] = git(repo, "rev-parse", "v1").strip()
    git(repo, "notes", "add", "-m", f"{MARK}-note", "HEAD")
    secrets["note_blob"] = git(repo, "notes", "list", "HEAD").strip()
    git(repo, "checkout", "-qb", "fix", base)
    (repo / "pkg/core.py").write_text(_secret_src("branch"))
    git(repo, "commit", "-qam", "branch fix")
    secrets["branch"] = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "checkout", "-q", "main")
    git(repo, "reset", "-q", "--hard", base)  # ORIG_HEAD and the reflog keep the future

    # a stash
    (repo / "pkg/core.py").write_text(_secret_src("stash"))
    git(repo, "stash", "-q")
    secrets["stash"] = git(repo, "rev-parse", "refs/stash").strip()

    # a remote with its own secret commit, fetched
    remote = root / "remote.git"
    git(root, "clone", "-q", "--bare", str(repo), str(remote))
    work = root / "remote-work"
    git(root, "clone", "-q", str(remote), str(work))
    (work / "pkg/core.py").write_text(_secret_src("remote"))
    git(work, "commit", "-qam", "remote fix")
    git(work, "push", "-q", "origin", "HEAD:main")
    git(repo, "remote", "add", "origin", str(remote))
    git(repo, "fetch", "-q", "origin")
    secrets["remote"] = git(repo, "rev-parse", "origin/main").strip()
    shutil.rmtree(work)

    # a dangling blob, then pack the refs
    secrets["dangling"] = git(repo, "hash-object", "-w", "--stdin", input=_secret_src("dangling").encode()).strip()
    git(repo, "pack-refs", "--all")

    # untracked: a timestamp pyc whose header matches helpers.py's mtime and size
    helpers = repo / "pkg/helpers.py"
    secret_helpers = f'def helper():\n    return "{MARK}-pycts"\n'
    base_helpers = helpers.read_text()
    base_helpers = base_helpers + "#" * (len(secret_helpers) - len(base_helpers) - 1) + "\n"
    helpers.write_text(base_helpers)
    st = helpers.stat()
    import importlib._bootstrap_external as be

    code = compile(secret_helpers, "helpers.py", "exec")
    (repo / "pkg/__pycache__/helpers.cpython-311.pyc").write_bytes(
        bytes(be._code_to_timestamp_pyc(code, int(st.st_mtime), st.st_size)))
    git(repo, "update-index", "--assume-unchanged", "pkg/helpers.py")

    host_secret = root / "host-only.txt"
    host_secret.write_text(f"{MARK}-hostfile\n")
    return SecretRepo(repo, base, secrets, remote, host_secret)


# ---------------------------------------------------------------- harness
class Harness:
    """Opens real sessions of one backend on the fixture repository.

    ``backend`` may be a registered backend or ``"<backend>+pool"`` (:data:`POOLED`): then every
    session is claimed warm from a :class:`WarmPool` primed for it (``self.backend`` is the plain
    backend, ``self.pooled`` is True)."""

    def __init__(self, backend: str, repo: SecretRepo, cache_dir: Path) -> None:
        self.backend, plus, variant = backend.partition("+")
        self.pooled = bool(plus)
        assert variant in ("", "pool"), backend
        self.repo = repo
        self.cache_dir = cache_dir

    def config(self, policy: dict | None = None, **limits) -> SandboxConfig:
        cfg = SandboxConfig(backend=self.backend, cache_dir=self.cache_dir, limits=Limits(**limits))
        if policy:
            cfg.policy = cfg.policy.model_copy(update=policy)
        return cfg

    def spec(self, repo_path: Path | None = None, base_commit: str | None | bool = True,
             env: dict[str, str] | None = None) -> WorkspaceSpec:
        if base_commit is True:
            base_commit = self.repo.base_commit if repo_path is None else None
        return WorkspaceSpec(repo_path=repo_path or self.repo.path, base_commit=base_commit,
                             env={"SWE_TEST_RUN": RUN_TOKEN, **(env or {})})

    @contextlib.asynccontextmanager
    async def session(self, spec: WorkspaceSpec | None = None, policy: dict | None = None, **limits):
        if self.pooled:
            async with self.pooled_session(spec, policy, **limits) as sb:
                yield sb
            return
        sb = await open_sandbox(spec or self.spec(), self.config(policy, **limits))
        try:
            yield sb
        finally:
            await sb.close()

    @contextlib.asynccontextmanager
    async def pooled_session(self, spec: WorkspaceSpec | None = None, policy: dict | None = None, **limits):
        """A session claimed from a pool of its own, primed first: a jail that was started before the
        claim and waited idle. The pool (and the jail its refill starts) is closed with the session."""
        spec, config = spec or self.spec(), self.config(policy, **limits)
        pool = WarmPool(size=1, per_key=1)
        try:
            assert await pool.warm(spec, config) == 1, f"the pool could not pre-start a jail: {pool.stats()}"
            sb = await pool.open(spec, config)
            assert pool.stats()["claims_warm"] == 1, f"the claim was not warm: {pool.stats()}"
            try:
                yield sb
            finally:
                await sb.close()
        finally:
            await pool.close()


async def sh(sb, command: str, timeout: float = 60) -> CommandResult:
    return await sb.run(command, timeout_s=timeout)


async def py(sb, code: str, timeout: float = 60) -> CommandResult:
    """Run Python code inside the sandbox (base64 in the command: no quoting, no MARK)."""
    blob = base64.b64encode(textwrap.dedent(code).encode()).decode()
    return await sb.run(f"python3 -c \"import base64;exec(base64.b64decode('{blob}'))\"",
                        timeout_s=timeout)


# A probe that checks only that something is ABSENT from its output prints DONE as its last
# action: a probe that crashed early (syntax error, exception) then fails instead of passing.
DONE = "PROBE-DONE"


def assert_done(res: CommandResult) -> None:
    assert res.output.rstrip().endswith(DONE), f"the probe did not run to its end: {res!r}"


def assert_no_secret(*texts: str | bytes) -> None:
    for text in texts:
        if isinstance(text, bytes):
            text = text.decode(errors="replace")
        assert MARK not in text, f"secret leaked:\n{text[:3000]}"


# ------------------------------------------------- health and leak checks
def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def host_procs(*needles: str) -> dict[int, str]:
    """Host processes that belong to this test run (or whose cmdline holds a needle).

    A process belongs to the run when its environment holds RUN_TOKEN (every
    process of a session inherits it), its command line names the run's cache
    directory, or it descends from this pytest process.
    """
    me = os.getpid()
    cache = str(CACHE_DIR[0]) if CACHE_DIR else "\0"
    parents: dict[int, int] = {}
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        pid = int(entry)
        cmd = _read(f"/proc/{pid}/cmdline").replace(b"\0", b" ").decode(errors="replace").strip()
        stat = _read(f"/proc/{pid}/stat").decode(errors="replace")
        if stat:
            with contextlib.suppress(Exception):
                parents[pid] = int(stat.rsplit(")", 1)[1].split()[1])
        if not stat or stat.rsplit(")", 1)[1].split()[0] == "Z":
            continue  # gone, or a zombie (its parent reaps it)
        env = _read(f"/proc/{pid}/environ")
        if RUN_TOKEN.encode() in env or cache in cmd or any(n in cmd for n in needles):
            found[pid] = cmd
    for pid in parents:  # descendants of pytest
        p, hops = pid, 0
        while p in parents and hops < 64:
            p, hops = parents[p], hops + 1
            if p == me:
                cmd = _read(f"/proc/{pid}/cmdline").replace(b"\0", b" ").decode(errors="replace")
                if cmd:
                    found[pid] = cmd
                break
    return found



def runtime_pids() -> list[int]:
    """Host pids of this test run's in-sandbox runtimes, whatever else runs on the host.

    The runtime's own environment is empty, but the agent's shell, its child, carries
    RUN_TOKEN: the runtimes are the shells' parents whose command line runs runtime.py.
    """
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and RUN_TOKEN.encode() in _read(f"/proc/{entry}/environ"):
            stat = _read(f"/proc/{entry}/stat").decode(errors="replace")
            with contextlib.suppress(IndexError, ValueError):
                parent = int(stat.rsplit(")", 1)[1].split()[1])
                if b"-I\0-S\0/.swe/runtime.py" in _read(f"/proc/{parent}/cmdline"):
                    found.add(parent)
    return sorted(found)


def wait_no_procs(baseline: set[int], seconds: float = 8.0, *needles: str) -> dict[int, str]:
    deadline = time.monotonic() + seconds
    while True:
        left = {p: c for p, c in host_procs(*needles).items() if p not in baseline}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


