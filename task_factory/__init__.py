"""The task factory: makes and checks task files (``task-factory build|mine|import|make|validate|reverify``).

It sits beside the server, on top of the verifier: every task it checks is graded by the verifier's own
grader (``check.py``), and the server never imports this package. Its task sources sit behind one
interface (``task_sources.py``: a ``TaskSource`` class per source, registered in ``SOURCES``, run by
``task-factory make NAME``), sharing one id rule (``task_id``), one check, one verdict cache
(``verdicts.py``) and one lock discipline (``cache.py``):

``release-diff`` (``mine_tasks``, ``task-factory mine``): real historical fixes between consecutive
releases, with the release's own tests hidden and its changelog as the statement.
``synthetic-mutation`` (``build_tasks``, ``task-factory build``): one-token mutations of real code.
Both build from PyPI sdists and write ``tasks.jsonl`` (SWE-bench fields plus
``repo_path``/``python_env``), ``repos/``, ``envs/`` and ``build_report.json``. ``swe-bench``
(``datasets/``, ``task-factory import``): SWE-bench-family rows. ``demo_task`` is the one-task demo pack.
"""

from verifier.task import TaskRecord

from .build import DEFAULT_MIN_TASKS, build_tasks
from .cache import default_cache_dir
from .mine import mine_tasks
from .models import BuildReport, MineReport, MineSpec, PackageReport, PackageSpec
from .packages import CATALOG, DEFAULT_PACKAGES
from .release_catalog import MINE_CATALOG
from .sources import TaskgenError
from .task_sources import SOURCES, CheckedOptions, SourceOptions, TaskSource, register_source, source_class, task_id

__all__ = [
    "BuildReport", "CATALOG", "DEFAULT_MIN_TASKS", "DEFAULT_PACKAGES", "MINE_CATALOG", "MineReport", "MineSpec",
    "PackageReport", "PackageSpec", "SOURCES", "CheckedOptions", "SourceOptions", "TaskRecord", "TaskSource",
    "TaskgenError", "build_tasks", "default_cache_dir", "mine_tasks", "register_source", "source_class", "task_id",
]
