"""The task factory: makes and checks task files (``task-factory build|mine|import|validate|reverify``).

It sits beside the server, on top of the verifier: ``validate`` and ``reverify`` grade with the
verifier's own grader, and the server never imports this package. From PyPI sdists, two sources:

``build_tasks(out_dir, ...)``: synthetic one-token mutations of real code
(``source: synthetic-mutation``). ``mine_tasks(out_dir, ...)``: real historical
fixes between consecutive releases, with the release's own tests hidden and its
changelog as the statement (``source: release-diff``). Both write ``tasks.jsonl``
(SWE-bench fields plus ``repo_path``/``python_env``), ``repos/``, ``envs/`` and
``build_report.json``. ``datasets/`` imports SWE-bench-family rows (``source: swe-bench``);
``demo_task`` is the one-task demo pack.
"""

from verifier.task import TaskRecord

from .build import DEFAULT_MIN_TASKS, build_tasks
from .cache import default_cache_dir
from .mine import mine_tasks
from .models import BuildReport, MineReport, MineSpec, PackageReport, PackageSpec
from .packages import CATALOG, DEFAULT_PACKAGES
from .release_catalog import MINE_CATALOG
from .sources import TaskgenError

__all__ = [
    "BuildReport", "CATALOG", "DEFAULT_MIN_TASKS", "DEFAULT_PACKAGES", "MINE_CATALOG", "MineReport", "MineSpec",
    "PackageReport", "PackageSpec", "TaskRecord", "TaskgenError", "build_tasks", "default_cache_dir", "mine_tasks",
]
