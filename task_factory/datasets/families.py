"""One normaliser per SWE-bench-family dataset, and ``auto`` detection from the columns present.

Each normaliser turns one row into the fields of a ``TaskRecord`` (image-resident, source
``swe-bench``) or records, per field, why it cannot; warnings mark fields mapped with a
caveat. Facts are from the shared notes ``datasets.md`` and the sources cited there; where a
fact is missing the row is rejected rather than guessed.

How the tests are graded: with ``test_cmd`` None the project's own pytest grader runs the
FAIL_TO_PASS / PASS_TO_PASS node ids (preferred: it has the stronger anti-tamper checks);
otherwise ``test_cmd`` is the instance's own harness command and ``log_parser`` the swebench
``PARSER_REGISTRY`` name that reads its log.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, get_args

from verifier.task import TaskSource

from . import commands, r2e
from .commands import HarnessCommandError
from .patches import PatchError, reverse_patch
from .rows import Issues, test_ids, text

SWEBENCH_ENV = "/opt/miniconda3/envs/testbed"  # conda env `testbed` of SWE-bench-harness images
TESTBED = "/testbed"


@dataclass(frozen=True)
class ImportOptions:
    """Overrides of the conventional image names (a row's own image always wins)."""

    image_namespace: str | None = None
    arch: str = "x86_64"


def _node_ids_only(rec: dict[str, Any], issues: Issues, why: str) -> None:
    """The project's pytest grader runs node ids: every F2P/P2P id must be one."""
    for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        odd = [t for t in rec[key] if not commands.is_node_id(t)]
        if odd:
            issues.error(key, f"{len(odd)} id(s) are not pytest node ids ({why}), e.g. {odd[0]!r}")


def _created_at(row: dict[str, Any], issues: Issues) -> str | None:
    """Informational: any scalar is kept as text (Parquet timestamps arrive as ISO strings)."""
    value = row.get("created_at")
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        issues.warn("created_at", f"a {type(value).__name__}, kept as {str(value)!r}")
    return str(value)


def _require_f2p(rec: dict[str, Any], issues: Issues) -> None:
    if not rec["FAIL_TO_PASS"] and "FAIL_TO_PASS" not in {f for f, _, _ in issues.items}:
        issues.error("FAIL_TO_PASS", "empty: no test tells a fix from an unchanged tree")


def _source(row: dict[str, Any], issues: Issues) -> str:
    """``swe-bench``, unless the row says what it is (a dataset of synthetic bugs in SWE-bench format)."""
    own = row.get("source")
    if own in (None, ""):
        return "swe-bench"
    if own not in get_args(TaskSource):
        issues.warn("source", f"{own!r} is not one of {', '.join(get_args(TaskSource))}: labelled swe-bench")
        return "swe-bench"
    return str(own)


def _common(row: dict[str, Any], issues: Issues) -> dict[str, Any]:
    """The SWE-bench columns every family but R2E-Gym shares."""
    return {
        "instance_id": text(row, "instance_id", issues),
        "source": _source(row, issues),
        "repo": text(row, "repo", issues),
        "problem_statement": text(row, "problem_statement", issues),
        "hints_text": text(row, "hints_text", issues, required=False),
        "FAIL_TO_PASS": test_ids(row, "FAIL_TO_PASS", issues),
        "PASS_TO_PASS": test_ids(row, "PASS_TO_PASS", issues),
        "created_at": _created_at(row, issues),
        "workdir": TESTBED,
    }


def _eval_image(ns: str, arch: str, instance_id: str, sep: str) -> str:
    """``<ns>/sweb.eval.<arch>.<instance_id lowercased, "__" -> sep>:latest``."""
    return f"{ns}/sweb.eval.{arch}.{instance_id.lower().replace('__', sep)}:latest"


# ---------------------------------------------------------------- test commands


def _verifier_runs_pytest(rec: dict[str, Any], issues: Issues, cmd: str | None, parser: str | None) -> None:
    rec["test_cmd"] = rec["log_parser"] = None
    _node_ids_only(rec, issues, "the project's pytest grader runs node ids")
    extra = commands.extra_pytest_options(cmd) if cmd else []
    if extra:
        issues.warn("test_cmd", f"graded by the project's pytest run; the harness's own options "
                                f"{' '.join(extra)} are not applied")
    if parser in ("parse_log_pytest_options", "parse_log_requests", "parse_log_pydicom", "parse_log_pylint"):
        cut = [t for t in rec["FAIL_TO_PASS"] + rec["PASS_TO_PASS"] if "[/" in t]
        if cut:
            issues.warn("FAIL_TO_PASS", f"{parser} shortens path parameters, so {len(cut)} id(s) may not "
                                        f"be collectable as written, e.g. {cut[0]!r}")


def _own_command(rec: dict[str, Any], cmd: str, parser: str) -> None:
    rec["test_cmd"], rec["log_parser"] = cmd, parser


def _legacy_or_inferred(rec: dict[str, Any], issues: Issues, version: str, test_patch: str) -> None:
    """4.x rows (no eval_script): the harness table, else pytest node ids, else reject."""
    try:
        found = commands.legacy_command(rec["repo"], version, test_patch)
    except HarnessCommandError as exc:
        if exc.field != "test_cmd":
            issues.error(exc.field, str(exc))
            return
        ids = rec["FAIL_TO_PASS"] + rec["PASS_TO_PASS"]
        if ids and all(commands.is_node_id(t) for t in ids):
            issues.warn("test_cmd", f"{rec['repo']} is not in the SWE-bench harness table; its test ids are "
                                    "pytest node ids, so the project's pytest grader runs them")
            rec["test_cmd"] = rec["log_parser"] = None
        else:
            issues.error("test_cmd", f"{exc}, and its test ids are not pytest node ids: needs a row with "
                                     "eval_script + log_parser (swebench 5.x schema) or an installed swebench "
                                     "4.x whose MAP_REPO_VERSION_TO_SPECS has this repo/version")
        return
    if found is None:
        _verifier_runs_pytest(rec, issues, None, None)
    else:
        _own_command(rec, *found)


def _swebench_command(row: dict[str, Any], rec: dict[str, Any], issues: Issues, version: str) -> None:
    eval_script, parser = row.get("eval_script"), row.get("log_parser")
    if not (isinstance(eval_script, str) and eval_script.strip()):
        _legacy_or_inferred(rec, issues, version, rec["test_patch"])
        return
    if not isinstance(parser, str) or not parser:
        issues.error("log_parser", "missing: a row with eval_script needs the parser of its log")
        return
    if parser not in commands.known_parsers():
        issues.error("log_parser", f"{parser!r} is not a swebench PARSER_REGISTRY name")
        return
    try:
        exports, cmd = commands.eval_script_command(eval_script)
    except HarnessCommandError as exc:
        issues.error(exc.field, str(exc))
        return
    if parser not in commands.PYTHON_PARSERS:
        rec["image_env"] = None  # the conda `testbed` env is the Python images' layout
    activated = commands.eval_script_env(eval_script)
    if activated:
        rec["image_env"] = activated  # the environment the instance's own script activates
    if parser in commands.PYTEST_PARSERS and commands.pytest_command(cmd):
        _verifier_runs_pytest(rec, issues, cmd, parser)
    else:
        _own_command(rec, "; ".join([*exports, cmd]), parser)


def _fail_only(row: dict[str, Any], rec: dict[str, Any], issues: Issues) -> None:
    if row.get("eval_type") == "fail_only" and rec["PASS_TO_PASS"]:
        issues.warn("eval_type", f"fail_only: the harness ignores PASS_TO_PASS, so its "
                                 f"{len(rec['PASS_TO_PASS'])} test(s) are dropped")
        rec["PASS_TO_PASS"] = []


# ---------------------------------------------------------------- families


def swebench(row: dict[str, Any], issues: Issues, opts: ImportOptions) -> dict[str, Any]:
    """princeton-nlp/SWE-bench* (4.x schema) and SWE-bench/* 5.x rows (+ image, eval_script, log_parser,
    eval_type). Image: the row's ``image``, else swebench/sweb.eval.<arch>.<id, __ -> _1776_>:latest."""
    rec = _common(row, issues)
    version = text(row, "version", issues, required=False)
    rec.update(base_commit=text(row, "base_commit", issues), patch=text(row, "patch", issues),
               test_patch=text(row, "test_patch", issues, required=False), version=version,
               environment_setup_commit=text(row, "environment_setup_commit", issues, required=False),
               image_env=SWEBENCH_ENV)
    if not rec["test_patch"].strip() and "test_patch" in row:
        issues.warn("test_patch", "empty: the tests that grade are already in the image's tree, "
                                  "where the agent can read them")
    image = row.get("image")
    rec["image"] = image if isinstance(image, str) and image else _eval_image(
        opts.image_namespace or "swebench", opts.arch, rec["instance_id"], "_1776_")
    _fail_only(row, rec, issues)
    if issues.ok:
        _swebench_command(row, rec, issues, version)
    return rec


def swe_gym(row: dict[str, Any], issues: Issues, opts: ImportOptions) -> dict[str, Any]:
    """SWE-Gym/SWE-Gym(-Lite): SWE-bench's columns minus environment_setup_commit, F2P/P2P as lists.
    Image: xingyaoww/sweb.eval.<arch>.<id lowercased, __ -> _s_>:latest (built with the SWE-bench
    harness, so /testbed + conda ``testbed``)."""
    rec = _common(row, issues)
    version = text(row, "version", issues, required=False)
    rec.update(base_commit=text(row, "base_commit", issues), patch=text(row, "patch", issues),
               test_patch=text(row, "test_patch", issues), version=version,
               environment_setup_commit=text(row, "environment_setup_commit", issues, required=False),
               image_env=SWEBENCH_ENV)
    image = row.get("image")
    rec["image"] = image if isinstance(image, str) and image else _eval_image(
        opts.image_namespace or "xingyaoww", opts.arch, rec["instance_id"], "_s_")
    if issues.ok:
        _swebench_command(row, rec, issues, version)
    return rec


def swe_rebench(row: dict[str, Any], issues: Issues, opts: ImportOptions) -> dict[str, Any]:
    """nebius/SWE-rebench: SWE-bench's columns + ``install_config`` (test_cmd, log_parser, ...), which
    replaces the spec table. The fork prefixes test_cmd with ``LANG=C.UTF-8 LC_ALL=C.UTF-8``, passes the
    test_patch's files as directives and sets environment_setup_commit := base_commit. Image: the row's,
    else swerebench/sweb.eval.<arch>.<id, __ -> _1776_>:latest; /testbed layout (V1)."""
    rec = _common(row, issues)
    base = text(row, "base_commit", issues)
    rec.update(base_commit=base, patch=text(row, "patch", issues), test_patch=text(row, "test_patch", issues),
               version=text(row, "version", issues, required=False),
               environment_setup_commit=text(row, "environment_setup_commit", issues, required=False) or base,
               image_env=SWEBENCH_ENV)
    image = row.get("image") or row.get("image_name")
    rec["image"] = image if isinstance(image, str) and image else _eval_image(
        opts.image_namespace or "swerebench", opts.arch, rec["instance_id"], "_1776_")
    config = row.get("install_config")
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except json.JSONDecodeError as exc:
            issues.error("install_config", f"not a JSON object: {exc.msg}")
            return rec
    if not isinstance(config, dict):
        issues.error("install_config", "missing" if config is None else f"expected an object, "
                                                                        f"got {type(config).__name__}")
        return rec
    parser, cmd = config.get("log_parser"), config.get("test_cmd")
    if isinstance(cmd, list) and all(isinstance(c, str) for c in cmd):
        cmd = "; ".join(cmd)
    if not isinstance(parser, str) or not parser:
        issues.error("install_config.log_parser", "missing")
    elif parser not in commands.known_parsers():
        issues.error("install_config.log_parser", f"{parser!r} is not a swebench PARSER_REGISTRY name "
                                                   "(SWE-rebench-V2's own parsers are not supported)")
    if not isinstance(cmd, str) or not cmd.strip():
        issues.error("install_config.test_cmd", "missing")
    if not issues.ok:
        return rec
    if parser not in commands.PYTHON_PARSERS:
        rec["image_env"] = None
    if parser in commands.PYTEST_PARSERS and commands.pytest_command(cmd):
        _verifier_runs_pytest(rec, issues, cmd, parser)
        return rec
    directives = commands.harness_directives(rec["repo"], rec["test_patch"])
    prefix = "" if cmd.startswith("LANG=") else "LANG=C.UTF-8 LC_ALL=C.UTF-8 "
    _own_command(rec, " ".join([prefix + cmd, *directives]), parser)
    return rec


_SWESMITH_REPO = re.compile(r"^(?:[^/]+/)?([^/_]+(?:_[^/_]+)*)__([^/]+)\.([0-9a-fA-F]{8})$")


def swe_smith(row: dict[str, Any], issues: Issues, opts: ImportOptions) -> dict[str, Any]:
    """SWE-bench/SWE-smith*: ``patch`` CREATES the bug (setup_patch; the gold fix is its reverse), no
    test_patch (the tests are in the repo), one image per repo snapshot (``image_name``, else
    swebench/swesmith.<arch>.<owner>_1776_<repo>.<commit8> from ``repo`` = swesmith/<owner>__<repo>.<commit8>),
    /testbed + conda ``testbed``. Graded by pytest (PythonProfile)."""
    rec = _common(row, issues)
    bug = text(row, "patch", issues)
    rec.update(base_commit="", test_patch=text(row, "test_patch", issues, required=False), version="",
               environment_setup_commit="", image_env=SWEBENCH_ENV, setup_patch=bug, patch="")
    if bug.strip():
        try:
            rec["patch"] = reverse_patch(bug)
        except PatchError as exc:
            issues.error("patch", f"cannot reverse the bug patch into the fix: {exc}")
    if row.get("base_commit"):
        issues.warn("base_commit", "not used: it is the bug commit on the swesmith GitHub mirror, absent "
                                   "from the image; the image's tree + setup_patch is the buggy base")
    image = row.get("image_name")
    if isinstance(image, str) and image:
        rec["image"] = image
    else:
        found = _SWESMITH_REPO.match(rec["repo"])
        if found:
            owner, name, commit = found.groups()
            ns = opts.image_namespace or "swebench"
            rec["image"] = f"{ns}/swesmith.{opts.arch}.{owner}_1776_{name}.{commit}".lower()
            issues.warn("image_name", f"missing: derived {rec['image']} from repo (ORG_NAME_DH 'swebench'; "
                                      "older snapshots are under 'jyangballin', see --image-namespace)")
        else:
            issues.error("image_name", "missing, and repo is not swesmith/<owner>__<repo>.<commit8> to derive it")
    _require_f2p(rec, issues)
    if issues.ok:
        rec["test_cmd"] = rec["log_parser"] = None
        _node_ids_only(rec, issues, "SWE-smith's non-pytest test commands live in its repo profiles, "
                                    "not in the row")
    return rec


def r2e_gym(row: dict[str, Any], issues: Issues, opts: ImportOptions) -> dict[str, Any]:
    """R2E-Gym rows; see :mod:`task_factory.datasets.r2e`. Rows built on SWE-bench images (docker_image
    contains "swebench") and carrying SWE-bench's columns are read as swebench rows."""
    docker_image = row.get("docker_image")
    if isinstance(docker_image, str) and "swebench" in docker_image and "FAIL_TO_PASS" in row:
        return swebench({**row, "image": row.get("image") or docker_image}, issues, opts)
    return r2e.normalise(row, issues)


NORMALISERS: dict[str, Callable[[dict[str, Any], Issues, ImportOptions], dict[str, Any]]] = {
    "swebench": swebench, "swe-gym": swe_gym, "swe-smith": swe_smith, "r2e-gym": r2e_gym,
    "swe-rebench": swe_rebench,
}


def normalise(family: str, row: dict[str, Any], opts: ImportOptions) -> tuple[dict[str, Any], Issues]:
    """The record fields of one row and its problems (the record is usable only when issues.ok)."""
    issues = Issues()
    rec = NORMALISERS[family](row, issues, opts)
    rec = {**rec, "dataset": family}
    if issues.ok and family != "swe-smith":
        _require_f2p(rec, issues)
    return rec, issues


def detect(columns: set[str]) -> tuple[str | None, str]:
    """(family, why) from the columns of a file; None when no family fits."""
    if {"org", "number", "fix_patch"} <= columns:
        return None, "Multi-SWE-bench columns (org, number, fix_patch): not a supported family"
    if "expected_output_json" in columns or {"docker_image", "repo_name"} <= columns:
        return "r2e-gym", "auto: expected_output_json / docker_image + repo_name columns"
    if "install_config" in columns:
        return "swe-rebench", "auto: install_config column"
    if "image_name" in columns and "test_patch" not in columns:
        return "swe-smith", "auto: image_name column and no test_patch"
    if {"instance_id", "FAIL_TO_PASS", "test_patch"} <= columns:
        if "environment_setup_commit" not in columns:
            return "swe-gym", "auto: SWE-bench columns without environment_setup_commit"
        return "swebench", "auto: SWE-bench columns" + (" + eval_script (5.x)" if "eval_script" in columns else "")
    return None, f"auto: no family has these columns ({', '.join(sorted(columns)[:8]) or 'none'}); pass --format"
