"""tests/containers: the Docker image, compose and cluster-manifest tests.

Puts this folder and tests/ on sys.path (for ``containers_lib`` and ``taskpack``).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for path in (HERE, HERE.parent):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
