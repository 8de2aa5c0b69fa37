"""Hint text for error sites: a `HintSource` interface and the YAML template source.

The env marks agent mistakes with `error_kind` and `hint_template_key` (the contract's keys,
e.g. `edit.no_match`; the failing tool's name comes with the turn);
channel 2 inserts a hint for each one into the teacher's context. Templates are data
(`hints.yaml`); an LLM-written source can implement `HintSource` and plug in unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Protocol, runtime_checkable

import yaml

from contract import ErrorKind

__all__ = ["ERROR_KINDS", "ErrorSite", "HintSource", "TemplateHintSource", "load_hint_source"]

ERROR_KINDS: tuple[str, ...] = tuple(kind.value for kind in ErrorKind)
"""The error kinds the env emits (the contract's closed set, contract/errors.py)."""


@dataclass(frozen=True)
class ErrorSite:
    """One failing tool call in a rollout.

    token_start: index in completion_ids where the next assistant turn begins after the
    failing tool output (the hint is inserted there in the teacher's context).
    """

    turn: int
    error_kind: str
    hint_template_key: str
    token_start: int
    tool_name: str = "tool"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ErrorSite":
        return cls(
            turn=int(d.get("turn", 0)),
            error_kind=str(d["error_kind"]),
            hint_template_key=str(d.get("hint_template_key") or d["error_kind"]),
            token_start=int(d["token_start"]),
            tool_name=str(d.get("tool_name") or "tool"),
        )

    @property
    def tool(self) -> str:
        return self.tool_name


@runtime_checkable
class HintSource(Protocol):
    """Anything that turns an error site into hint text (templates, an LLM, a lookup)."""

    def hint(self, site: ErrorSite) -> str: ...


class _SafeFormat(dict):
    def __missing__(self, key: str) -> str:  # unknown {fields} stay as written
        return "{" + key + "}"


class TemplateHintSource:
    """Hints from templates keyed by `hint_template_key`, falling back to the error kind, then `default`."""

    def __init__(self, templates: Mapping[str, str]):
        if "default" not in templates:
            raise ValueError("hint templates need a 'default' entry")
        self.templates = dict(templates)

    @classmethod
    def from_yaml(cls, path: str | Path | None = None) -> "TemplateHintSource":
        """Load templates from `path`, or the bundled hints.yaml when None."""
        if path is None:
            text = resources.files(__package__).joinpath("hints.yaml").read_text(encoding="utf-8")
        else:
            text = Path(path).read_text(encoding="utf-8")
        data = yaml.safe_load(text) or {}
        templates = data.get("templates", data)
        if not isinstance(templates, dict) or not all(isinstance(v, str) for v in templates.values()):
            raise ValueError(f"hint file {path or 'hints.yaml'}: expected a mapping of key -> template string")
        return cls(templates)

    def resolve_key(self, site: ErrorSite) -> str:
        """The template key actually used for `site` (first hit of the fallback chain)."""
        for key in (site.hint_template_key, site.error_kind):
            if key in self.templates:
                return key
        return "default"

    def hint(self, site: ErrorSite) -> str:
        template = self.templates[self.resolve_key(site)]
        return template.format_map(_SafeFormat(tool=site.tool, error_kind=site.error_kind))


def load_hint_source(path: str | Path | None = None) -> TemplateHintSource:
    """The template source from `path` (None: the bundled defaults)."""
    return TemplateHintSource.from_yaml(path)
