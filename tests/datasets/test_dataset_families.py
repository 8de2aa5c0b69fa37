"""Per-family normalisers and auto detection (task_factory.datasets.families / r2e / harness)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from task_factory.datasets import ImportOptions, detect, normalise
from task_factory.datasets.commands import eval_script_command, harness_directives
from task_factory.datasets.patches import reverse_patch

FIXTURES = Path(__file__).parent / "fixtures"


def _rows(name: str) -> list[dict[str, Any]]:
    path = FIXTURES / name
    if path.suffix == ".json":
        return json.loads(path.read_text())
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _by_id(name: str) -> dict[str, dict[str, Any]]:
    return {r.get("instance_id") or r.get("repo_name"): r for r in _rows(name)}


def _ok(family: str, row: dict[str, Any], opts: ImportOptions | None = None) -> tuple[dict[str, Any], list]:
    rec, issues = normalise(family, row, opts or ImportOptions())
    assert issues.ok, issues.items
    return rec, [(f, m) for f, m, s in issues.items if s == "warning"]


def _errors(family: str, row: dict[str, Any]) -> list[tuple[str, str]]:
    _, issues = normalise(family, row, ImportOptions())
    return [(f, m) for f, m, s in issues.items if s == "error"]


# ---------------------------------------------------------------- swebench


def test_f2p_as_json_string_or_list_gives_the_same_record() -> None:
    row = _by_id("swebench_4x.jsonl")["astropy__astropy-12907"]
    assert isinstance(row["FAIL_TO_PASS"], str)
    as_list = {**row, "FAIL_TO_PASS": json.loads(row["FAIL_TO_PASS"]), "PASS_TO_PASS": json.loads(row["PASS_TO_PASS"])}
    assert _ok("swebench", row)[0] == _ok("swebench", as_list)[0]
    assert _ok("swebench", row)[0]["FAIL_TO_PASS"][0].endswith("test_separable[compound_model6-result6]")


def test_swebench_pytest_repo_is_graded_by_the_project_pytest_run() -> None:
    rec, warnings = _ok("swebench", _by_id("swebench_4x.jsonl")["astropy__astropy-12907"])
    assert (rec["test_cmd"], rec["log_parser"], warnings) == (None, None, [])
    assert rec["image"] == "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"
    assert (rec["workdir"], rec["image_env"], rec["source"], rec["dataset"]) == (
        "/testbed", "/opt/miniconda3/envs/testbed", "swe-bench", "swebench")


def test_image_name_overrides_and_the_row_image_wins() -> None:
    row = _by_id("swebench_4x.jsonl")["django__django-11099"]
    rec, _ = _ok("swebench", row, ImportOptions(image_namespace="mirror.local/sb", arch="arm64"))
    assert rec["image"] == "mirror.local/sb/sweb.eval.arm64.django_1776_django-11099:latest"
    rec, _ = _ok("swebench", {**row, "image": "my/own:1"}, ImportOptions(image_namespace="x"))
    assert rec["image"] == "my/own:1"


def test_django_4x_runs_runtests_with_dotted_directives() -> None:
    row = _by_id("swebench_4x.jsonl")["django__django-11099"]
    rec, _ = _ok("swebench", row)
    assert rec["log_parser"] == "parse_log_django"
    assert rec["test_cmd"].endswith("./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 "
                                    "auth_tests.test_validators")
    assert "export LANG=en_US.UTF-8" in rec["test_cmd"]
    rec, _ = _ok("swebench", {**row, "version": "1.9"})
    assert rec["test_cmd"].endswith("./tests/runtests.py --verbosity 2 auth_tests.test_validators")


def test_sympy_and_sphinx_4x_commands() -> None:
    rec, _ = _ok("swebench", _by_id("swebench_4x.jsonl")["sympy__sympy-20590"])
    assert rec["test_cmd"] == ("PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose "
                               "sympy/core/tests/test_basic.py")
    assert rec["log_parser"] == "parse_log_sympy" and rec["FAIL_TO_PASS"] == ["test_immutable"]
    sphinx = {**_by_id("swebench_4x.jsonl")["astropy__astropy-12907"], "repo": "sphinx-doc/sphinx",
              "instance_id": "sphinx-doc__sphinx-8721", "version": "3.5",
              "test_patch": "diff --git a/tests/test_ext_viewcode.py b/tests/test_ext_viewcode.py\n"
                            "diff --git a/tests/roots/conf.json b/tests/roots/conf.json\n"}
    rec, _ = _ok("swebench", sphinx)
    assert (rec["test_cmd"], rec["log_parser"]) == ("tox --current-env -epy39 -v -- tests/test_ext_viewcode.py",
                                                    "parse_log_sphinx")


def test_unknown_repo_node_ids_are_graded_by_pytest_with_a_warning() -> None:
    row = {**_by_id("swebench_4x.jsonl")["astropy__astropy-12907"], "repo": "psf/black", "instance_id": "psf__black-1"}
    rec, warnings = _ok("swebench", row)
    assert rec["test_cmd"] is None and warnings and warnings[0][0] == "test_cmd"


def test_unknown_non_pytest_repo_is_rejected_on_test_cmd() -> None:
    row = json.loads((FIXTURES / "swebench_bad.jsonl").read_text().splitlines()[2])
    [(field, message)] = _errors("swebench", row)
    assert field == "test_cmd" and "example/unittest-only" in message and "eval_script" in message


def test_installed_swebench_4x_specs_are_used_first(monkeypatch: pytest.MonkeyPatch) -> None:
    def parse_log_django() -> None: ...

    constants = types.ModuleType("swebench.harness.constants")
    constants.MAP_REPO_VERSION_TO_SPECS = {"django/django": {"3.0": {  # type: ignore[attr-defined]
        "test_cmd": "./tests/runtests.py --verbosity 3", "eval_commands": ["export LANG=C.UTF-8", "locale-gen"]}}}
    parsers = types.ModuleType("swebench.harness.log_parsers")
    parsers.MAP_REPO_TO_PARSER = {"django/django": parse_log_django}  # type: ignore[attr-defined]
    for name, mod in {"swebench": types.ModuleType("swebench"), "swebench.harness": types.ModuleType("h"),
                      "swebench.harness.constants": constants, "swebench.harness.log_parsers": parsers}.items():
        monkeypatch.setitem(sys.modules, name, mod)
    rec, _ = _ok("swebench", _by_id("swebench_4x.jsonl")["django__django-11099"])
    assert rec["test_cmd"] == "export LANG=C.UTF-8; ./tests/runtests.py --verbosity 3 auth_tests.test_validators"


def test_5x_eval_script_command_is_extracted_between_the_markers() -> None:
    rows = _by_id("swebench_5x.json")
    rec, _ = _ok("swebench", rows["django__django-11099"])
    assert rec["test_cmd"] == ("export LANG=en_US.UTF-8; export LANGUAGE=en_US:en; export LC_ALL=en_US.UTF-8; "
                               "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 "
                               "auth_tests.test_validators")
    assert rec["log_parser"] == "parse_log_django"
    rec, _ = _ok("swebench", rows["astropy__astropy-12907"])  # parse_log_pytest_v2 + pytest: the project's grader
    assert (rec["test_cmd"], rec["log_parser"]) == (None, None)


def test_eval_script_exports_inside_the_test_patch_heredoc_are_not_taken() -> None:
    script = ("cd /testbed\nexport A=1\ngit apply -v - <<'EOF_1'\nexport B=2\nEOF_1\n"
              ": '>>>>> Start Test Output'\nmake check\n: '>>>>> End Test Output'\n")
    assert eval_script_command(script) == (["export A=1"], "make check")


@pytest.mark.parametrize("change, field", [
    ({"log_parser": "parse_log_unheard_of"}, "log_parser"),
    ({"log_parser": None}, "log_parser"),
    ({"eval_script": "#!/bin/bash\npytest -rA\n"}, "eval_script"),
])
def test_5x_rows_without_a_usable_harness_are_rejected(change: dict, field: str) -> None:
    row = {**_by_id("swebench_5x.json")["django__django-11099"], **change}
    assert [f for f, _ in _errors("swebench", row)] == [field]


def test_5x_non_python_parser_keeps_its_command_and_drops_the_conda_env() -> None:
    row = {**_by_id("swebench_5x.json")["django__django-11099"], "log_parser": "parse_log_jest",
           "eval_type": "fail_only",
           "eval_script": ": '>>>>> Start Test Output'\nnpx jest src/a.test.js\n: '>>>>> End Test Output'\n"}
    rec, warnings = _ok("swebench", row)
    assert (rec["test_cmd"], rec["log_parser"], rec["image_env"]) == ("npx jest src/a.test.js", "parse_log_jest", None)
    assert rec["PASS_TO_PASS"] == [] and warnings[0][0] == "eval_type"


def test_directives_drop_non_test_files() -> None:
    patch = "diff --git a/t/test_a.py b/t/test_a.py\ndiff --git a/t/data.json b/t/data.json\n"
    assert harness_directives("o/r", patch) == ["t/test_a.py"]


# ---------------------------------------------------------------- swe-gym, swe-rebench


def test_swe_gym_image_uses_the_s_separator() -> None:
    rec, _ = _ok("swe-gym", _rows("swe_gym.jsonl")[0])
    assert rec["image"] == "xingyaoww/sweb.eval.x86_64.getmoto_s_moto-5406:latest"
    assert rec["environment_setup_commit"] == "" and rec["dataset"] == "swe-gym"


def test_swe_rebench_pytest_parser_and_own_command() -> None:
    ok, bad = _rows("swe_rebench.jsonl")
    rec, _ = _ok("swe-rebench", ok)
    assert (rec["test_cmd"], rec["image"]) == (None, "swerebench/sweb.eval.x86_64.pydata_1776_xarray-9760:latest")
    as_text = {**ok, "install_config": json.dumps({"test_cmd": "tox -e py -- -rA", "log_parser": "parse_log_pytest"})}
    rec, _ = _ok("swe-rebench", as_text)
    assert rec["test_cmd"] == ("LANG=C.UTF-8 LC_ALL=C.UTF-8 tox -e py -- -rA "
                               "tests/test_dynamodb/test_dynamodb_table_without_range_key.py")
    assert rec["log_parser"] == "parse_log_pytest" and rec["environment_setup_commit"] == ok["environment_setup_commit"]
    [(field, message)] = _errors("swe-rebench", bad)
    assert field == "install_config.log_parser" and "parse_go_test_json" in message
    assert [f for f, _ in _errors("swe-rebench", {**ok, "install_config": None})] == ["install_config"]


# ---------------------------------------------------------------- swe-smith


def test_swe_smith_bug_patch_is_the_setup_and_its_reverse_the_gold_fix() -> None:
    row = _rows("swe_smith.jsonl")[0]
    rec, warnings = _ok("swe-smith", row)
    assert rec["setup_patch"] == row["patch"] and rec["patch"] == reverse_patch(row["patch"])
    assert "+    return decode_params_utf8(params)" in rec["patch"]
    assert (rec["image"], rec["test_patch"], rec["base_commit"], rec["test_cmd"]) == (
        "swebench/swesmith.x86_64.oauthlib_1776_oauthlib.1fd52536", "", "", None)
    assert [f for f, _ in warnings] == ["base_commit"]


def test_swe_smith_image_is_derived_from_repo_when_missing() -> None:
    row = _rows("swe_smith.jsonl")[1]
    rec, warnings = _ok("swe-smith", row, ImportOptions(image_namespace="jyangballin"))
    assert rec["image"] == "jyangballin/swesmith.x86_64.oauthlib_1776_oauthlib.1fd52536"
    assert "image_name" in [f for f, _ in warnings]
    assert [f for f, _ in _errors("swe-smith", {**row, "repo": "oauthlib/oauthlib"})] == ["image_name"]


def test_swe_smith_rejects_non_node_ids_and_unreversible_patches() -> None:
    row = _rows("swe_smith.jsonl")[0]
    assert [f for f, _ in _errors("swe-smith", {**row, "FAIL_TO_PASS": ["TestParser.ParsesInts"]})] == ["FAIL_TO_PASS"]
    binary = "diff --git a/a.png b/a.png\nindex 1..2 100644\nGIT binary patch\nliteral 1\n"
    assert [f for f, _ in _errors("swe-smith", {**row, "patch": binary})] == ["patch"]


# ---------------------------------------------------------------- r2e-gym


def test_r2e_expected_passes_split_by_the_pre_fix_run_into_node_ids() -> None:
    pandas = _rows("r2e_gym.jsonl")[0]
    rec, warnings = _ok("r2e-gym", pandas)
    assert rec["FAIL_TO_PASS"] == ["r2e_tests/test_1.py::test_maybe_cast_none"]
    assert rec["PASS_TO_PASS"] == ["r2e_tests/test_1.py::TestCast::test_keeps_ints",
                                   "r2e_tests/test_1.py::TestCast::test_params[1.5]"]
    assert rec["test_patch"].startswith("diff --git a/r2e_tests/test_1.py b/r2e_tests/test_1.py\nnew file mode")
    assert rec["patch"].startswith("diff --git a/pandas/core/dtypes/cast.py") and "pandas/tests" not in rec["patch"]
    assert rec["base_commit"] == json.loads(pandas["parsed_commit_content"])["old_commit_hash"]
    assert (rec["image"], rec["image_env"], rec["test_cmd"]) == (pandas["docker_image"], "/testbed/.venv", None)
    assert rec["problem_statement"].startswith("**Title:**") and "[ISSUE]" not in rec["problem_statement"]
    assert {f for f, _ in warnings} == {"expected_output_json", "docker_image"}
    assert any("hidden tests" in m for _, m in warnings)


def test_r2e_without_a_pre_fix_log_lists_every_expected_pass_as_fail_to_pass() -> None:
    pandas = _rows("r2e_gym.jsonl")[0]
    result = {**json.loads(pandas["execution_result_content"]), "old_commit_res_stdout": None}
    rec, warnings = _ok("r2e-gym", {**pandas, "execution_result_content": json.dumps(result)})
    assert len(rec["FAIL_TO_PASS"]) == 3 and rec["PASS_TO_PASS"] == []
    assert "FAIL_TO_PASS" in [f for f, _ in warnings]


def test_r2e_rows_it_cannot_grade_are_rejected() -> None:
    pandas, tornado = _rows("r2e_gym.jsonl")
    assert [f for f, _ in _errors("r2e-gym", tornado)] == ["test_cmd"]
    two_files = {**json.loads(pandas["execution_result_content"]), "test_file_names": ["test_1.py", "test_2.py"],
                 "test_file_codes": ["def test_a(): pass\n", "def test_a(): pass\n"]}
    errors = _errors("r2e-gym", {**pandas, "execution_result_content": json.dumps(two_files)})
    assert errors and {f for f, _ in errors} == {"expected_output_json"}
    assert [f for f, _ in _errors("r2e-gym", {**pandas, "expected_output_json": "{oops"})] == ["expected_output_json"]


def test_r2e_rows_on_swebench_images_are_read_as_swebench() -> None:
    row = {**_by_id("swebench_4x.jsonl")["astropy__astropy-12907"],
           "docker_image": "slimshetty/swebench-verified:sweb.eval.x86_64.astropy__astropy-12907"}
    rec, _ = _ok("r2e-gym", row)
    assert rec["image"] == row["docker_image"] and rec["dataset"] == "r2e-gym"


# ---------------------------------------------------------------- detection


@pytest.mark.parametrize("fixture, family", [
    ("swebench_4x.jsonl", "swebench"), ("swebench_5x.json", "swebench"), ("swe_gym.jsonl", "swe-gym"),
    ("swe_smith.jsonl", "swe-smith"), ("swe_rebench.jsonl", "swe-rebench"), ("r2e_gym.jsonl", "r2e-gym"),
])
def test_auto_detection_from_columns(fixture: str, family: str) -> None:
    columns = {k for r in _rows(fixture) for k in r}
    assert detect(columns)[0] == family


def test_detection_refuses_multi_swe_bench_and_unknown_columns() -> None:
    family, why = detect({"org", "repo", "number", "fix_patch", "test_patch"})
    assert family is None and "Multi-SWE-bench" in why
    assert detect({"question", "answer"})[0] is None


@pytest.mark.parametrize("activation, env", [
    ("source /opt/miniconda3/bin/activate\nconda activate testbed\n", "/opt/miniconda3/envs/testbed"),
    ("source /opt/envs/testbed/bin/activate\n", "/opt/envs/testbed"),
    ("", "/opt/miniconda3/envs/testbed"),  # none named: the SWE-bench layout's default
])
def test_5x_image_env_is_the_one_the_eval_script_activates(activation: str, env: str) -> None:
    row = {**_by_id("swebench_5x.json")["django__django-11099"],
           "eval_script": f"#!/bin/bash\n{activation}cd /testbed\n: '>>>>> Start Test Output'\n"
                          "./tests/runtests.py utils_tests\n: '>>>>> End Test Output'\n"}
    rec, _ = _ok("swebench", row)
    assert rec["image_env"] == env


def test_a_row_that_says_what_it_is_keeps_its_source() -> None:
    row = _by_id("swebench_5x.json")["django__django-11099"]
    assert _ok("swebench", row)[0]["source"] == "swe-bench"
    assert _ok("swebench", {**row, "source": "synthetic-mutation"})[0]["source"] == "synthetic-mutation"
    rec, warnings = _ok("swebench", {**row, "source": "handmade"})
    assert rec["source"] == "swe-bench" and ("source" in [w[0] for w in warnings])
