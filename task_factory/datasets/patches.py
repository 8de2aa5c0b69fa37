"""Unified-diff helpers: reverse a git diff (SWE-smith's bug patch -> its fix), write new files as one.

``reverse_patch(p)`` applies where ``p`` was applied and undoes it: the a/ and b/ sides swap
(``diff --git`` names, ``---``/``+++``, rename from/to, old/new mode, new/deleted file mode,
the ``index`` hashes), hunk ranges swap, and ``+``/``-`` lines swap, each change block keeping
removals before additions. Copies and binary patches cannot be reversed from the text alone.
"""

from __future__ import annotations

import re

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")
_DIFF_GIT = re.compile(r"^diff --git a/(.*) b/(.*)$")
_INDEX = re.compile(r"^index ([0-9a-fA-F]+)\.\.([0-9a-fA-F]+)(.*)$")


class PatchError(ValueError):
    """The patch cannot be reversed (binary, copy, or malformed)."""


def _range(start: str, length: str | None) -> str:
    return start if length is None else f"{start},{length}"


def _swap_side(path: str, to: str) -> str:
    """``a/x`` <-> ``b/x``; ``/dev/null`` stays."""
    if path.startswith(("a/", "b/")):
        return f"{to}/{path[2:]}"
    return path


def _reverse_hunk_body(body: list[list[str]]) -> list[str]:
    """Each item is [line, *markers]; swap +/- and keep removals before additions in each block."""
    out: list[str] = []
    minus: list[list[str]] = []  # the original additions, emitted as removals
    plus: list[list[str]] = []  # the original removals, emitted as additions

    def flush() -> None:
        for item in minus:
            out.extend(["-" + item[0][1:], *item[1:]])
        for item in plus:
            out.extend(["+" + item[0][1:], *item[1:]])
        minus.clear()
        plus.clear()

    for item in body:
        sign = item[0][:1]
        if sign == "+":
            minus.append(item)
        elif sign == "-":
            plus.append(item)
        else:
            flush()
            out.extend(item)
    flush()
    return out


def reverse_patch(patch: str) -> str:
    """The patch that undoes ``patch`` (a git-style unified diff)."""
    lines = patch.split("\n")
    trailing_newline = patch.endswith("\n")
    if trailing_newline:
        lines.pop()
    out: list[str] = []
    pending: dict[str, str] = {}  # "---", "old mode", "rename from" waiting for their partner
    i = 0
    while i < len(lines):
        line = lines[i]
        hunk = _HUNK.match(line)
        if hunk:
            a, alen, b, blen, rest = hunk.groups()
            out.append(f"@@ -{_range(b, blen)} +{_range(a, alen)} @@{rest}")
            old_left = 1 if alen is None else int(alen)
            new_left = 1 if blen is None else int(blen)
            body: list[list[str]] = []
            i += 1
            while i < len(lines) and (old_left > 0 or new_left > 0 or lines[i].startswith("\\")):
                text = lines[i]
                if text.startswith("\\"):
                    if not body:
                        raise PatchError(f"line {i + 1}: a '\\' marker with no line before it")
                    body[-1].append(text)
                elif text.startswith("+"):
                    new_left -= 1
                    body.append([text])
                elif text.startswith("-"):
                    old_left -= 1
                    body.append([text])
                elif text.startswith(" ") or text == "":
                    old_left -= 1
                    new_left -= 1
                    body.append([text])
                else:
                    raise PatchError(f"line {i + 1}: hunk {line!r} ended early (expected {old_left} old / "
                                     f"{new_left} new lines more)")
                i += 1
            if old_left < 0 or new_left < 0:
                raise PatchError(f"hunk {line!r}: more lines than its header counts")
            if old_left > 0 or new_left > 0:
                raise PatchError(f"hunk {line!r} ended early (expected {old_left} old / {new_left} new lines more)")
            out.extend(_reverse_hunk_body(body))
            continue
        if line.startswith("GIT binary patch") or (line.startswith("Binary files ") and line.endswith(" differ")):
            raise PatchError("a binary patch cannot be reversed from its text")
        if line.startswith(("copy from ", "copy to ")):
            raise PatchError("a copy cannot be reversed (undoing it deletes the copy, which needs its content)")
        diff_git = _DIFF_GIT.match(line)
        if diff_git:
            left, right = diff_git.groups()
            out.append(line if left == right else f"diff --git a/{right} b/{left}")
        elif line.startswith("--- "):
            pending["---"] = line[4:]
        elif line.startswith("+++ ") and "---" in pending:
            out.append(f"--- {_swap_side(line[4:], 'a')}")
            out.append(f"+++ {_swap_side(pending.pop('---'), 'b')}")
        elif line.startswith("new file mode "):
            out.append("deleted file mode " + line[len("new file mode "):])
        elif line.startswith("deleted file mode "):
            out.append("new file mode " + line[len("deleted file mode "):])
        elif line.startswith("old mode "):
            pending["old mode"] = line[len("old mode "):]
        elif line.startswith("new mode ") and "old mode" in pending:
            out.append("old mode " + line[len("new mode "):])
            out.append("new mode " + pending.pop("old mode"))
        elif line.startswith("rename from "):
            pending["rename from"] = line[len("rename from "):]
        elif line.startswith("rename to ") and "rename from" in pending:
            out.append("rename from " + line[len("rename to "):])
            out.append("rename to " + pending.pop("rename from"))
        elif _INDEX.match(line):
            old, new, mode = _INDEX.match(line).groups()  # type: ignore[union-attr]
            out.append(f"index {new}..{old}{mode}")
        else:
            out.append(line)
        i += 1
    if pending:
        raise PatchError(f"unpaired header line(s): {', '.join(sorted(pending))}")
    return "\n".join(out) + ("\n" if trailing_newline else "")


def new_files_patch(files: dict[str, str]) -> str:
    """A git diff creating each ``path -> content`` (text files, mode 100644)."""
    parts: list[str] = []
    for path, content in files.items():
        parts.append(f"diff --git a/{path} b/{path}\nnew file mode 100644\n")
        if not content:
            continue
        body = content.split("\n")
        complete = content.endswith("\n")
        if complete:
            body.pop()
        parts.append(f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{len(body)} @@\n")
        parts.append("".join(f"+{line}\n" for line in body))
        if not complete:
            parts.append("\\ No newline at end of file\n")
    return "".join(parts)
