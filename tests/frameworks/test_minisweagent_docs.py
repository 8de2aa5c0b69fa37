"""docs/frameworks/mini-swe-agent.md says what the tests drive, and its command lines parse; the
adapter stays optional (importing it imports no mini-swe-agent; making an environment without it
is one `MissingDependencyError` naming the install line). No server, no venv: seconds."""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import test_minisweagent

from env_client.adapters.minisweagent import MINI_SWE_AGENT, build_parser
from evaluation.cli import add_subcommands

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "frameworks" / "mini-swe-agent.md"
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _lines(program: str) -> list[list[str]]:
    """The words of each command of the page's fenced blocks that runs `program` (continuations joined)."""
    blocks = re.findall(r"^\s*```\w*\n(.*?)^\s*```", PAGE.read_text(encoding="utf-8"), flags=re.S | re.M)
    out = []
    for block in blocks:
        for command in block.replace("\\\n", " ").splitlines():
            words = shlex.split(command, comments=True)
            while words and "=" in words[0] and not words[0].startswith("-"):  # VAR=value prefixes
                words = words[1:]
            if words and " ".join(words).startswith(program):
                out.append(words)
    return out


def test_page_names_the_pinned_version():
    assert EXTRAS["minisweagent"] == [MINI_SWE_AGENT] == [test_minisweagent.MINI_SWE_AGENT]
    text = PAGE.read_text(encoding="utf-8")
    assert f"**{MINI_SWE_AGENT.split('==')[1]}**, the pin of this project's `minisweagent` extra" in text
    installs = _lines(".venv-mini/bin/pip install")
    assert installs and all(w[2:] == ["-e", ".[client,minisweagent]"] for w in installs), installs


def test_command_lines_parse():
    single = _lines(".venv-mini/bin/python -m env_client.adapters.minisweagent")
    assert len(single) == 1
    args = build_parser().parse_args(single[0][3:])
    assert args.instance_id == "six__demo-1" and args.config[0] == "swebench.yaml"
    parser = argparse.ArgumentParser()
    add_subcommands(parser.add_subparsers(dest="command"))
    evaluates = _lines("trainer-client evaluate")
    assert len(evaluates) == 1
    args = parser.parse_args(evaluates[0][1:])
    assert args.harness == "mini-swe-agent" and args.harness_python == ".venv-mini/bin/python"


def test_adapter_imports_no_framework_and_names_the_install_line():
    code = ("import sys, env_client.adapters.minisweagent as m\n"
            "assert not [k for k in sys.modules if k.split('.')[0] in ('minisweagent', 'litellm')]\n"
            "try:\n    m.SWEOpenEnvEnvironment(urls=['http://127.0.0.1:9'])\n"
            "except m.MissingDependencyError as exc:\n    print(exc)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert 'pip install -e ".[client,minisweagent]"' in proc.stdout and MINI_SWE_AGENT in proc.stdout, proc.stdout
