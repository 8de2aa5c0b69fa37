"""env_client stays a client: of the project it imports only the wire contract (``contract``), and
importing it loads no server, verifier, sandbox or trainer module (nor websockets/httpx until used)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {"fastapi", "uvicorn", "starlette", "docker", "torch", "trl", "transformers", "sandbox", "trainer_client",
             "env_server", "verifier", "task_factory"}


def test_only_the_contract_is_imported_from_the_project():
    files = [p for p in (ROOT / "env_client").rglob("*.py") if "adapters" not in p.relative_to(ROOT).parts]
    assert files
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            for name in names:
                top = name.split(".")[0]
                assert top not in FORBIDDEN, f"{path.name} imports {name}"


def test_import_loads_nothing_heavy():
    code = ("import sys, env_client; heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
            f"{sorted(FORBIDDEN | {'websockets', 'httpx', 'pyarrow'})!r}); print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]", out.stdout
