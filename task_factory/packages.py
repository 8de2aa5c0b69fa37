"""The pinned catalog of PyPI packages tasks are built from.

Each was checked by hand: permissive licence, pure Python, its sdist ships its
tests, the suite passes with plain pytest in a few seconds, and it is not a
dependency of pytest itself (the task venv must not hold the un-bugged code).
"""

from __future__ import annotations

from .models import PackageSpec

# pytest and its dependencies, pinned: installed in every task venv.
PYTEST_REQUIREMENTS: tuple[str, ...] = (
    "pytest==8.3.5",
    "pluggy==1.5.0",
    "iniconfig==2.0.0",
    "packaging==24.2",
)

CATALOG: dict[str, PackageSpec] = {
    p.name: p
    for p in (
        PackageSpec(
            name="toolz", version="1.0.0", license="BSD-3-Clause",
            source_files=("toolz/itertoolz.py", "toolz/functoolz.py", "toolz/dicttoolz.py", "toolz/recipes.py"),
            test_paths=("toolz/tests",),
        ),
        PackageSpec(
            name="cachetools", version="5.5.0", license="MIT", import_root="src",
            source_files=("src/cachetools/__init__.py", "src/cachetools/func.py", "src/cachetools/keys.py"),
            test_paths=("tests",),
        ),
        PackageSpec(
            name="more-itertools", version="10.5.0", license="MIT",
            source_files=("more_itertools/more.py", "more_itertools/recipes.py"),
            test_paths=("tests",),
        ),
        PackageSpec(
            name="inflection", version="0.5.1", license="MIT",
            source_files=("inflection/__init__.py",),
            test_paths=("test_inflection.py",),
        ),
        PackageSpec(
            name="six", version="1.17.0", license="MIT",
            source_files=("six.py",),
            test_paths=("test_six.py",),
        ),
        PackageSpec(
            name="idna", version="3.10", license="BSD-3-Clause",
            source_files=("idna/core.py", "idna/codec.py", "idna/intranges.py", "idna/compat.py"),
            test_paths=("tests",),
        ),
    )
}

DEFAULT_PACKAGES: tuple[str, ...] = tuple(CATALOG)


def resolve_packages(names: list[str] | tuple[str, ...] | None) -> list[PackageSpec]:
    """Catalog entries for ``names`` (default: all); raises KeyError naming unknown ones."""
    names = list(names or DEFAULT_PACKAGES)
    unknown = [n for n in names if n not in CATALOG]
    if unknown:
        raise KeyError(f"unknown package(s) {unknown}; known: {sorted(CATALOG)}")
    return [CATALOG[n] for n in names]
