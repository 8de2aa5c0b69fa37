"""The suite runs by which ``build`` and ``mine`` find a task's tests before the task exists.

Which tests fail on a candidate and pass with its fix (FAIL_TO_PASS), which pass on both
(PASS_TO_PASS): a candidate's suite, run here on the host, on a work tree the run mutates. This is
never a task's check: a written task is checked by the verifier in a sandbox (``check.py``). With
the demo task's one-off build (``demo_task.py``), this is the only module of the task factory that
runs pytest (tests/unit/test_layout.py).

Runs the task venv's pytest with cwd = the repo and PYTHONPATH = its import
root, and reads per-node outcomes from a small reporting plugin that writes
JSON outside the tree. Optionally the run has no network (its own network
namespace, where ``unshare`` allows one), runs the tests in reverse order, keeps
going past modules that fail to collect, and reads the grader's own pytest
configuration (the repo's, with unsafe ``addopts`` such as coverage plugins left
out) instead of the repo's file.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .cache import write_atomic
from .models import RunResult, TestOutcome

_PLUGIN_NAME = "_taskgen_report"
_PLUGIN_SOURCE = '''\
"""pytest plugin of the task builder: node id -> outcome (+ crash message) as JSON."""
import json, os

_results = {}


def _test_line(report):
    """Line of the test's own file where the failure surfaced (the last traceback entry there)."""
    path = report.nodeid.split("::", 1)[0]
    entries = getattr(getattr(report.longrepr, "reprtraceback", None), "reprentries", None) or []
    for entry in reversed(entries):
        loc = getattr(entry, "reprfileloc", None)
        if loc is not None and str(loc.path).replace(os.sep, "/").endswith(path):
            return int(loc.lineno)
    return None


def pytest_runtest_logreport(report):
    rec = _results.setdefault(report.nodeid, {"outcome": "passed", "message": ""})
    if report.failed:
        rec["outcome"] = "failed"
        if rec.get("line") is None and report.when == "call":
            rec["line"] = _test_line(report)
        crash = getattr(report.longrepr, "reprcrash", None)
        if crash is not None and not rec["message"]:
            rec["message"] = str(crash.message)[:2000]
        elif not rec["message"]:
            rec["message"] = str(report.longrepr).strip().splitlines()[-1][:2000] if report.longrepr else ""
    elif report.skipped and rec["outcome"] == "passed":
        rec["outcome"] = "skipped"


def pytest_collection_modifyitems(session, config, items):
    if os.environ.get("TASKGEN_REVERSE") == "1":
        items.reverse()


def pytest_collectreport(report):
    if report.failed:
        _results.setdefault("<collect>:" + report.nodeid, {"outcome": "failed", "message": "collection error"})


def pytest_sessionfinish(session, exitstatus):
    with open(os.environ["TASKGEN_REPORT"], "w") as f:
        json.dump(_results, f)
'''


class PytestRunner:
    """Runs pytest in one venv: ``import_root`` (repo-relative) goes on PYTHONPATH,
    ``test_paths`` are the default targets, ``plugin_dir`` holds the reporting plugin.
    With ``offline``, runs get no network where the host can give them their own namespace;
    ``grader_ini`` runs with the grader's configuration; ``keep_going`` runs the other
    modules when some fail to collect."""

    def __init__(self, env: Path, plugin_dir: Path, import_root: str = ".",
                 test_paths: tuple[str, ...] = (), offline: bool = False, grader_ini: bool = False,
                 keep_going: bool = False) -> None:
        self.offline = offline and bool(no_network_prefix())
        self.grader_ini, self.keep_going = grader_ini, keep_going
        self.import_root = import_root
        self.test_paths = test_paths
        self.env = env
        self.plugin_dir = plugin_dir
        self.runs = 0
        plugin_dir.mkdir(parents=True, exist_ok=True)
        plugin = plugin_dir / f"{_PLUGIN_NAME}.py"
        if not plugin.exists() or plugin.read_text() != _PLUGIN_SOURCE:
            write_atomic(plugin, _PLUGIN_SOURCE)  # another run may be importing it

    def ini_args(self, repo: Path) -> list[str]:
        """Pin rootdir and ini file to the repo's own, as in the sandbox, where nothing is above it.

        Without this, a repo nested in another project would pick up that project's config.
        """
        if self.grader_ini:
            return ["-c", str(self._verifier_ini(repo)), "--rootdir", str(repo)]
        ini = find_pytest_config(repo)
        if ini is None:
            ini = self.plugin_dir / "empty-pytest.ini"
            if not ini.exists():
                write_atomic(ini, "[pytest]\n")
        return ["-c", str(ini), "--rootdir", str(repo)]

    def _verifier_ini(self, repo: Path) -> Path:
        """The grader's pytest.ini for ``repo`` (verifier.runner_config), paths made local."""
        import hashlib

        from verifier.runner_config import WORKSPACE, runner_config
        from verifier.task import TaskInstance

        probe = TaskInstance(instance_id="taskgen", problem_statement="-", repo_path=repo.resolve())
        text = runner_config(probe).ini.replace(WORKSPACE, str(repo.resolve()))
        ini = self.plugin_dir / f"grader-{hashlib.sha256(text.encode()).hexdigest()[:16]}.ini"
        if not ini.exists():
            write_atomic(ini, text)
        return ini

    def run(self, repo: Path, targets: list[str] | None = None, timeout_s: float = 120.0,
            reverse: bool = False) -> RunResult:
        """Run ``targets`` (node ids or paths; default the package's test paths) in ``repo``,
        in collection order or (``reverse``) the other way round."""
        self.runs += 1
        targets = list(targets or self.test_paths)
        root = (repo / self.import_root).resolve()
        with tempfile.TemporaryDirectory(prefix="taskgen-run-") as tmp:
            report = Path(tmp) / "report.json"
            env = {
                "PATH": f"{self.env / 'bin'}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
                "HOME": tmp,
                "LANG": "C.UTF-8",
                "PYTHONPATH": f"{root}{os.pathsep}{self.plugin_dir}",
                "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONHASHSEED": "0",
                "PYTHONPYCACHEPREFIX": str(Path(tmp) / "pycache"),
                "TASKGEN_REPORT": str(report),
                "TASKGEN_REVERSE": "1" if reverse else "0",
            }
            prefix = no_network_prefix() if self.offline else []
            cmd = [*prefix, str(self.env / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                   "-p", _PLUGIN_NAME, *self.ini_args(repo), "--tb=short",
                   *(["--continue-on-collection-errors"] if self.keep_going else []), *targets]
            start = time.monotonic()
            exit_code, out, _ = run_in_group(cmd, repo, env, timeout_s, merge_stderr=True)
            duration = time.monotonic() - start
            tests: dict[str, TestOutcome] = {}
            if report.exists():
                tests = {k: TestOutcome(**v) for k, v in json.loads(report.read_text()).items()}
        return RunResult(exit_code=exit_code, timed_out=exit_code is None,
                         duration_s=round(duration, 3), tests=tests,
                         output_tail=out.decode("utf-8", "replace")[-3000:])


def run_in_group(cmd: list[str], cwd: Path, env: dict[str, str], timeout_s: float,
                 merge_stderr: bool = False) -> tuple[int | None, bytes, bytes]:
    """Run ``cmd`` in a session of its own; at ``timeout_s`` kill its whole process group.
    Returns (exit code, or None when it timed out; stdout; stderr, empty with ``merge_stderr``)."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
        return proc.returncode, out, err or b""
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return None, out, err or b""


# Run inside the new network namespace: bring loopback up (as the grader's sandbox has it), then exec.
_LOOPBACK_UP = """\
import fcntl, os, socket, struct, sys
ifr = struct.pack("16sH14s", b"lo", 0, b"")
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    flags = struct.unpack("16sH14s", fcntl.ioctl(s, 0x8913, ifr))[1]
    fcntl.ioctl(s, 0x8914, struct.pack("16sH14s", b"lo", flags | 1, b""))
os.execvp(sys.argv[1], sys.argv[1:])
"""


@functools.cache
def no_network_prefix() -> list[str]:
    """A command prefix that runs a program without network (a new network namespace whose only
    interface is an up loopback), or [] where the host cannot make one."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return []
    launcher = [sys.executable, "-I", "-S", "-c", _LOOPBACK_UP]
    tries = [[unshare, "--net", *launcher]] if os.geteuid() == 0 else []
    tries += [[unshare, "--map-current-user", "--net", *launcher], [unshare, "--map-root-user", "--net", *launcher]]
    for prefix in tries:
        try:
            if subprocess.run([*prefix, "true"], capture_output=True, timeout=30).returncode == 0:
                return prefix
        except (OSError, subprocess.TimeoutExpired):
            continue
    return []


def find_pytest_config(repo: Path) -> Path | None:
    """The pytest config file pytest itself would pick in ``repo`` (its precedence), if any."""
    checks = (("pytest.ini", None), (".pytest.ini", None), ("pyproject.toml", "[tool.pytest.ini_options]"),
              ("tox.ini", "[pytest]"), ("setup.cfg", "[tool:pytest]"))
    for name, section in checks:
        p = repo / name
        if p.is_file() and (section is None or section in p.read_text(encoding="utf-8", errors="replace")):
            return p
    return None
