"""The adapters stay optional: importing the client (and the adapters package, and the SkyRL
dataset writer) imports no framework."""

from __future__ import annotations

import subprocess
import sys

from framework_support import ROOT


def test_import_env_client_imports_no_framework():
    code = ("import sys, env_client, env_client.adapters, env_client.adapters.skyrl_dataset; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('skyrl_gym', 'verifiers')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
