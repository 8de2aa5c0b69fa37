"""Pristine, scrubbed workspace templates, prepared once per (repository, commit).

A template is the task's tree at its base commit (a host directory, or the
repository folder of an image-resident task's image: ``image_workspace.py``), with
its ``setup_patch`` applied, with bytecode, caches and
archives of code removed, in a fresh git repository holding exactly one commit
(no remotes, no other refs, no reflog, no stray objects), verified after it is
built. Sessions never write to it: bwrap mounts it as the read-only lower layer
of an overlay, docker copies it.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import lzma
import os
import re
import shutil
import tarfile
import tempfile
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .backends import DockerBackend
from .docker_engine import docker_client
from .git import GitError, run_git
from .image_workspace import apply_setup_patch, export_image_tree, image_id
from .models import HardeningPolicy, SandboxConfig, WorkspaceError, WorkspaceSpec

TEMPLATE_FORMAT = "4"  # bump when the scrub changes, so old templates are rebuilt
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


@dataclass(frozen=True)
class Template:
    path: Path  # the scrubbed tree (with its one-commit .git)
    base_commit: str  # sha of that one commit


def cache_root(config: SandboxConfig) -> Path:
    root = config.cache_dir or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "swe-openenv"
    root.mkdir(parents=True, exist_ok=True)
    return root


def git(repo: Path, *args: str, input: bytes | None = None, env: dict[str, str] | None = None) -> str:
    """Run git on a *trusted* repository (the task's, or our template), never an agent's
    (``sandbox/git.py``: the host's one git hardening; commits get ``GIT_IDENTITY``)."""
    try:
        return run_git(args, repo, input=input, env=env).stdout.decode(errors="replace")
    except GitError as exc:
        raise WorkspaceError(str(exc)) from None


def _source_key(spec: WorkspaceSpec, config: SandboxConfig) -> str:
    policy = config.policy
    if spec.image_resident:
        source = f"image:{image_id(docker_client(DockerBackend.of(config).url), spec.image)}:{spec.image_workdir}"
    else:
        source = _host_source(spec)
    if spec.setup_patch.strip():
        source += ":setup:" + hashlib.sha256(spec.setup_patch.encode()).hexdigest()
    material = "\n".join([TEMPLATE_FORMAT, source, policy.model_dump_json(include={
        "purge_dirs", "purge_suffixes", "archive_suffixes", "git_history"})])
    return hashlib.sha256(material.encode()).hexdigest()[:24]


def _host_source(spec: WorkspaceSpec) -> str:
    assert spec.repo_path is not None
    repo = spec.repo_path.resolve()
    if not repo.is_dir():
        raise WorkspaceError(f"repo_path {spec.repo_path} is not a directory")
    if (repo / ".git").exists():
        commit = git(repo, "rev-parse", "--verify", f"{spec.base_commit or 'HEAD'}^{{commit}}").strip()
        source = f"git:{repo}:{commit}:{spec.base_commit is None}"
        if spec.base_commit is None:  # the tree as it is, uncommitted changes included
            source += ":" + _tree_fingerprint(repo)
    elif spec.base_commit:
        raise WorkspaceError(f"base_commit {spec.base_commit} given but {repo} is not a git repository")
    else:
        source = f"dir:{repo}:{_tree_fingerprint(repo)}"
    return source


def _tree_fingerprint(root: Path) -> str:
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        for name in sorted(filenames):
            st = os.lstat(os.path.join(dirpath, name))
            h.update(f"{os.path.relpath(os.path.join(dirpath, name), root)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def prepare_template(spec: WorkspaceSpec, config: SandboxConfig) -> Template:
    """Build (or reuse) the scrubbed template of ``spec``. Blocking: call in a thread."""
    key = _source_key(spec, config)
    dest = cache_root(config) / "templates" / key
    with _locks_guard:
        lock = _locks.setdefault(key, threading.Lock())
    with lock:
        marker = dest / ".swe-template"
        if marker.exists():
            return Template(dest / "tree", marker.read_text().strip())
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=dest.parent))
        try:
            tree = tmp / "tree"
            tree.mkdir()
            _export_tree(spec, tree, config)
            apply_setup_patch(tree, spec.setup_patch)
            purge(tree, config.policy)
            base = _squash_git(tree)
            verify_scrubbed(tree, base)
            (tmp / ".swe-template").write_text(base + "\n")
            try:
                os.rename(tmp, dest)
            except OSError:  # another process won the race: use theirs
                shutil.rmtree(tmp, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return Template(dest / "tree", (dest / ".swe-template").read_text().strip())


def _export_tree(spec: WorkspaceSpec, tree: Path, config: SandboxConfig) -> None:
    if spec.image_resident:
        export_image_tree(docker_client(DockerBackend.of(config).url), spec, tree)
        return
    assert spec.repo_path is not None
    repo = spec.repo_path.resolve()
    if (repo / ".git").exists() and spec.base_commit is not None:
        index = tree.parent / "export-index"
        env = {"GIT_INDEX_FILE": str(index)}
        git(repo, "read-tree", spec.base_commit, env=env)
        git(repo, "checkout-index", "--all", f"--prefix={tree}/", env=env)
        index.unlink(missing_ok=True)
    else:
        shutil.copytree(repo, tree, symlinks=True, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(".git"))


CODE_SUFFIXES = (".py", ".pyc", ".pyo", ".pyi", ".pyx", ".pyw")
_PY_SOURCE = re.compile(rb"^[ \t]*(def|class|import|from|async def)[ \t]", re.MULTILINE)
_SNIFF = 64 * 1024


def _is_bytecode(head: bytes) -> bool:
    """A CPython 3 .pyc header: a 16-bit magic number in the 3000s followed by CRLF."""
    return len(head) >= 16 and head[2:4] == b"\r\n" and 2900 <= int.from_bytes(head[:2], "little") < 4000


def _holds_code(data: bytes) -> bool:
    return _is_bytecode(data[:16]) or bool(_PY_SOURCE.search(data[:_SNIFF]))


def _is_code_archive(path: Path) -> bool:
    """True if the archive holds Python source or bytecode (or cannot be inspected)."""
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                return any(n.endswith(CODE_SUFFIXES) for n in zf.namelist())
        if tarfile.is_tarfile(path):
            with tarfile.open(path) as tf:
                return any(n.endswith(CODE_SUFFIXES) for n in tf.getnames())
    except (OSError, zipfile.BadZipFile, tarfile.TarError, EOFError, ValueError):
        return True
    return True  # a format we cannot look into (7z, rar): assume the worst


def _content_leaks_code(path: Path) -> bool:
    """Sniff a file by content, whatever its name: bytecode, an archive of code, or a
    compressed stream whose payload is Python source, bytecode or a tar of code."""
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError:
        return False
    if _is_bytecode(head):
        return True
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")) or head[257:262] == b"ustar":
        return _is_code_archive(path)
    if head.startswith((b"7z\xbc\xaf\x27\x1c", b"Rar!\x1a\x07", b"\x28\xb5\x2f\xfd")):
        return True  # 7z, rar, zstd: not inspectable with the standard library
    opener = {b"\x1f\x8b": gzip.open, b"BZ": bz2.open, b"\xfd7": lzma.open}.get(head[:2])
    if opener is None:
        return False
    try:
        with opener(path, "rb") as f:
            data = f.read(4 * 1024 * 1024)
    except (OSError, EOFError, lzma.LZMAError, ValueError):
        return True  # claims to be compressed but does not decompress: assume the worst
    if len(data) > 262 and data[257:262] == b"ustar":
        return _is_code_archive(path)
    return _holds_code(data)


def purge(tree: Path, policy: HardeningPolicy) -> list[str]:
    """Remove bytecode, caches and archives of code from ``tree``; return what went.

    Files are judged by name *and* by content: bytecode or an archive of code
    renamed ``fixture.dat`` goes too; data archives without code stay (the
    project's own tests may need them).
    """
    removed: list[str] = []
    dirs, suffixes, archives = set(policy.purge_dirs), tuple(policy.purge_suffixes), tuple(policy.archive_suffixes)
    for dirpath, dirnames, filenames in os.walk(tree):
        for d in list(dirnames):
            if d in dirs or d == ".git":
                full = os.path.join(dirpath, d)
                (os.unlink if os.path.islink(full) else shutil.rmtree)(full)
                removed.append(os.path.relpath(full, tree))
                dirnames.remove(d)
        for name in filenames:
            full = Path(dirpath, name)
            lower = name.lower()
            if full.is_symlink():
                continue
            if (lower.endswith(suffixes) or (lower.endswith(archives) and _is_code_archive(full))
                    or (not lower.endswith(CODE_SUFFIXES) and _content_leaks_code(full))):
                full.unlink()
                removed.append(str(full.relative_to(tree)))
    return removed


def _squash_git(tree: Path) -> str:
    git(tree, "init", "--quiet", "--initial-branch=main")
    git(tree, "config", "core.logAllRefUpdates", "false")
    git(tree, "config", "gc.auto", "0")  # a large tree's commit must not auto-pack (packed-refs, logs)
    git(tree, "add", "--all", "--force", ".")
    git(tree, "commit", "--quiet", "--no-verify", "--allow-empty", "-m", "base")
    shutil.rmtree(tree / ".git" / "logs", ignore_errors=True)
    shutil.rmtree(tree / ".git" / "hooks", ignore_errors=True)
    (tree / ".git" / "hooks").mkdir()
    return git(tree, "rev-parse", "HEAD").strip()


def verify_scrubbed(tree: Path, base: str) -> None:
    """Fail unless the repository holds exactly the base commit and nothing else."""
    refs = git(tree, "for-each-ref", "--format=%(refname)").split()
    if refs != ["refs/heads/main"]:
        raise WorkspaceError(f"unexpected refs in the template: {refs}")
    if git(tree, "rev-list", "--all").split() != [base]:
        raise WorkspaceError("the template holds more than the base commit")
    reachable = {line.split()[0] for line in git(tree, "rev-list", "--objects", "--all").splitlines() if line}
    stored = set(git(tree, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)").split())
    if stored - reachable:
        raise WorkspaceError(f"{len(stored - reachable)} unreachable objects in the template")
    for leftover in ("logs", "packed-refs", "ORIG_HEAD", "FETCH_HEAD", "refs/stash", "shallow"):
        if (tree / ".git" / leftover).exists():
            raise WorkspaceError(f".git/{leftover} survived the scrub")
    for dirpath, dirnames, filenames in os.walk(tree):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            if name.endswith((".pyc", ".pyo")):
                raise WorkspaceError(f"bytecode survived the scrub: {name}")
