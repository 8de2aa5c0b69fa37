"""Importing SWE-bench-family datasets (SWE-bench, SWE-Gym, SWE-smith, R2E-Gym, SWE-rebench) as tasks.

``task-factory import`` (:mod:`.cli`) -> :func:`.importer.import_files` -> per-family
normalisers (:mod:`.families`, :mod:`.r2e`) using the harness facts of :mod:`.commands`.
See docs/datasets.md.
"""

from .families import ImportOptions, detect, normalise
from .importer import import_files
from .readers import ReadError
from .report import FAMILIES, ImportReport

__all__ = ["FAMILIES", "ImportOptions", "ImportReport", "ReadError", "detect", "import_files", "normalise"]
