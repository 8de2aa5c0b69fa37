"""The maintainers' own words for one release: its section of the project's changelog.

Looks in the release's own source tree for CHANGES / CHANGELOG / HISTORY / NEWS /
RELEASE notes (top level, then ``docs/``), and cuts out the section whose heading
names the version. Three layouts are understood:

- reStructuredText headings (a title line with an underline, optionally an overline);
  the section runs to the next heading of the same or a higher level;
- Markdown ``#`` headings (and setext ``===``/``---`` underlines, which read as rst);
- definition-list style: an unindented line starting with the version, its entries
  indented below it (``0.2.13 *2024-01-06*`` then ``  * Bugfix ...``).
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

_NAMES = re.compile(r"^(changes|changelog|change_log|change-log|history|news|release[-_]?notes|releases|versions)"
                    r"(\.(rst|md|markdown|txt))?$", re.I)
_DIRS = ("", "docs", "doc")
_UNDERLINE = re.compile(r"^([=\-~^+*#`':\"._])\1{2,}\s*$")
_MD_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_MAX_CHARS = 6000


class ChangelogSection(BaseModel):
    """One release's section: the file it came from, its heading line, and its body."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    file: str = Field(description="repo-relative changelog path")
    heading: str = Field(description="the heading line as written (version, maybe a date)")
    text: str = Field(description="the section's body, dedented, surrounding blank lines removed")


def changelog_files(tree: Path) -> list[Path]:
    """Candidate changelog files of a source tree, top level first, in name order."""
    found: list[Path] = []
    for d in _DIRS:
        folder = tree / d if d else tree
        if folder.is_dir():
            found += sorted(p for p in folder.iterdir() if p.is_file() and _NAMES.match(p.name))
    return found


def version_pattern(version: str) -> re.Pattern[str]:
    """The version as a whole token: ``1.2`` matches ``v1.2`` and ``1.2 (date)``, never ``1.2.1`` or ``11.2``."""
    return re.compile(rf"(?:^|(?<=[^\w.])|(?<=\b[vV])){re.escape(version)}(?!\w|\.\d)")


def find_section(tree: Path, version: str) -> ChangelogSection | None:
    """The first non-empty section for ``version`` in the tree's changelog files, if any."""
    for path in changelog_files(tree):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        section = extract_section(text, version)
        if section is not None:
            heading, body = section
            return ChangelogSection(file=str(path.relative_to(tree)), heading=heading, text=body)
    return None


def extract_section(text: str, version: str) -> tuple[str, str] | None:
    """(heading, body) of ``version``'s section in a changelog's text, or None."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    pattern = version_pattern(version)
    headings = _headings(lines)
    for i, (start, end_of_heading, level, title) in enumerate(headings):
        if not pattern.search(title):
            continue
        stop = next((h[0] for h in headings[i + 1:] if h[2] <= level), len(lines))
        body = _tidy(lines[end_of_heading:stop])
        if body:
            return title.strip(), body
    return _definition_list(lines, pattern)


def _headings(lines: list[str]) -> list[tuple[int, int, int, str]]:
    """(first line, line after the heading, level, title) of every rst/Markdown heading.

    rst levels follow the order in which the adornment styles first appear, as rst
    itself assigns them; Markdown levels are the number of ``#``, after rst's.
    """
    styles: list[tuple[str, bool]] = []
    found: list[tuple[int, int, int, str]] = []
    in_fence = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            i += 1
            continue
        if in_fence:
            i += 1
            continue
        md = _MD_HEADING.match(line)
        if md and not line.startswith("#!"):
            found.append((i, i + 1, 100 + len(md.group(1)), md.group(2)))
            i += 1
            continue
        over = _UNDERLINE.match(line)
        if (over and i + 2 < len(lines) and lines[i + 1].strip() and not _UNDERLINE.match(lines[i + 1])
                and _UNDERLINE.match(lines[i + 2]) and lines[i + 2].strip()[0] == over.group(1)):
            style = (over.group(1), True)
            if style not in styles:
                styles.append(style)
            found.append((i, i + 3, styles.index(style), lines[i + 1]))
            i += 3
            continue
        under = _UNDERLINE.match(lines[i + 1]) if i + 1 < len(lines) else None
        if (under and line.strip() and not line.startswith((" ", "\t")) and not _UNDERLINE.match(line)
                and len(lines[i + 1].strip()) >= min(len(line.strip()), 3)):
            style = (under.group(1), False)
            if style not in styles:
                styles.append(style)
            found.append((i, i + 2, styles.index(style), line))
            i += 2
            continue
        i += 1
    return found


def _definition_list(lines: list[str], pattern: re.Pattern[str]) -> tuple[str, str] | None:
    """An unindented line starting with the version, and the indented block under it."""
    for i, line in enumerate(lines):
        if line[:1].isspace() or not line.strip():
            continue
        head = re.sub(r"^(?:version|release|v)\s*", "", line.strip(" `*"), flags=re.I)
        if not pattern.match(head.lstrip("`*v ")):
            continue
        j = i + 1
        while j < len(lines) and (not lines[j].strip() or lines[j][:1].isspace()):
            j += 1
        body = _tidy(lines[i + 1:j])
        if body:
            return line.strip(), body
    return None


def _tidy(lines: list[str]) -> str:
    """Dedented, without leading/trailing blank lines, rst transitions or metadata fields, cut if huge."""
    kept = [ln.rstrip() for ln in lines]
    while kept and (not kept[-1].strip() or re.fullmatch(r"\s*-{4,}\s*", kept[-1])):
        kept.pop()
    while kept and not kept[0].strip():
        kept.pop(0)
    text = textwrap.dedent("\n".join(kept)).strip("\n")
    if len(text) > _MAX_CHARS:
        text = text[:_MAX_CHARS].rsplit("\n", 1)[0] + "\n[...]"
    return text
