"""Host-side pytest runs used while building tasks (never the grading path).

Runs the task venv's pytest with cwd = the repo and PYTHONPATH = its import
root, and reads per-node outcomes from a small reporting plugin that writes
JSON outside the tree.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from .models import RunResult, TestOutcome

_PLUGIN_NAME = "_taskgen_report"
_PLUGIN_SOURCE = '''\
"""pytest plugin of the task builder: node id -> outcome (+ crash message) as JSON."""
import json, os

_results = {}


def pytest_runtest_logreport(report):
    rec = _results.setdefault(report.nodeid, {"outcome": "passed", "message": ""})
    if report.failed:
        rec["outcome"] = "failed"
        crash = getattr(report.longrepr, "reprcrash", None)
        if crash is not None and not rec["message"]:
            rec["message"] = str(crash.message)[:2000]
        elif not rec["message"]:
            rec["message"] = str(report.longrepr).strip().splitlines()[-1][:2000] if report.longrepr else ""
    elif report.skipped and rec["outcome"] == "passed":
        rec["outcome"] = "skipped"


def pytest_collectreport(report):
    if report.failed:
        _results.setdefault("<collect>:" + report.nodeid, {"outcome": "failed", "message": "collection error"})


def pytest_sessionfinish(session, exitstatus):
    with open(os.environ["TASKGEN_REPORT"], "w") as f:
        json.dump(_results, f)
'''


class PytestRunner:
    """Runs pytest in one venv: ``import_root`` (repo-relative) goes on PYTHONPATH,
    ``test_paths`` are the default targets, ``plugin_dir`` holds the reporting plugin."""

    def __init__(self, env: Path, plugin_dir: Path, import_root: str = ".",
                 test_paths: tuple[str, ...] = ()) -> None:
        self.import_root = import_root
        self.test_paths = test_paths
        self.env = env
        self.plugin_dir = plugin_dir
        self.runs = 0
        plugin_dir.mkdir(parents=True, exist_ok=True)
        plugin = plugin_dir / f"{_PLUGIN_NAME}.py"
        if not plugin.exists() or plugin.read_text() != _PLUGIN_SOURCE:
            plugin.write_text(_PLUGIN_SOURCE)

    def ini_args(self, repo: Path) -> list[str]:
        """Pin rootdir and ini file to the repo's own, as in the sandbox, where nothing is above it.

        Without this, a repo nested in another project would pick up that project's config.
        """
        ini = find_pytest_config(repo)
        if ini is None:
            ini = self.plugin_dir / "empty-pytest.ini"
            if not ini.exists():
                ini.write_text("[pytest]\n")
        return ["-c", str(ini), "--rootdir", str(repo)]

    def run(self, repo: Path, targets: list[str] | None = None, timeout_s: float = 120.0) -> RunResult:
        """Run ``targets`` (node ids or paths; default the package's test paths) in ``repo``."""
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
            }
            cmd = [str(self.env / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                   "-p", _PLUGIN_NAME, *self.ini_args(repo), "--tb=short", *targets]
            start = time.monotonic()
            proc = subprocess.Popen(cmd, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            timed_out = False
            try:
                out, _ = proc.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                out, _ = proc.communicate()
            duration = time.monotonic() - start
            tests: dict[str, TestOutcome] = {}
            if report.exists():
                tests = {k: TestOutcome(**v) for k, v in json.loads(report.read_text()).items()}
        return RunResult(exit_code=None if timed_out else proc.returncode, timed_out=timed_out,
                         duration_s=round(duration, 3), tests=tests,
                         output_tail=out.decode("utf-8", "replace")[-3000:])


def find_pytest_config(repo: Path) -> Path | None:
    """The pytest config file pytest itself would pick in ``repo`` (its precedence), if any."""
    checks = (("pytest.ini", None), (".pytest.ini", None), ("pyproject.toml", "[tool.pytest.ini_options]"),
              ("tox.ini", "[pytest]"), ("setup.cfg", "[tool:pytest]"))
    for name, section in checks:
        p = repo / name
        if p.is_file() and (section is None or section in p.read_text(encoding="utf-8", errors="replace")):
            return p
    return None
