"""The command lines of a Markdown file's fenced shell blocks, as a shell reads them: the one reader of
the docs' commands (tests/docs' `test_install_lines` and `test_doc_commands`, and through the latter
tests/containers' `test_compose_docs`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

FENCE = re.compile(r"^\s*```")
SHELL_LANGS = ("", "bash", "sh", "shell", "console")


def shell_lines(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line number, the block's language, the command line) of every line of a fenced shell block,
    continuation lines joined and stripped. In a block with `$ ` prompts only the prompted lines are
    commands (the rest is output), their prompt removed."""
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        if not FENCE.match(lines[i]):
            i += 1
            continue
        lang = lines[i].strip().removeprefix("```").strip()
        end = next((j for j in range(i + 1, len(lines)) if FENCE.match(lines[j])), len(lines))
        body = list(enumerate(lines[i + 1:end], start=i + 2))
        i = end + 1
        if lang not in SHELL_LANGS:
            continue
        prompted = any(text.lstrip().startswith("$ ") for _, text in body)
        k = 0
        while k < len(body):
            start, text = body[k]
            while text.rstrip().endswith("\\") and k + 1 < len(body):
                k += 1
                text = text.rstrip()[:-1] + " " + body[k][1].strip()
            k += 1
            text = text.strip()
            if prompted:
                if not text.startswith("$ "):
                    continue
                text = text[2:]
            yield start, lang, text
