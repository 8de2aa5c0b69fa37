"""Task builder: synthetic SWE-style bug-fix tasks (one-token mutations of real code) from pinned PyPI sdists.

``build_tasks(out_dir, ...)`` writes ``tasks.jsonl`` (SWE-bench fields plus
``repo_path``/``python_env``), ``repos/``, ``envs/`` and ``build_report.json``.
"""

from .build import DEFAULT_MIN_TASKS, build_tasks, default_cache_dir
from .models import BuildReport, PackageReport, PackageSpec, TaskRecord
from .packages import CATALOG, DEFAULT_PACKAGES
from .sources import TaskgenError

__all__ = [
    "BuildReport", "CATALOG", "DEFAULT_MIN_TASKS", "DEFAULT_PACKAGES", "PackageReport", "PackageSpec",
    "TaskRecord", "TaskgenError", "build_tasks", "default_cache_dir",
]
