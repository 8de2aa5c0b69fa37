"""A small real task for tests, the example and the benchmark (a test double of a task set).

Built once and cached: the ``six`` 1.16.0 sdist from PyPI, a bug injected into
``ensure_str``, its own ``test_six.py`` hidden (restored by ``test_patch``), and
a venv with pytest (``six`` itself is *not* installed: a .pth file points at
/workspace). FAIL_TO_PASS / PASS_TO_PASS are measured by running the tests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from sandbox.git import run_git
from verifier.junit import parse_junit

from .cache import ensure_entry

VERSION = "six-demo-v2"
_IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
BUG = ('    def b(s):\n        return s.encode("latin-1")', '    def b(s):\n        return s.encode("utf-8")')
STATEMENT = ("six.b() returns the wrong bytes on Python 3\n\n"
             "`six.b(\"\\xff\")` should be the single byte b'\\xff' (a byte literal: each character is one byte, "
             "latin-1), but on Python 3 it returns b'\\xc3\\xbf' (two bytes).")


def _git(repo: Path, *args: str) -> str:
    return run_git(args, repo, identity=_IDENTITY, text=True).stdout


def _run_tests(venv: Path, repo: Path, junit: Path) -> dict[str, str]:
    subprocess.run([str(venv / "bin" / "python"), "-m", "pytest", "-p", "no:cacheprovider", "-q",
                    f"--junitxml={junit}", "test_six.py"], cwd=repo, capture_output=True,
                   env={"PATH": os.environ.get("PATH", ""), "PYTHONDONTWRITEBYTECODE": "1"})
    return parse_junit(junit.read_bytes())


def _nodeid(key: str) -> str:
    cls, name = key.split("::")
    parts = cls.split(".")
    return "::".join(["test_six.py", *parts[1:], name])


def _build(dest: Path) -> None:
    dl = dest / "dl"
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q",
                    "six==1.16.0", "-d", str(dl)], check=True, capture_output=True)
    with tarfile.open(next(dl.glob("six-*.tar.gz"))) as tar:
        tar.extractall(dest, filter="data")
    repo = dest / "repo"
    (dest / "six-1.16.0").rename(repo)
    shutil.rmtree(repo / "six.egg-info", ignore_errors=True)
    venv = dest / "venv"
    base_python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
    subprocess.run([base_python, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(site), "pytest"],
                   check=True, capture_output=True)
    (site / "workspace.pth").write_text("/workspace\n")

    good = _run_tests(venv, repo, dest / "good.xml")
    source = (repo / "six.py").read_text()
    assert BUG[0] in source, "six.py changed upstream"
    (repo / "six.py").write_text(source.replace(BUG[0], BUG[1]))
    bad = _run_tests(venv, repo, dest / "bad.xml")
    f2p = sorted(_nodeid(k) for k, o in bad.items() if o != "passed" and good.get(k) == "passed")
    p2p = sorted(_nodeid(k) for k, o in bad.items() if o == "passed" and good.get(k) == "passed")[:8]
    assert f2p, "the injected bug breaks no test"

    tests = (repo / "test_six.py").read_text()
    (repo / "test_six.py").unlink()
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    base = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "six.py").write_text(source)
    gold = _git(repo, "diff")
    _git(repo, "checkout", "-q", "--", "six.py")
    (repo / "test_six.py").write_text(tests)
    _git(repo, "add", "-N", "test_six.py")
    test_patch = _git(repo, "diff")
    _git(repo, "rm", "-q", "--cached", "test_six.py")
    (repo / "test_six.py").unlink()
    task = {"instance_id": "six__demo-1", "source": "synthetic-mutation", "repo": "benjaminp/six", "base_commit": base,
            "problem_statement": STATEMENT, "hints_text": "", "patch": gold, "test_patch": test_patch,
            "FAIL_TO_PASS": json.dumps(f2p), "PASS_TO_PASS": p2p, "version": "1.16",
            "environment_setup_commit": base, "repo_path": "repo", "python_env": "venv"}
    (dest / "tasks.jsonl").write_text(json.dumps(task) + "\n")
    shutil.rmtree(dl)


def demo_tasks_file(cache_dir: Path | None = None) -> Path:
    """Path of the demo ``tasks.jsonl`` (built on first use, then cached: ``cache.ensure_entry``)."""
    root = Path(cache_dir or os.environ.get("SWE_OPENENV_CACHE") or Path.home() / ".cache" / "swe-openenv")
    dest = root / "demo-tasks" / VERSION

    def make(work: Path) -> tuple[Path, str]:
        _build(work)
        return work, VERSION + "\n"

    return ensure_entry(dest, make, ready=lambda: (dest / "tasks.jsonl").exists()) / "tasks.jsonl"
