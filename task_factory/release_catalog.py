"""The pinned catalog of packages whose consecutive releases are mined (``task-factory mine``).

Each was checked by hand: permissive licence, pure Python (or a pure fallback),
its sdists ship their tests and a changelog, the suite runs with plain pytest in
seconds, and it is not pytest or one of its dependencies (the task venv must not
hold the fixed code). Pairs are consecutive releases with one layout; the ones
that make no task stay listed: the build report says why (the yield is measured).
Tried and left out: pyparsing (its suite takes about a minute a run, and its
small 3.2.x fixes failed no test), packaging (a dependency of pytest).
"""

from __future__ import annotations

from .models import MineSpec


def _chain(*versions: str) -> tuple[tuple[str, str], ...]:
    """Consecutive pairs of an ordered run of releases."""
    return tuple(zip(versions, versions[1:]))


MINE_CATALOG: dict[str, MineSpec] = {
    s.name: s
    for s in (
        MineSpec(
            name="cachetools", license="MIT", import_root="src", library=("src/cachetools",), test_paths=("tests",),
            pairs=_chain("7.0.0", "7.0.1", "7.0.2", "7.0.3", "7.0.4", "7.0.5", "7.0.6", "7.1.0", "7.1.1", "7.1.2",
                         "7.1.3", "7.1.4", "7.1.5", "7.1.6", "7.1.7", "7.1.8", "7.2.0", "7.2.1", "7.2.2", "7.2.3",
                         "7.2.4", "7.2.5", "7.2.6", "7.2.7", "7.2.8", "7.3.0", "7.3.1", "7.3.2")
            + (("8.0.0", "8.0.1"),),
        ),
        MineSpec(
            name="semver", license="BSD-3-Clause", import_root="src", library=("src/semver",), test_paths=("tests",),
            pairs=_chain("3.0.0", "3.0.1", "3.0.2", "3.0.4", "3.1.0", "3.1.1"),
        ),
        MineSpec(
            name="wcwidth", license="MIT", library=("wcwidth",), test_paths=("tests",),
            pairs=_chain("0.8.4", "0.8.5", "0.9.0", "0.9.1", "0.9.2", "0.9.3", "0.9.4"),
        ),
        MineSpec(
            name="idna", license="BSD-3-Clause", library=("idna",), test_paths=("tests",),
            pairs=_chain("3.12", "3.13", "3.14", "3.15", "3.16", "3.17", "3.18"),
        ),
        MineSpec(
            name="markupsafe", license="BSD-3-Clause", import_root="src", library=("src/markupsafe",),
            test_paths=("tests",), pairs=_chain("2.1.3", "2.1.4", "2.1.5") + _chain("3.0.1", "3.0.2", "3.0.3", "3.0.4"),
        ),
        MineSpec(
            name="six", license="MIT", library=("six.py",), test_paths=("test_six.py",),
            pairs=_chain("1.12.0", "1.13.0", "1.14.0", "1.15.0", "1.16.0", "1.17.0"),
        ),
        MineSpec(
            name="boltons", license="BSD-3-Clause", library=("boltons",), test_paths=("tests",),
            pairs=_chain("24.0.0", "24.1.0", "25.0.0", "26.0.0", "26.1.0"),
        ),
        MineSpec(
            name="more-itertools", license="MIT", library=("more_itertools",), test_paths=("tests",),
            pairs=_chain("10.6.0", "10.7.0") + _chain("11.0.0", "11.0.1", "11.0.2", "11.1.0"),
        ),
    )
}

DEFAULT_MINE_PACKAGES: tuple[str, ...] = tuple(MINE_CATALOG)


def resolve_mine_specs(names: list[str] | tuple[str, ...] | None) -> list[MineSpec]:
    """Catalog entries for ``names`` (default: all); raises KeyError naming unknown ones."""
    names = list(names or DEFAULT_MINE_PACKAGES)
    unknown = [n for n in names if n not in MINE_CATALOG]
    if unknown:
        raise KeyError(f"unknown package(s) {unknown}; known: {sorted(MINE_CATALOG)}")
    return [MINE_CATALOG[n] for n in names]
