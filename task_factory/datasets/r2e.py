"""R2E-Gym rows -> task records (facts from R2E-Gym @69bc953, see shared notes ``datasets.md``).

An R2E-Gym row has no FAIL_TO_PASS / PASS_TO_PASS and no test_patch. Its reward runs the
hidden tests of the image (``/r2e_tests``, via ``/testbed/run_tests.sh``), parses pytest's
``-rA`` summary into ``{"Class.test": status}`` (the file path dropped) and demands exactly
``expected_output_json``. The mapping here:

- test_patch: adds ``r2e_tests/<name>`` from ``execution_result_content`` (``test_file_names``,
  ``test_file_codes``: the same files the image holds in /r2e_tests).
- tests: each expected-PASSED key becomes the node id ``r2e_tests/<file>::Class::test``. The
  ones the pre-fix run (``old_commit_res_stdout``) did not pass are FAIL_TO_PASS, the ones it
  passed PASS_TO_PASS; with no pre-fix log all are FAIL_TO_PASS (the grader requires every one to
  pass either way). Expected FAILED/ERROR tests are dropped (R2E also demands they keep failing;
  the project's grader cannot), with a warning.
- graded by the project's pytest run (test_cmd None): R2E's own parser is not a swebench one.
  Rows whose tests R2E runs with its own unittest runner (tornado, some pillow) are rejected.
- patch (gold): the row's ``patch`` if any, else the non-test file diffs of
  ``parsed_commit_content`` (R2E's ParsedCommit) written as a git diff; base_commit its
  ``old_commit_hash``. Image ``docker_image``; repo at /testbed, uv venv /testbed/.venv.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..task_sources import task_id
from .patches import new_files_patch
from .rows import Issues, text

R2E_ENV = "/testbed/.venv"
_RUNNERS = ("tornado_unittest_runner.py", "unittest_custom_runner.py")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _json_field(row: dict[str, Any], key: str, issues: Issues, kind: type) -> Any:
    value = row.get(key)
    if value is None:
        issues.error(key, "missing")
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            issues.error(key, f"not JSON: {exc.msg} (column {exc.colno})")
            return None
    if not isinstance(value, kind):
        issues.error(key, f"expected a JSON {kind.__name__}, got {type(value).__name__}")
        return None
    return value


def _clean_key(key: str) -> str:
    """R2E compares keys without ANSI colours and cut at " - "."""
    return _ANSI.sub("", key).split(" - ")[0]


def summary_statuses(log: str) -> dict[str, str]:
    """R2E's reading of a pytest log: after "short test summary info", PASSED/FAILED/ERROR lines,
    the test named by its ``::`` parts after the file, joined with dots."""
    if not log or "short test summary info" not in log:
        return {}
    out: dict[str, str] = {}
    for line in log.split("short test summary info", 1)[1].strip().split("\n"):
        for status in ("PASSED", "FAILED", "ERROR"):
            if status in line:
                out[_clean_key(".".join(line.split("::")[1:]))] = status
                break
    return out


def _is_test_path(path: str) -> bool:
    """R2E's FileDiff.is_test_file."""
    parts = path.split("/")
    return (path.endswith("_test.py") or path.startswith("test_") or parts[-1].startswith("test_")
            or any(p in parts for p in ("tests", "Tests", "test", "Test")))


def _range(r: dict[str, Any]) -> str:
    return str(r["start"]) if r.get("length") is None else f"{r['start']},{r['length']}"


_SIGN = {"context": " ", "added": "+", "deleted": "-", "note": "\\ "}


def _file_diff(fd: dict[str, Any]) -> str:
    """One ParsedCommit FileDiff as git diff text."""
    path = fd["header"]["file"]["path"]
    out = [f"diff --git a/{path} b/{path}"]
    if fd["header"].get("misc_line"):
        out.append(fd["header"]["misc_line"])
    index = fd.get("index_line")
    if index:
        mode = index.get("mode") or ""
        out.append(f"index {index['old_commit_hash']}..{index['new_commit_hash']}{' ' + mode if mode else ''}")
    if fd.get("minus_file") and fd.get("plus_file"):
        out += [f"--- {fd['minus_file']['path']}", f"+++ {fd['plus_file']['path']}"]
    for hunk in fd.get("hunks", []):
        d = hunk["descriptor"]
        out.append(f"@@ -{_range(d['old_range'])} +{_range(d['new_range'])} @@"
                   + (f" {d['section']}" if d.get("section") else ""))
        out += [_SIGN[line["type"]] + line["content"] for line in hunk["line_group"]["all_lines"]]
    return "\n".join(out) + "\n"


def _gold_patch(commit: dict[str, Any], issues: Issues) -> str:
    parts, other = [], []
    try:
        for fd in commit.get("file_diffs", []):
            path = fd["header"]["file"]["path"]
            if _is_test_path(path):
                continue
            if fd.get("is_binary_file"):
                issues.warn("parsed_commit_content", f"binary change to {path} left out of the gold patch")
                continue
            if not path.endswith(".py"):
                other.append(path)
            parts.append(_file_diff(fd))
    except (KeyError, TypeError) as exc:
        issues.error("parsed_commit_content", f"file_diffs are not R2E ParsedCommit diffs: {exc!r}")
        return ""
    if not parts:
        issues.error("parsed_commit_content", "no non-test file change to use as the gold patch")
    if other:
        issues.warn("patch", f"the fix also changes non-Python files ({', '.join(other[:3])}); "
                             "compiled parts may need a rebuild in the image")
    return "".join(parts)


def _node_id(key: str, files: dict[str, str]) -> str | None:
    """``Class.test[param]`` -> ``r2e_tests/<file>::Class::test[param]``; None if no single file defines it."""
    head, bracket, param = key.partition("[")
    parts = head.split(".")
    candidates = [n for n in files if n.endswith(".py") and n.startswith("test")]
    if len(candidates) > 1:
        define = re.compile(rf"^(?:class|def|async def)\s+{re.escape(parts[0])}\b", re.MULTILINE)
        candidates = [n for n in candidates if define.search(files[n])]
    if len(candidates) != 1 or not all(parts):
        return None
    return f"r2e_tests/{candidates[0]}::" + "::".join(parts) + (bracket + param if bracket else "")


def _statement(text: str) -> str:
    """R2E wraps the issue in [ISSUE] ... [/ISSUE]."""
    text = text.split("[/ISSUE]")[0]
    return (text.split("[ISSUE]", 1)[1] if "[ISSUE]" in text else text).strip()


def normalise(row: dict[str, Any], issues: Issues) -> dict[str, Any]:
    repo = text(row, "repo_name", issues)
    image = text(row, "docker_image", issues)
    statement = _statement(text(row, "problem_statement", issues))
    expected = _json_field(row, "expected_output_json", issues, dict)
    commit = _json_field(row, "parsed_commit_content", issues, dict)
    result = _json_field(row, "execution_result_content", issues, dict)
    rec: dict[str, Any] = {"source": "swe-bench", "repo": repo, "problem_statement": statement, "hints_text": "",
                           "image": image, "workdir": "/testbed", "image_env": R2E_ENV, "version": "",
                           "environment_setup_commit": "", "test_cmd": None, "log_parser": None,
                           "FAIL_TO_PASS": [], "PASS_TO_PASS": [], "patch": "", "test_patch": "",
                           "base_commit": "", "created_at": None}
    commit_hash = row.get("commit_hash") or (commit or {}).get("new_commit_hash") or ""
    rec["instance_id"] = row.get("instance_id") or ""
    if not rec["instance_id"] and repo and commit_hash:
        try:  # the one id rule of the ids the factory makes
            rec["instance_id"] = task_id(repo, commit_hash[:12])
        except ValueError as exc:
            issues.error("repo_name", str(exc))
    elif not rec["instance_id"]:
        issues.error("commit_hash", "missing: no instance_id and nothing to name the instance by")
    if commit is not None:
        rec["base_commit"] = commit.get("old_commit_hash") or ""
        if not rec["base_commit"]:
            issues.error("parsed_commit_content", "no old_commit_hash (the pre-fix commit)")
        rec["created_at"] = commit.get("commit_date")
        patch = row.get("patch")
        rec["patch"] = patch if isinstance(patch, str) and patch.strip() else _gold_patch(commit, issues)
    if expected is None or result is None:
        return rec
    names, codes = result.get("test_file_names"), result.get("test_file_codes")
    if not (isinstance(names, list) and isinstance(codes, list) and names and len(names) == len(codes)):
        issues.error("execution_result_content", "test_file_names / test_file_codes missing or of unequal length")
        return rec
    runners = [n for n in names if n in _RUNNERS]
    if runners:
        issues.error("test_cmd", f"R2E runs these tests with its own unittest runner (r2e_tests/{runners[0]}), "
                                 "whose log no swebench parser reads and whose ids are not pytest node ids")
        return rec
    files = dict(zip(names, codes))
    rec["test_patch"] = new_files_patch({f"r2e_tests/{n}": c for n, c in files.items()})
    before = summary_statuses(result.get("old_commit_res_stdout") or "")
    if not before:
        issues.warn("FAIL_TO_PASS", "no pre-fix test log (old_commit_res_stdout): every expected-PASSED "
                                    "test is listed as FAIL_TO_PASS")
    dropped = []
    for raw_key, status in expected.items():
        key = _clean_key(raw_key)
        if status != "PASSED":
            dropped.append(f"{key}={status}")
            continue
        node = _node_id(key, files)
        if node is None:
            issues.error("expected_output_json", f"cannot tell which r2e_tests file holds {key!r}")
            continue
        rec["PASS_TO_PASS" if before.get(key) == "PASSED" else "FAIL_TO_PASS"].append(node)
    if dropped:
        issues.warn("expected_output_json", f"{len(dropped)} test(s) expected to fail are not graded "
                                            f"(R2E demands they keep failing), e.g. {dropped[0]}")
    issues.warn("docker_image", "the image holds the hidden tests (/r2e_tests, /testbed/run_tests.sh): "
                                "an agent can read them unless the image is scrubbed")
    return rec
