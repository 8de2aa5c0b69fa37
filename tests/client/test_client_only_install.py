"""`pip install -e ".[client]"` alone, into a fresh venv, drives a full episode against
the real server, and runs `trainer-client evaluate` (a model behind an OpenAI-compatible
endpoint as an agent): no torch, no server, no trainer parts, no matplotlib.

The venv lives under the project's gitignored `.cache/client-venv/<hash of pyproject.toml>`
(built once per dependency set: support.venvs); the package itself is reinstalled there
whenever the client's sources change. pip takes its index from the machine's own
configuration. A venv that cannot be built fails the test under CI (`CI=true` or
`SWE_REQUIRE_CLIENT_VENV=1`: `missing("client-venv", ...)`) and skips it elsewhere.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.venvs import cached_venv, pip

from .conftest import INSTANCE

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _run(cmd: list[str], timeout: float, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONNOUSERSITE="1")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)


def client_venv() -> Path:
    """The python of `.cache/client-venv/<pyproject hash>` with this checkout's `[client]` install."""
    deps = _digest([ROOT / "pyproject.toml"])
    sources = _digest([*ROOT.glob("contract/**/*.py"), *ROOT.glob("env_client/**/*.py"), *ROOT.glob("env_server/*.py"),
                       *ROOT.glob("evaluation/**/*.py"), *ROOT.glob("trainer_client/**/*.py")])

    def install(python: Path) -> None:
        pip(python, ["install", "--quiet", f"{ROOT}[client]"], "client-venv", f"pip install {ROOT.name}[client]", cwd=ROOT)

    def reinstall(python: Path) -> None:
        pip(python, ["install", "--quiet", "--no-deps", "--force-reinstall", str(ROOT)], "client-venv",
            f"pip install {ROOT.name} (sources changed)", cwd=ROOT)

    return cached_venv(ROOT / ".cache" / "client-venv" / deps, part="client-venv", ready=".deps-ready",
                       stamp=sys.version, install=install, sources=(".sources", sources), reinstall=reinstall,
                       prune_others=True)


def test_client_extra_alone_runs_a_full_episode(server, tmp_path):
    python = client_venv()
    script = tmp_path / "client_only_episode.py"  # run from outside the repo: only the installed copy
    shutil.copy(Path(__file__).with_name("client_only_episode.py"), script)
    proc = _run([str(python), str(script), server.url, INSTANCE, str(tmp_path)], 300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary == {
        "listing_has_setup_py": True, "reward": 1.0, "done": True, "state_t": 1,
        "trace_kinds": ["reset", "step", "step", "step"], "http_state_t": 2, "export_turns": 3,
        "served_turns": 3, "jsonl_records": 2, "same_messages": True,
        "parquet": "MissingDependencyError: Parquet export needs pyarrow, which is not installed: "
                   "pip install pyarrow (JSONL export needs nothing)",
        "ws_instance": INSTANCE, "loaded_forbidden": []}


# `trainer-client evaluate ARGS...` in-process, then one JSON line: its exit code, which copies ran,
# and which heavy modules were importable / imported (run with the python of a venv).
EVALUATE = """
import importlib.util, json, sys
HEAVY = ("torch", "transformers", "trl", "accelerate", "datasets", "matplotlib", "fastapi", "uvicorn")
importable = [m for m in HEAVY if importlib.util.find_spec(m) is not None]
import evaluation, trainer_client
from trainer_client.cli import main
rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "files": [evaluation.__file__, trainer_client.__file__], "importable": importable,
                  "imported": sorted(m for m in HEAVY if m in sys.modules)}))
"""


def _evaluate(python: Path | str, args: list[str], cwd: Path) -> dict:
    proc = _run([str(python), "-c", EVALUATE, "evaluate", *args, "--quiet"], 300, cwd=cwd)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["rc"] == 0, proc.stderr[-3000:]
    return out


def _report(out: Path) -> dict:
    assert (out / "report.md").read_text().startswith("# Evaluation: policy-double")
    return json.loads((out / "report.json").read_text())["summary"]


def test_client_extra_alone_runs_an_evaluation(server, demo_tasks, tmp_path):
    """`trainer-client evaluate` from the client-only venv (the policy double, a model that applies
    the gold patch, runs from the project venv as its own process): every episode resolved, no
    torch or transformers anywhere, and the report written without matplotlib (no plot).
    The same command from the project venv, where torch is installed, imports none of it either."""
    from support.policy_double import PolicyDouble

    python = client_venv()
    tasks_file, tasks = demo_tasks
    ids = [t.instance_id for t in tasks]
    with PolicyDouble(tasks_file, "gold", tmp_path) as gold:
        run = _evaluate(python, ["--model", gold.base_url, "--env-url", server.url, "--tasks", str(tasks_file),
                                 "--samples", "2", "--concurrency", "2", "--out", str(tmp_path / "gold")], tmp_path)
        requests = gold.stats()["requests"]
    assert all("site-packages" in f for f in run["files"]), run["files"]  # the installed copy, not the repo
    assert run["importable"] == [] and run["imported"] == [], run
    summary = _report(tmp_path / "gold")
    o = summary["overall"]
    assert (o["resolved"], o["scored"], o["lost"], o["resolved_rate"]) == (2 * len(ids), 2 * len(ids), 0, 1.0), o
    assert summary["end_reasons"] == {"submitted": 2 * len(ids)}
    assert requests == 2 * 2 * len(ids)  # gold: the patch, then submit
    assert not (tmp_path / "gold" / "report.png").exists()  # no matplotlib: the plot is skipped, nothing else
    rollouts = (tmp_path / "gold" / "rollouts.jsonl").read_text().splitlines()
    assert len(rollouts) == 2 * len(ids)

    # the project venv (torch, transformers, matplotlib installed): evaluate with an endpoint imports none of them
    with PolicyDouble(tasks_file, "submit", tmp_path) as lazy:
        run = _evaluate(sys.executable, ["--model", lazy.base_url, "--env-url", server.url, "--tasks", str(tasks_file),
                                         "--out", str(tmp_path / "submit")], tmp_path)
    assert "torch" in run["importable"] and "transformers" in run["importable"], run
    assert not {"torch", "transformers", "trl", "accelerate", "datasets"} & set(run["imported"]), run
    o = _report(tmp_path / "submit")["overall"]
    assert (o["resolved"], o["scored"], o["lost"]) == (0, len(ids), 0), o
