"""SWE-bench-layout images for any test folder (tests/ is on sys.path): docker/swebench_layout.py
loaded as a module, and its dataset rows imported into task records with `task-factory import`."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from support.requirements import missing

ROOT = Path(__file__).resolve().parents[2]


def layout_module(client: Any) -> ModuleType:
    """docker/swebench_layout.py, once the swebench parsers and the offline base image are here
    (missing: fail under CI, skip otherwise)."""
    try:
        import swebench  # noqa: F401
    except ImportError:
        missing("datasets", "the swebench package (extra 'datasets') is not installed")
    spec = importlib.util.spec_from_file_location("swebench_layout", ROOT / "docker" / "swebench_layout.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    try:
        client.api.inspect_image(mod.BASE_IMAGE)
    except Exception:  # noqa: BLE001 - ImageNotFound, or no engine
        missing("docker", f"base image {mod.BASE_IMAGE} missing (run docker/build-images.sh)")
    return mod


def import_rows(rows: list[dict], out: Path) -> Path:
    """``rows`` (SWE-bench 5.x format) imported as task records under ``out``; the task file."""
    from task_factory.cli import main as task_factory_cli

    (out / "dataset.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert task_factory_cli(["import", str(out / "dataset.jsonl"), "--format", "swebench",
                             "--out", str(out / "tasks")]) == 0
    return out / "tasks" / "tasks.jsonl"
