"""The miner's pipeline on a small local package with one release per outcome.

``tinylib`` has eight releases, each a real sdist (tar.gz) in the miner's download
cache, so every step runs for real (unpack, git split, changelog, pytest runs
without network in both orders, the verifier's check in bwrap); only the index is not asked.
Each consecutive pair makes a task or is rejected for its own reason.
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import textwrap
from pathlib import Path

import pytest
from support.git_repos import git
from support.taskpacks import PACK_DIR, pack_check

from task_factory.mine import mine_tasks, release_statement, statement_leaks
from task_factory.models import MineReport, MineSpec
from task_factory.releasediff import restore_versions, side
from task_factory.releases import consecutive_pairs, is_patch_release

BASE_LIB = '''\
__version__ = "{v}"


def clamp(x, lo, hi):
    return max(lo, min(x, hi))


def mean(xs):
    return sum(xs) / len(xs)
'''
BASE_TESTS = '''\
from tinylib import clamp, mean


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_mean():
    assert mean([1, 2, 3]) == 2
'''
OLD_NOTES = "1.0.0\n-----\n\n- First release.\n"
LIB, TESTS = "tinylib/__init__.py", "tests/test_tiny.py"


def _releases() -> dict[str, dict[str, str]]:
    """version -> {path: text}; each release edits the previous one."""
    out: dict[str, dict[str, str]] = {}
    files = {LIB: BASE_LIB, TESTS: BASE_TESTS, "CHANGES.rst": OLD_NOTES,
             "pyproject.toml": "[project]\nname = 'tinylib'\n"}
    notes = OLD_NOTES

    def release(v: str, note: str | None, edits: dict[str, str] | None = None) -> None:
        nonlocal notes
        if note is not None:
            notes = f"{v}\n-----\n\n{note}\n\n" + notes
        files.update(edits or {})
        files["CHANGES.rst"] = notes
        out[v] = {k: t.replace("{v}", v) for k, t in files.items()}

    release("1.0.0", None)
    lib = BASE_LIB.replace("    return sum(xs) / len(xs)",
                           "    if not xs:\n        return 0.0\n    return sum(xs) / len(xs)")
    release("1.0.1", "- ``mean([])`` returns 0.0 instead of raising ``ZeroDivisionError``.",
            {LIB: lib, TESTS: BASE_TESTS + "\n\ndef test_mean_of_nothing():\n    assert mean([]) == 0.0\n"})
    lib2 = lib.replace("def clamp(x, lo, hi):\n",
                       "def clamp(x, lo, hi):\n    if lo > hi:\n        raise ValueError(lo)\n")
    tests2 = out["1.0.1"]["tests/test_tiny.py"] + (
        "\n\ndef test_clamp_checks_bounds():\n    import pytest\n    with pytest.raises(ValueError):\n"
        "        clamp(1, 5, 0)\n")
    release("1.0.2", None, {LIB: lib2, TESTS: tests2})  # no changelog entry
    tests3 = tests2 + "\n\ndef test_clamp_below():\n    assert clamp(-5, 0, 10) == 0\n"
    release("1.0.3", "- Internal clean-ups.", {LIB: lib2.replace("max(lo, min(x, hi))", "min(max(x, lo), hi)"),
                                               TESTS: tests3})  # the new test passes before the change too
    lib4 = out["1.0.3"][LIB] + "\n\nSTATE = []\n\n\ndef remember(x):\n    STATE.append(x)\n    return len(STATE)\n"
    tests4 = tests3.replace("def test_mean():\n", "SEEN = []\n\n\ndef test_mean():\n    SEEN.append(1)\n") + (
        "\n\ndef test_remember_after_mean():\n    from tinylib import remember\n"
        "    assert SEEN and remember(1) == 1\n")  # passes only when test_mean ran first
    release("1.0.4", "- Add ``remember``.", {LIB: lib4, TESTS: tests4})  # order-dependent
    big = lib4 + "".join(f"\n\ndef helper_{i}(x):\n    return x + {i}\n" for i in range(80))
    tests5 = tests4 + "\n\ndef test_helpers():\n    from tinylib import helper_3\n    assert helper_3(1) == 4\n"
    release("1.0.5", "- Add many helpers.", {LIB: big, TESTS: tests5})  # too large
    release("1.0.6", "- Faster ``mean``.", {LIB: big.replace("sum(xs) / len(xs)", "sum(xs) / float(len(xs))")})
    release("1.0.7", "- Add a start-up hook.", {"tinylib/sitecustomize.py": "import os\n",
                                                TESTS: tests5 + "\n\ndef test_hook():\n    assert True\n"})
    return out


SPEC = MineSpec(name="tinylib", license="MIT", library=("tinylib",), test_paths=("tests",),
                pairs=tuple(zip(list(_releases()), list(_releases())[1:])))
EXPECTED = {"1.0.1": None, "1.0.2": "no_statement", "1.0.3": "no_fail_to_pass", "1.0.4": "flaky",
            "1.0.5": "too_large", "1.0.6": "no_test_change", "1.0.7": "patch_not_gradable"}


def _sdist(version: str, files: dict[str, str], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(dest / f"tinylib-{version}.tar.gz", "w:gz") as tf:
        for path, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(f"tinylib-{version}/{path}")
            info.size, info.mtime = len(data), 0
            tf.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A miner cache holding tinylib's sdists and sharing the test packs' downloaded wheels."""
    root = tmp_path_factory.mktemp("mine-cache")
    for version, files in _releases().items():
        _sdist(version, files, root / "sdists" / f"tinylib-{version}")
    shared = PACK_DIR / "cache" / "wheels"
    shared.mkdir(parents=True, exist_ok=True)
    (root / "wheels").symlink_to(shared, target_is_directory=True)
    return root


@pytest.fixture(scope="module")
def mined(cache: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[MineReport, Path]:
    out = tmp_path_factory.mktemp("mined")
    report = mine_tasks(out, [SPEC], min_tasks=1, check=pack_check(), cache_dir=cache)
    return report, out


def test_every_pair_is_kept_or_rejected_for_its_reason(mined: tuple[MineReport, Path]) -> None:
    report, _out = mined
    got = {p.to_version: p.reason for p in report.pairs}
    assert got == EXPECTED, [p.model_dump() for p in report.pairs]
    (pkg,) = report.packages
    assert (pkg.pairs_tried, pkg.tasks) == (7, 1) and sum(pkg.rejected.values()) == 6
    flaky = next(p for p in report.pairs if p.reason == "flaky")
    assert "test_remember_after_mean" in flaky.detail  # fails when the tests run in reverse order


def test_the_kept_task_is_the_release_fix_with_its_tests_hidden(mined: tuple[MineReport, Path]) -> None:
    report, out = mined
    (line,) = (out / "tasks.jsonl").read_text().splitlines()
    task = json.loads(line)
    assert task["source"] == "release-diff" and task["instance_id"] == "tinylib__1.0.0-1.0.1"
    assert task["FAIL_TO_PASS"] == ["tests/test_tiny.py::test_mean_of_nothing"]
    assert set(task["PASS_TO_PASS"]) == {"tests/test_tiny.py::test_clamp_inside", "tests/test_tiny.py::test_mean"}
    assert "diff --git a/tinylib/__init__.py" in task["patch"] and "tests/" not in task["patch"]
    assert '__version__' not in task["patch"]  # the version bump is not part of the fix
    assert task["test_patch"].startswith("diff --git a/tests/test_tiny.py") and "tinylib/" not in task["test_patch"]
    assert "CHANGES.rst" not in task["patch"] + task["test_patch"]
    repo = out / task["repo_path"]

    assert git(repo, "rev-list", "--all").split() == [task["base_commit"]]  # nothing of the later release is stored
    assert "test_mean_of_nothing" not in git(repo, "show", f"{task['base_commit']}:tests/test_tiny.py")
    statement = task["problem_statement"]
    assert "``mean([])`` returns 0.0 instead of raising ``ZeroDivisionError``." in statement
    assert "test_mean_of_nothing" not in statement and "tests/test_tiny.py" not in statement
    (prov,) = report.provenance
    assert (prov.from_version, prov.to_version, prov.changelog_file, prov.changelog_heading) == \
        ("1.0.0", "1.0.1", "CHANGES.rst", "1.0.1")


def test_the_venv_holds_pytest_but_not_the_package(mined: tuple[MineReport, Path], tmp_path: Path) -> None:
    _report, out = mined
    python = out / "envs" / "tinylib" / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import tinylib"], cwd=tmp_path, capture_output=True, text=True)
    assert probe.returncode != 0 and "ModuleNotFoundError" in probe.stderr
    assert subprocess.run([str(python), "-m", "pytest", "--version"], cwd=tmp_path, capture_output=True).returncode == 0


def test_a_rebuild_replays_cached_verdicts(mined: tuple[MineReport, Path], cache: Path, tmp_path: Path) -> None:
    report, out = mined
    again = mine_tasks(tmp_path / "again", [SPEC], min_tasks=1, check=pack_check(), cache_dir=cache)
    assert again.pytest_runs == 0 and again.n_tasks == 1
    assert (tmp_path / "again" / "tasks.jsonl").read_text() == (out / "tasks.jsonl").read_text()
    assert [p.reason for p in again.pairs] == [p.reason for p in report.pairs]


def test_limits_are_enforced_before_running_anything(cache: Path, tmp_path: Path) -> None:
    only_first = SPEC.model_copy(update={"pairs": (("1.0.0", "1.0.1"),)})
    report = mine_tasks(tmp_path / "small", [only_first], min_tasks=1, check="none", cache_dir=cache,
                        max_patch_lines=1)  # the fix changes 2 lines
    assert [p.reason for p in report.pairs] == ["too_large"] and report.pytest_runs == 0 and not report.ok


def test_sides_follow_the_graders_rules() -> None:
    assert side("tinylib/core.py", SPEC) == "library"
    assert side("tests/test_core.py", SPEC) == "test" and side("tests/data/x.json", SPEC) == "test"
    assert side("tinylib/tests/test_x.py", SPEC) == "test" and side("tinylib/conftest.py", SPEC) == "test"
    assert side("docs/index.rst", SPEC) == "other" and side("setup.py", SPEC) == "other"


def test_version_strings_are_put_back(tmp_path: Path) -> None:
    for v in ("1.0.0", "1.0.1"):
        (tmp_path / v / "tinylib").mkdir(parents=True)
        (tmp_path / v / "tinylib" / "__init__.py").write_text(
            f'__version__ = "{v}"\nversion_info = ({v.replace(".", ", ")})\nX = "{v}"\n')
    assert restore_versions(tmp_path / "1.0.0", tmp_path / "1.0.1", SPEC, "1.0.1") == ["tinylib/__init__.py"]
    assert (tmp_path / "1.0.1" / "tinylib" / "__init__.py").read_text() == \
        '__version__ = "1.0.0"\nversion_info = (1, 0, 0)\nX = "1.0.1"\n'  # only version assignments


def test_pairs_prefer_patch_releases() -> None:
    versions = ["1.0.0", "1.0.1", "1.1.0", "1.1.1", "1.1.2", "2.0.0"]
    assert is_patch_release("1.1.1", "1.1.2") and not is_patch_release("1.1.2", "2.0.0")
    assert consecutive_pairs(versions, 2) == [("1.1.0", "1.1.1"), ("1.1.1", "1.1.2")]
    assert consecutive_pairs(versions, 4) == [("1.0.0", "1.0.1"), ("1.1.0", "1.1.1"), ("1.1.1", "1.1.2"),
                                              ("1.1.2", "2.0.0")]
    assert consecutive_pairs(versions, 9, patch_only=True) == [("1.0.0", "1.0.1"), ("1.1.0", "1.1.1"),
                                                                ("1.1.1", "1.1.2")]


def test_statement_leak_checks(mined: tuple[MineReport, Path]) -> None:
    from task_factory.changelog import ChangelogSection
    from task_factory.models import ReleaseSplit

    split = ReleaseSplit(base_commit="a", later_commit="b", patch="+    return 0.0\n",
                         test_patch="+def test_mean_of_nothing():\n+    assert mean([]) == 0.0 and mean([1]) == 1.0\n",
                         test_files=["tests/test_tiny.py"])
    ok = release_statement("tinylib", "1.0.0", "1.0.1", ChangelogSection(file="CHANGES.rst", heading="1.0.1",
                                                                         text="- Fix ``mean([])``."))
    assert statement_leaks(ok, ["tests/test_tiny.py::test_mean_of_nothing"], split) == []
    assert ok.startswith("This is tinylib 1.0.0.") and "- Fix ``mean([])``." in ok
    bad = ok + textwrap.dedent("""
        see test_mean_of_nothing in tests/test_tiny.py: assert mean([]) == 0.0 and mean([1]) == 1.0
    """)
    found = statement_leaks(bad, ["tests/test_tiny.py::test_mean_of_nothing"], split)
    assert len(found) == 3, found
