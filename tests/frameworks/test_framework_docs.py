"""docs/frameworks/*.md say what the tests drive and their lines work from a checkout.

- The versions the pages name are the pins of pyproject's `skyrl` / `verifiers` extras, which are
  the ones tests/frameworks installs (test_skyrl.py, test_verifiers.py).
- Every `pip install` line installs this project from the checkout (`-e ".[extras]"`, extras that
  pyproject defines), never `swe-openenv` from a package index (it is not on one); other packages
  it names are pinned as the tests pin them.
- Every `python -m env_client.adapters.skyrl_dataset ...` line parses with that command's parser.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import test_skyrl
import test_verifiers

from env_client.adapters.skyrl_dataset import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = {"skyrl": ROOT / "docs/frameworks/skyrl.md", "verifiers": ROOT / "docs/frameworks/verifiers.md"}
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _lines(page: Path, program: str) -> list[list[str]]:
    """The words (comment cut) of each line of a fenced block of `page` that runs `program`."""
    blocks = re.findall(r"^\s*```\w*\n(.*?)^\s*```", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return [shlex.split(line, comments=True) for block in blocks for line in block.splitlines()
            if line.strip().startswith(program)]


def test_pages_name_the_pinned_versions():
    assert EXTRAS["skyrl"] == [test_skyrl.SKYRL_GYM] and EXTRAS["verifiers"] == [test_verifiers.VERIFIERS]
    skyrl, verifiers = (PAGES[k].read_text(encoding="utf-8") for k in ("skyrl", "verifiers"))
    assert f"**{test_skyrl.SKYRL_GYM.split('==')[1]}**, the pin of this project's `skyrl` extra" in skyrl
    assert f"Tested with **verifiers {test_verifiers.VERIFIERS.split('==')[1]}**" in verifiers
    assert f"**uv {test_verifiers.UV.split('==')[1]}**" in verifiers


def test_install_lines_work_from_a_checkout():
    seen = 0
    for name, page in PAGES.items():
        for words in _lines(page, "pip install"):
            args = words[2:]
            assert not any(a.startswith(("swe-openenv", "swe_openenv")) for a in args), (page, words)
            if "-e" in args:
                target = args[args.index("-e") + 1]
                m = re.fullmatch(r"\.\[([\w,-]+)\]", target)
                assert m, (page, words)
                extras = m.group(1).split(",")
                assert set(extras) <= set(EXTRAS) and name in extras and "client" in extras, (page, words)
                seen += 1
            else:  # another package: pinned as tests/frameworks pins it
                assert args == [test_verifiers.UV], (page, words)
    assert seen == 2


def test_dataset_command_lines_parse():
    lines = _lines(PAGES["skyrl"], "python -m env_client.adapters.skyrl_dataset")
    assert len(lines) >= 2
    for words in lines:
        args = build_parser().parse_args(words[3:])
        assert args.tasks and args.out.endswith((".parquet", ".jsonl", ".json")), words
