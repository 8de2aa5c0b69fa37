"""What the SWE-bench harness runs for an instance, as facts the importer maps from.

Sources (read from swebench's code, see shared notes ``datasets.md``): v4.1.0
``harness/constants/python.py`` (test commands), ``harness/test_spec/python.py``
(directives, eval script shape), 5.0.2 ``harness/log_parsers`` (``PARSER_REGISTRY``
names). The installed ``swebench`` package, when there is one (4.x), is asked first
for a repo/version's command; it is optional and imported lazily.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

START_MARKER = ">>>>> Start Test Output"
END_MARKER = ">>>>> End Test Output"

#: ``PARSER_REGISTRY`` keys of swebench 5.0.2 (harness/log_parsers/__init__.py).
PYTHON_PARSERS = frozenset({
    "parse_log_pytest", "parse_log_pytest_options", "parse_log_django", "parse_log_pytest_v2",
    "parse_log_seaborn", "parse_log_sympy", "parse_log_matplotlib", "parse_log_astroid", "parse_log_flask",
    "parse_log_marshmallow", "parse_log_pvlib", "parse_log_pyvista", "parse_log_sqlfluff", "parse_log_xarray",
    "parse_log_pydicom", "parse_log_requests", "parse_log_pylint", "parse_log_astropy", "parse_log_scikit",
    "parse_log_sphinx",
})
OTHER_PARSERS = frozenset({
    "parse_log_calypso", "parse_log_bpmn_js", "parse_log_carbon", "parse_log_eslint", "parse_log_grommet",
    "parse_log_highlightjs", "parse_log_lighthouse", "parse_log_next", "parse_log_openlayers",
    "parse_log_prismjs", "parse_log_quarto_cli", "parse_log_chart_js", "parse_log_marked", "parse_log_p5js",
    "parse_log_react_pdf", "parse_log_jest", "parse_log_jest_json", "parse_log_vitest", "parse_log_karma",
    "parse_log_tap", "parse_log_immutable_js", "parse_log_redis", "parse_log_jq", "parse_log_doctest",
    "parse_log_micropython_test", "parse_log_googletest", "parse_log_gotest", "parse_log_maven",
    "parse_log_ant", "parse_log_gradle_custom", "parse_log_phpunit", "parse_log_minitest",
    "parse_log_cucumber", "parse_log_ruby_unit", "parse_log_rspec_transformed_json", "parse_log_jekyll",
    "parse_log_cargo",
})
KNOWN_PARSERS = PYTHON_PARSERS | OTHER_PARSERS
#: Parsers that read pytest's ``-rA`` summary (aliases of parse_log_pytest / _options / _v2, plus
#: matplotlib's and seaborn's variants): their test ids are pytest node ids.
PYTEST_PARSERS = PYTHON_PARSERS - {"parse_log_django", "parse_log_sympy"}

#: v4.1.0 MAP_REPO_TO_PARSER_PY: the SWE-bench repos whose harness runs pytest directly.
PYTEST_REPOS = frozenset({
    "astropy/astropy", "marshmallow-code/marshmallow", "matplotlib/matplotlib", "mwaskom/seaborn",
    "pallets/flask", "psf/requests", "pvlib/pvlib-python", "pydata/xarray", "pydicom/pydicom",
    "pylint-dev/astroid", "pylint-dev/pylint", "pytest-dev/pytest", "pyvista/pyvista",
    "scikit-learn/scikit-learn", "sqlfluff/sqlfluff",
})

TEST_DJANGO = "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1"
TEST_DJANGO_NO_PARALLEL = "./tests/runtests.py --verbosity 2"  # Django 1.9
TEST_SYMPY = "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose"
TEST_SPHINX = "tox --current-env -epy39 -v --"
#: v4.1.0 SPECS_DJANGO eval_commands (the locale exports; 3.x also runs locale-gen, not kept).
_DJANGO_EXPORTS_1X = "export LANG=en_US.UTF-8; export LC_ALL=en_US.UTF-8; export PYTHONIOENCODING=utf8; " \
                     "export LANGUAGE=en_US:en; "
_DJANGO_EXPORTS_3X = "export LANG=en_US.UTF-8; export LANGUAGE=en_US:en; export LC_ALL=en_US.UTF-8; "
_DJANGO_1X = {"1.7", "1.8", "1.9", "1.10", "1.11", "2.0", "2.1", "2.2"}
_DJANGO_3X = {"3.0", "3.1", "3.2"}

#: v4.1.0 NON_TEST_EXTS ("csv" has no dot there, so it is kept that way).
NON_TEST_EXTS = (".json", ".png", "csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml", ".yaml", ".toml")

_NODE_ID = re.compile(r"^[^\s]+?\.py(::\S.*)?$")
_ENV_ASSIGN = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*=(?:'[^']*'|\"[^\"]*\"|\S*)\s+)+")
_PYTEST_HEAD = re.compile(r"^(?:pytest|py\.test|python3?\s+-m\s+pytest)(?:\s|$)")
#: pytest options that only shape the report; anything else in a harness command is reported as not applied.
_REPORT_OPTIONS = re.compile(r"^(?:-rA|-r\w+|-v+|--verbose|-q|--no-header|--tb=\w+|--color=\w+|-p|no:cacheprovider|"
                             r"--disable-warnings|-o|console_output_style=classic|-W|ignore::\w+)$")


@lru_cache(maxsize=1)
def known_parsers() -> frozenset[str]:
    """Parser names the grader can resolve: the installed swebench's PARSER_REGISTRY (what
    verifier/harness.py uses), else the 5.0.2 names above."""
    try:
        from swebench.harness.log_parsers import PARSER_REGISTRY  # type: ignore[import-not-found]
    except Exception:
        return KNOWN_PARSERS
    return frozenset(PARSER_REGISTRY)


class HarnessCommandError(ValueError):
    """The instance's harness command could not be derived; ``field`` names the row field at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def is_node_id(test_id: str) -> bool:
    """A pytest node id: ``path/to/test_x.py`` optionally followed by ``::name...``."""
    return bool(_NODE_ID.match(test_id))


def pytest_command(cmd: str) -> bool:
    """Whether ``cmd`` (after leading ``VAR=value`` assignments) runs pytest."""
    return bool(_PYTEST_HEAD.match(_ENV_ASSIGN.sub("", cmd.strip())))


def extra_pytest_options(cmd: str) -> list[str]:
    """Options of a pytest command beyond the reporting ones (the project's grader does not apply them)."""
    words = _PYTEST_HEAD.sub("", _ENV_ASSIGN.sub("", cmd.strip())).split()
    return [w for w in words if w.startswith("-") and not _REPORT_OPTIONS.match(w)]


def harness_directives(repo: str, test_patch: str) -> list[str]:
    """The files the harness passes to the test command: test_patch's files minus NON_TEST_EXTS;
    for django/django, dotted modules without ``tests/`` and ``.py``."""
    files = re.findall(r"^diff --git a/.* b/(.*)$", test_patch, flags=re.MULTILINE)
    files = [f for f in files if not f.endswith(NON_TEST_EXTS)]
    if repo == "django/django":
        files = [f.removesuffix(".py").removeprefix("tests/").replace("/", ".") for f in files]
    return files


def eval_script_env(eval_script: str) -> str | None:
    """The environment prefix an eval script activates before its markers, if it names one:
    ``source <prefix>/bin/activate`` -> prefix; ``conda activate <name>`` -> the conda env of
    SWE-bench-harness images (/opt/miniconda3/envs/<name>)."""
    head = eval_script.split(START_MARKER, 1)[0]
    found = None
    for line in head.split("\n"):
        venv = re.match(r"^\s*(?:source|\.)\s+(/\S+)/bin/activate\s*$", line)
        conda = re.match(r"^\s*conda activate\s+([A-Za-z0-9_.-]+)\s*$", line)
        if venv:
            found = venv.group(1)
        elif conda:
            found = f"/opt/miniconda3/envs/{conda.group(1)}"
    return found


def eval_script_command(eval_script: str) -> tuple[list[str], str]:
    """(export lines, test command) of a 5.x ``eval_script``: the command is the lines between the
    start and end markers; the exports are the script's ``export`` lines (outside heredocs) before them."""
    exports: list[str] = []
    body: list[str] | None = None
    heredoc: str | None = None
    for line in eval_script.split("\n"):
        if heredoc is not None:
            if line == heredoc:
                heredoc = None
            continue
        if body is not None:
            if END_MARKER in line:
                cmd = [c for c in body if c.strip() and not c.startswith("SWEBENCH_TEST_EXIT_CODE=")]
                if not cmd:
                    raise HarnessCommandError("eval_script", "no command between the test output markers")
                return exports, "; ".join(cmd)
            body.append(line)
            continue
        if START_MARKER in line:
            body = []
            continue
        found = re.search(r"<<-?\s*'?\"?([A-Za-z0-9_]+)'?\"?\s*$", line)
        if found:
            heredoc = found.group(1)
        elif re.match(r"^export [A-Za-z_][A-Za-z0-9_]*=", line):
            exports.append(line.strip())
    raise HarnessCommandError("eval_script", f"no {START_MARKER!r} ... {END_MARKER!r} markers around a test command")


def _package_spec(repo: str, version: str) -> tuple[str, str, list[str]] | None:
    """(test_cmd, parser name, export lines) from an installed swebench 4.x, or None."""
    try:
        from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS  # type: ignore[import-not-found]
        from swebench.harness.log_parsers import MAP_REPO_TO_PARSER  # type: ignore[import-not-found]
    except Exception:  # absent, or 5.x (no spec table)
        return None
    spec: dict[str, Any] | None = MAP_REPO_VERSION_TO_SPECS.get(repo, {}).get(version)
    parser = MAP_REPO_TO_PARSER.get(repo)
    if not spec or "test_cmd" not in spec or parser is None:
        return None
    cmd = spec["test_cmd"]
    cmd = cmd[-1] if isinstance(cmd, list) else cmd
    exports = [c for c in spec.get("eval_commands", []) if c.startswith("export ")]
    return str(cmd), getattr(parser, "__name__", str(parser)), exports


def _builtin_spec(repo: str, version: str) -> tuple[str, str, list[str]] | None:
    if repo == "django/django":
        cmd = TEST_DJANGO_NO_PARALLEL if version == "1.9" else TEST_DJANGO
        exports = _DJANGO_EXPORTS_1X if version in _DJANGO_1X else _DJANGO_EXPORTS_3X if version in _DJANGO_3X else ""
        return cmd, "parse_log_django", [e.strip() for e in exports.split(";") if e.strip()]
    if repo == "sympy/sympy":
        return TEST_SYMPY, "parse_log_sympy", []
    if repo == "sphinx-doc/sphinx":
        return TEST_SPHINX, "parse_log_sphinx", []
    return None


def legacy_command(repo: str, version: str, test_patch: str) -> tuple[str, str] | None:
    """(test_cmd with directives, parser) a 4.x harness runs for a non-pytest repo; None when
    the harness runs pytest directly (the project's grader then runs the node ids)."""
    spec = _package_spec(repo, version) or _builtin_spec(repo, version)
    if spec is None:
        if repo in PYTEST_REPOS:
            return None
        raise HarnessCommandError("test_cmd", f"no test command known for {repo} {version}")
    cmd, parser, exports = spec
    if parser in PYTEST_PARSERS and pytest_command(cmd):
        return None
    directives = harness_directives(repo, test_patch)
    if not directives:
        raise HarnessCommandError("test_patch", "it names no test files to pass to the test command")
    return "; ".join([*exports, " ".join([cmd, *directives])]), parser
