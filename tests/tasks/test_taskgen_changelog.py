"""Per-release changelog sections, on excerpts of real changelogs (their own formats)."""

from __future__ import annotations

from pathlib import Path

from task_factory.changelog import changelog_files, extract_section, find_section, version_pattern

CACHETOOLS_RST = """\
v7.2.1 (2026-10-05)
===================

- Improve error handling for ``RRCache.popitem()`` when the cache is
  empty.

- Update CI environment.


v7.2.0 (2026-09-16)
===================

- Deprecate use of ``cache=None`` to suppress caching with the
  ``@cached`` decorator.
"""

SEMVER_TOWNCRIER = """\
##########
Change Log
##########

.. towncrier release notes start

Version 3.0.4
=============

:Released: 2025-01-24
:Maintainer: Tom Schraitle


Bug Fixes
---------

* :gh:`459`: Fix 3.0.3:

  * :pr:`456`: Fix source dist file


----


Version 3.0.3
=============

Bug Fixes
---------

* Something older.
"""

BOLTONS_MD = """\
# boltons Changelog

Since February 20, 2013 there have been 45 releases.

## 26.1.0

_(July 17, 2026)_

- Fixed [`strutils.singularize`][strutils.singularize] mangling words ending in 'ss'

## 26.0.0

- Older things
"""

PYPARSING_CHANGES = """\
==========
Change Log
==========

Version 3.2.5 - September, 2025
-------------------------------
- JINX! Well, 3.2.4 had a bug for `Word` expressions that include a space
  character.


Version 3.2.4 - September, 2025
-------------------------------
- Fixed bug when using a copy of a `Word` expression.
"""

WCWIDTH_HISTORY = """\
=======
History
=======

0.9.2 *2026-10-04*
  * **Bugfix** `wrap()`_ should omit an empty line as output, `PR #291`_.
  * **Bugfix** `clip()`_ when using non-default argument, ``tabsize=0``, `PR #288`_.

0.9.1 *2026-09-23*
  * **Bugfix** `width()`_ mis-measured CSI sequences over 64 bytes.
"""


def test_rst_headings_with_a_v_prefix_and_a_date() -> None:
    heading, body = extract_section(CACHETOOLS_RST, "7.2.1")
    assert heading == "v7.2.1 (2026-10-05)"
    assert body.startswith("- Improve error handling for ``RRCache.popitem()``") and "Update CI" in body
    assert "Deprecate" not in body
    assert extract_section(CACHETOOLS_RST, "7.2.0")[1].endswith("``@cached`` decorator.")


def test_towncrier_sections_keep_their_subsections_and_stop_at_the_next_release() -> None:
    heading, body = extract_section(SEMVER_TOWNCRIER, "3.0.4")
    assert heading == "Version 3.0.4"
    assert "Bug Fixes" in body and ":pr:`456`: Fix source dist file" in body
    assert "Something older" not in body and not body.rstrip().endswith("----")


def test_markdown_headings() -> None:
    heading, body = extract_section(BOLTONS_MD, "26.1.0")
    assert heading == "26.1.0" and "singularize" in body and "Older things" not in body


def test_version_dash_month_headings() -> None:
    heading, body = extract_section(PYPARSING_CHANGES, "3.2.5")
    assert heading.startswith("Version 3.2.5") and body.startswith("- JINX!") and "copy of a" not in body


def test_definition_list_releases() -> None:
    heading, body = extract_section(WCWIDTH_HISTORY, "0.9.2")
    assert heading == "0.9.2 *2026-10-04*"
    assert body.splitlines()[0].startswith("* **Bugfix** `wrap()`_") and "CSI" not in body


def test_a_version_is_a_whole_token() -> None:
    pattern = version_pattern("3.2")
    assert pattern.search("Version 3.2 - May") and pattern.search("v3.2 (x)") and pattern.search("``3.2``")
    assert not pattern.search("Version 3.2.5") and not pattern.search("13.2") and not pattern.search("3.21")
    assert extract_section(PYPARSING_CHANGES, "3.2") is None
    assert extract_section(CACHETOOLS_RST, "7.2.2") is None


def test_find_section_searches_top_level_then_docs(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "history.rst").write_text(WCWIDTH_HISTORY)
    (tmp_path / "README.rst").write_text("0.9.2 *x*\n  * not a changelog\n")
    (tmp_path / "CHANGES.rst").write_text(CACHETOOLS_RST)
    assert [p.name for p in changelog_files(tmp_path)] == ["CHANGES.rst", "history.rst"]
    found = find_section(tmp_path, "0.9.2")
    assert found is not None and found.file == "docs/history.rst" and "wrap()" in found.text
    assert find_section(tmp_path, "7.2.1").file == "CHANGES.rst"
    assert find_section(tmp_path, "1.0.0") is None


def test_an_empty_section_is_no_section() -> None:
    text = "1.0.1\n-----\n\n1.0.0\n-----\n\n- first release\n"
    assert extract_section(text, "1.0.1") is None
    assert extract_section(text, "1.0.0") == ("1.0.0", "- first release")
