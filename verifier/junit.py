"""Read pytest's JUnit XML and map its test cases back to pytest node ids.

Grading trusts only this file (written outside the workspace), never stdout,
which the code under test can forge.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Literal

Outcome = Literal["passed", "failed", "error", "skipped", "xfailed", "missing"]
PASSING: frozenset[str] = frozenset({"passed", "xfailed"})  # SWE-bench counts XFAIL as passing


class JUnitError(ValueError):
    """The report is missing or not JUnit XML."""


def case_key(nodeid: str) -> str:
    """``a/b/test_x.py::TestC::test_d[p]`` -> ``a.b.test_x.TestC::test_d[p]`` (JUnit's naming)."""
    path, _, rest = nodeid.partition("::")
    module = path[:-3] if path.endswith(".py") else path
    module = module.strip("/").replace("/", ".")
    if not rest:
        return module
    *classes, name = rest.split("::")
    return ".".join([module, *classes]) + "::" + name


def parse_junit(xml_text: str | bytes) -> dict[str, Outcome]:
    """``{case_key: outcome}`` for every test case in the report."""
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError as exc:
        raise JUnitError(f"not valid JUnit XML: {exc}") from None
    if root.tag not in ("testsuites", "testsuite"):
        raise JUnitError(f"not a JUnit report (root element {root.tag!r})")
    out: dict[str, Outcome] = {}
    for case in root.iter("testcase"):
        key = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome: Outcome = "passed"
        for child in case:
            if child.tag in ("failure",):
                outcome = "failed"
            elif child.tag == "error":
                outcome = "error"
            elif child.tag == "skipped":
                outcome = "xfailed" if child.get("type") == "pytest.xfail" else "skipped"
        # a test that failed and then errored in teardown appears twice: keep the worst
        if out.get(key) not in (None, "passed"):
            continue
        out[key] = outcome
    return out


def outcomes_for(nodeids: list[str], report: dict[str, Outcome]) -> dict[str, Outcome]:
    """Outcome of each requested node id; a file-level id passes when all its cases pass."""
    result: dict[str, Outcome] = {}
    for nodeid in nodeids:
        key = case_key(nodeid)
        if "::" in key:
            result[nodeid] = report.get(key, "missing")
            continue
        cases = [o for k, o in report.items() if k.split("::")[0] == key or k.startswith(key + ".")]
        if not cases:
            result[nodeid] = "missing"
        else:
            result[nodeid] = "passed" if all(o in PASSING for o in cases) else "failed"
    return result
