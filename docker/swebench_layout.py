"""Build SWE-bench-layout task images offline, from real code, and write their dataset rows.

No registry is reachable here, so the SWE-bench-family path (``tasks import`` ->
image-resident workspace -> the instance's own harness) is proven on images built
locally the way the real ones are laid out: the repository at ``/testbed`` as a git
repository whose HEAD is the base commit (with the un-bugged release as its parent:
history a session must never see), the project's dependencies installed in an
environment inside the image (a venv at ``/opt/envs/testbed``; the project itself
installed editable from ``/testbed``), and the tests run by a per-repository
command whose log a per-repository parser reads:

- ``toolz``  (pytest):                 ``pytest -rA <file>``, read by ``parse_log_pytest``;
- ``django`` (its own runner):         ``./tests/runtests.py --verbosity 2 --settings=test_sqlite
                                        --parallel 1 <module>``, read by ``parse_log_django``;
- ``sympy``  (its own runner and log): ``sympy.testing.runtests.test(<file>, verbose=True)``
                                        (``bin/test``'s runner; the sdist has no ``bin/``), read by
                                        ``parse_log_sympy``.

The bugs are one-line synthetic mutations of each release (``source:
synthetic-mutation``, SWE-smith-style), written as issue reports in a user's words.
FAIL_TO_PASS / PASS_TO_PASS are *measured*: the image's own harness runs on the
bug and on the release, twice each, in a container with no network, and the
swebench parser reads the logs (kept per image in the wheel cache). Rows are SWE-bench 5.x-format (``image``,
``eval_script``, ``log_parser``), ready for ``task-factory import``.

Variants (``VARIANTS``) are further rows on a project's image (no build of their own): the
same bug, hidden tests added by the row's ``test_patch``, their own harness command. The
``toolz-cut-ids*`` rows' tests are parametrized with spaces and brackets in their ids, so their
FAIL_TO_PASS / PASS_TO_PASS hold ids as ``parse_log_pytest`` cuts them (``test_x[a b]`` ->
``test_x[a``): one row is imported for the project's pytest grader, one (a command that is not
plain ``pytest``) for the instance's harness.

Usage: python docker/swebench_layout.py OUT_DIR [--projects toolz,django,sympy,toolz-cut-ids,...]
Images are reused when their build-inputs label matches; sdists and wheels are
downloaded on the host into ``$SWE_WHEEL_CACHE`` (default ``.cache/wheelhouse``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE_IMAGE = "swe-openenv-base:bookworm"
IMAGE_REPO = "swe-openenv-layout"
ENV_PREFIX = "/opt/envs/testbed"
LABEL = "org.swe-openenv.build-inputs"
RECIPE = "1"  # bump when the build steps change
# what an editable install of the project needs in the environment (no build isolation offline)
BUILD_DEPS = ("setuptools==75.8.0", "wheel==0.45.1")


@dataclass(frozen=True)
class Project:
    name: str
    repo: str  # SWE-bench's owner/name: selects the parser and the naming
    version: str
    deps: tuple[str, ...]  # pinned, installed in the image's environment
    test_cmd: str  # run in /testbed with the environment active
    log_parser: str
    path: str  # the mutated file
    old: str
    new: str
    statement: str


PROJECTS = {p.name: p for p in (
    Project(
        name="toolz", repo="pytoolz/toolz", version="1.0.0",
        deps=("pytest==8.3.5", "pluggy==1.5.0", "iniconfig==2.0.0", "packaging==24.2"),
        test_cmd="pytest -rA toolz/tests/test_itertoolz.py", log_parser="parse_log_pytest",
        path="toolz/itertoolz.py", old="        d[item] += 1\n", new="        d[item] += 2\n",
        statement=("`toolz.frequencies` counts every item twice. With toolz 1.0.0:\n\n"
                   "```python\n>>> from toolz import frequencies\n>>> frequencies(['cat', 'cat', 'ox'])\n"
                   "{'cat': 4, 'ox': 2}\n```\n\nI expected `{'cat': 2, 'ox': 1}`: the number of times each "
                   "item occurs, as the docstring says. `countby` built on top of it is off as well."),
    ),
    Project(
        name="django", repo="django/django", version="4.2.16",
        deps=("asgiref==3.8.1", "sqlparse==0.5.1"),
        test_cmd="./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 utils_tests.test_text",
        log_parser="parse_log_django",
        path="django/utils/text.py", old='    s = re.sub(r"(?u)[^-\\w.]", "", s)\n',
        new='    s = re.sub(r"(?u)[^\\w.]", "", s)\n',
        statement=("get_valid_filename() drops dashes\n\nDescription\n\n"
                   "django.utils.text.get_valid_filename(\"my-report 2024.pdf\") returns "
                   "'myreport_2024.pdf'. The docstring says alphanumerics, dashes, underscores and dots are "
                   "kept, so it should be 'my-report_2024.pdf'. Files uploaded through FileSystemStorage "
                   "lose their dashes."),
    ),
    Project(
        name="sympy", repo="sympy/sympy", version="1.13.3",
        deps=("mpmath==1.3.0",),
        test_cmd=("PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' python -c "
                  "\"import sys; from sympy.testing.runtests import test; "
                  "sys.exit(0 if test('sympy/utilities/tests/test_iterables.py', verbose=True, colors=False) "
                  "else 1)\""),
        log_parser="parse_log_sympy",
        path="sympy/utilities/iterables.py", old="    y = y % len(x)\n    return x[y:] + x[:y]\n",
        new="    y = y % len(x)\n    return x[:y] + x[y:]\n",
        statement=("rotate_left does not rotate\n\n```python\n>>> from sympy.utilities.iterables import "
                   "rotate_left\n>>> rotate_left([0, 1, 2], 1)\n[0, 1, 2]\n```\n\nThe docstring says this "
                   "gives `[1, 2, 0]`. Any shift returns the list unchanged."),
    ),
)}


@dataclass(frozen=True)
class Variant:
    """A row on ``project``'s image: its bug, tests added by a ``test_patch``, its own command."""

    name: str
    project: str
    suffix: str  # of the instance id
    tests: tuple[tuple[str, str], ...]  # (path, text): the files the row's test_patch adds
    test_cmd: str


# toolz's frequencies counts twice (the toolz row's bug); countby is built on it, unique is not.
# Ids with spaces and brackets: parse_log_pytest keeps what comes before the first space.
CUT_IDS_TESTS = """\
from collections import Counter

import pytest

from toolz import countby, frequencies, unique


@pytest.mark.parametrize("text", ["a b", "cat cat ox", "x - y", "[x, y]"])
def test_frequencies_of_words(text):
    words = text.split()
    assert frequencies(words) == dict(Counter(words))


@pytest.mark.parametrize("values", [[1.5, 2.5, 1.5], [0.25]], ids=["floats [1.5, 2.5, 1.5]", "one float [0.25]"])
def test_frequencies_of_floats(values):
    assert frequencies(values) == dict(Counter(values))


@pytest.mark.parametrize("spec", ["odd 1 2 3", "odd none"])
def test_countby_parity(spec):  # both ids cut to test_countby_parity[odd; only the first fails on the bug
    values = [int(x) for x in spec.split()[1:] if x.isdigit()]
    assert countby(lambda x: x % 2 == 1, values) == dict(Counter(x % 2 == 1 for x in values))


@pytest.mark.parametrize("n", [2, 3])
def test_frequencies_of_range(n):
    assert frequencies(range(n)) == dict.fromkeys(range(n), 1)


@pytest.mark.parametrize("text", ["a b", "q r s", "[x, y]"])
def test_unique_words(text):
    assert list(unique(text.split())) == text.split()


@pytest.mark.parametrize("pair", [(1.5, [1.5, 2.5, 1.5]), (0.5, [])], ids=["in [1.5, 2.5]", "none []"])
def test_frequency_lookup(pair):
    value, values = pair
    assert (frequencies(values).get(value, 0) > 0) == (value in values)


def test_frequencies_of_nothing():
    assert frequencies([]) == {}
"""


VARIANTS = {v.name: v for v in (
    Variant(name="toolz-cut-ids", project="toolz", suffix="cut-ids",
            tests=(("toolz/tests/test_cut_ids.py", CUT_IDS_TESTS),),
            test_cmd="pytest -rA toolz/tests/test_cut_ids.py"),
    # not plain pytest (the importer keeps such a command and its parser: the instance's harness grades it)
    Variant(name="toolz-cut-ids-harness", project="toolz", suffix="cut-ids-harness",
            tests=(("toolz/tests/test_cut_ids.py", CUT_IDS_TESTS),),
            test_cmd="python -X faulthandler -m pytest -rA toolz/tests/test_cut_ids.py"),
)}


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} ... failed ({proc.returncode}): {proc.stderr[-1500:]}")
    return proc


def _cache() -> Path:
    import os

    return Path(os.environ.get("SWE_WHEEL_CACHE", ROOT / ".cache" / "wheelhouse"))


def _download(spec: list[str], dest: Path, binary: bool) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    if not any(dest.iterdir()):
        mode = ["--only-binary", ":all:"] if binary else ["--no-binary", ":all:"]
        _run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--disable-pip-version-check",
              *mode, *spec, "-d", str(dest)])
    return sorted(dest.iterdir())


def _git(cwd: Path, *args: str, input: str | None = None) -> str:
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "swe-openenv", "GIT_AUTHOR_EMAIL": "layout@swe-openenv.invalid",
           "GIT_COMMITTER_NAME": "swe-openenv", "GIT_COMMITTER_EMAIL": "layout@swe-openenv.invalid",
           "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z"}
    return _run(["git", "-C", str(cwd), *args], input=input, env=env).stdout


def _stage(p: Project, ctx: Path) -> tuple[str, str, str]:
    """Lay out the build context; returns (gold patch, base commit sha, build-inputs hash)."""
    sdist = _download([f"{p.name}=={p.version}"], _cache() / "layout-sdists" / f"{p.name}-{p.version}", binary=False)[0]
    reqs = list(p.deps + BUILD_DEPS)
    wheels = _download(reqs, _cache() / "layout-wheels" / hashlib.sha256(" ".join(reqs).encode()).hexdigest()[:12],
                       binary=True)
    with tarfile.open(sdist) as tf:
        tf.extractall(ctx / "unpacked", filter="data")
    (top,) = list((ctx / "unpacked").iterdir())
    repo = ctx / "testbed"
    top.rename(repo)
    shutil.rmtree(ctx / "unpacked")
    for egg in repo.glob("*.egg-info"):
        shutil.rmtree(egg)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", f"{p.name} {p.version}")
    target = repo / p.path
    text = target.read_text()
    if text.count(p.old) != 1:
        raise SystemExit(f"{p.name}: the mutation site is not unique in {p.path}")
    target.write_text(text.replace(p.old, p.new))
    _git(repo, "commit", "-qam", "base")
    base = _git(repo, "rev-parse", "HEAD").strip()
    gold = _git(repo, "diff", "HEAD", "HEAD~1")
    (ctx / "wheels").mkdir()
    for w in wheels:
        shutil.copy(w, ctx / "wheels" / w.name)
    deps = " ".join(reqs)
    (ctx / "Dockerfile").write_text(dockerfile := f"""FROM {BASE_IMAGE}
SHELL ["/bin/bash", "-euo", "pipefail", "-c"]
RUN export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; \\
    apt-get install -y -qq --no-install-recommends python3 python3-venv git bash >/dev/null; \\
    apt-get clean; rm -rf /var/lib/apt/lists/*
COPY wheels /tmp/wheels
RUN python3 -m venv {ENV_PREFIX} && {ENV_PREFIX}/bin/pip install -q --no-index --find-links /tmp/wheels {deps} \\
    && rm -rf /tmp/wheels
COPY testbed /testbed
RUN cd /testbed && {ENV_PREFIX}/bin/pip install -q --no-index --no-deps --no-build-isolation -e . \\
    && chmod -R a+rwX /testbed
ENV PATH={ENV_PREFIX}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /testbed
""")
    inputs = hashlib.sha256(json.dumps([RECIPE, p.__dict__, dockerfile, sdist.name], sort_keys=True).encode())
    return gold, base, inputs.hexdigest()[:16]


def eval_script(p: Project, test_cmd: str | None = None) -> str:
    """The instance's eval script in SWE-bench 5.x's shape (markers around the test command)."""
    return "\n".join(["#!/bin/bash", "set -uxo pipefail", f"source {ENV_PREFIX}/bin/activate", "cd /testbed",
                      "git status", ": '>>>>> Start Test Output'", test_cmd or p.test_cmd,
                      ": '>>>>> End Test Output'", ""])


def _harness(image: str, p: Project, release: bool, test_cmd: str | None = None,
             test_patch: str = "") -> dict[str, str]:
    from swebench.harness.log_parsers import PARSER_REGISTRY

    checkout = "git checkout -q HEAD~1 -- . && " if release else ""
    apply = "git apply --whitespace=nowarn - && " if test_patch else ""
    proc = subprocess.run(["docker", "run", "-i", "--rm", "--network", "none", image, "bash", "-c",
                           f"cd /testbed && {checkout}{apply}{test_cmd or p.test_cmd}"], input=test_patch,
                          capture_output=True, text=True, timeout=900)
    return PARSER_REGISTRY[p.log_parser](proc.stdout + proc.stderr, None)


def _image(p: Project, log=print) -> tuple[str, str, str, str]:
    """Build (or reuse) ``p``'s image: (image, gold patch, base commit, build-inputs hash)."""
    with tempfile.TemporaryDirectory(prefix=f"swe-layout-{p.name}-") as tmp:
        ctx = Path(tmp)
        gold, base, inputs = _stage(p, ctx)
        image = f"{IMAGE_REPO}/{p.name}:{p.version}-{inputs}"
        have = subprocess.run(["docker", "image", "inspect", "--format", f'{{{{ index .Config.Labels "{LABEL}" }}}}',
                               image], capture_output=True, text=True)
        if have.returncode != 0 or have.stdout.strip() != inputs:
            log(f"[layout] building {image}")
            _run(["docker", "build", "-q", "-t", image, "--label", f"{LABEL}={inputs}", str(ctx)])
    return image, gold, base, inputs


def _measure(name: str, verdicts: Path, run) -> tuple[list[str], list[str]]:
    """FAIL_TO_PASS / PASS_TO_PASS from ``run(release)`` (the parsed harness log), twice on the bug
    and twice on the release; cached in ``verdicts``."""
    if verdicts.is_file():
        f2p, p2p = json.loads(verdicts.read_text())
    else:
        passed = ("PASSED", "XFAIL")
        runs = [(run(False), run(True)) for _ in range(2)]
        names = sorted(set().union(*(set(b) | set(r) for b, r in runs)))
        f2p = [t for t in names if all(b.get(t) not in passed and r.get(t) == "PASSED" for b, r in runs)]
        p2p = [t for t in names if all(b.get(t) == "PASSED" and r.get(t) == "PASSED" for b, r in runs)]
        if f2p:
            verdicts.parent.mkdir(parents=True, exist_ok=True)
            verdicts.write_text(json.dumps([f2p, p2p]))
    if not f2p:
        raise SystemExit(f"{name}: the mutation fails no test")
    return f2p, p2p


def _row(p: Project, instance_id: str, image: str, base: str, gold: str, test_patch: str, test_cmd: str,
         f2p: list[str], p2p: list[str]) -> dict:
    return {
        "instance_id": instance_id, "repo": p.repo, "base_commit": base,
        "version": p.version, "environment_setup_commit": base, "created_at": "2024-01-01T00:00:00Z",
        "problem_statement": p.statement, "hints_text": "", "patch": gold, "test_patch": test_patch,
        "FAIL_TO_PASS": json.dumps(f2p), "PASS_TO_PASS": json.dumps(p2p), "image": image,
        "eval_script": eval_script(p, test_cmd), "log_parser": p.log_parser, "eval_type": "pass_and_fail",
        "source": "synthetic-mutation",
    }


def build(p: Project, log=print) -> dict:
    """Build (or reuse) ``p``'s image; return its SWE-bench 5.x row."""
    image, gold, base, inputs = _image(p, log)
    verdicts = _cache() / "layout-verdicts" / f"{p.name}-{inputs}.json"  # the image is the key
    f2p, p2p = _measure(p.name, verdicts, lambda release: _harness(image, p, release))
    log(f"[layout] {p.name}: {len(f2p)} FAIL_TO_PASS, {len(p2p)} PASS_TO_PASS")
    return _row(p, f"{p.repo.replace('/', '__')}-layout-{p.version}", image, base, gold, "", p.test_cmd, f2p, p2p)


def new_files_patch(files: tuple[tuple[str, str], ...]) -> str:
    """A git diff adding ``files`` ((path, text), text ending in a newline)."""
    out = []
    for path, text in files:
        lines = text.splitlines()
        out += [f"diff --git a/{path} b/{path}", "new file mode 100644", "--- /dev/null", f"+++ b/{path}",
                f"@@ -0,0 +1,{len(lines)} @@", *("+" + line for line in lines)]
    return "\n".join(out) + "\n"


def build_variant(v: Variant, log=print) -> dict:
    """``v``'s row on its project's image (built or reused as for the project's own row), its
    FAIL_TO_PASS / PASS_TO_PASS measured by the image's harness with the row's test_patch applied."""
    p = PROJECTS[v.project]
    image, gold, base, inputs = _image(p, log)
    test_patch = new_files_patch(v.tests)
    key = hashlib.sha256(json.dumps([test_patch, v.test_cmd, p.log_parser]).encode()).hexdigest()[:12]
    verdicts = _cache() / "layout-verdicts" / f"{v.name}-{inputs}-{key}.json"
    f2p, p2p = _measure(v.name, verdicts,
                        lambda release: _harness(image, p, release, v.test_cmd, test_patch))
    log(f"[layout] {v.name}: {len(f2p)} FAIL_TO_PASS, {len(p2p)} PASS_TO_PASS")
    return _row(p, f"{p.repo.replace('/', '__')}-layout-{p.version}-{v.suffix}", image, base, gold, test_patch,
                v.test_cmd, f2p, p2p)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="folder for dataset.jsonl")
    ap.add_argument("--projects", default=",".join(PROJECTS), help=f"of {', '.join([*PROJECTS, *VARIANTS])}")
    args = ap.parse_args(argv)
    names = [n for n in args.projects.split(",") if n]
    unknown = sorted(set(names) - set(PROJECTS) - set(VARIANTS))
    if unknown:
        ap.error(f"unknown project(s) {unknown}; known: {sorted(PROJECTS)} and variants {sorted(VARIANTS)}")

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    rows = [build(PROJECTS[n], log=log) if n in PROJECTS else build_variant(VARIANTS[n], log=log) for n in names]
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / "dataset.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
