"""The ``--set key=value`` grammar every command of the project shares (server, trainer, teachers).

A dotted key names a field of a nested config (``episode.max_steps=50``); the value is read
as YAML (``true``, ``3``, ``[a, b]``), except that ``1e-5`` (a string to YAML 1.1) is a float.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def parse_value(text: str) -> Any:
    """A YAML scalar or collection, with ``1e-5`` read as a float."""
    value = yaml.safe_load(text)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    return value


def set_dotted(raw: dict[str, Any], key: str, value: Any, *, item: str | None = None) -> None:
    """``raw[a][b] = value`` for ``key`` ``a.b``; ValueError when a parent is not a section."""
    node = raw
    *parents, leaf = key.strip().split(".")
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ValueError(f"override {item or key!r}: {part} is not a section")
    node[leaf] = value


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Set each ``a.b=v`` of ``overrides`` in the nested dict ``raw`` (changed in place and returned)."""
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"override {item!r} is not key=value")
        set_dotted(raw, key, parse_value(value), item=item)
    return raw


def read_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """A YAML config file as a dict (an empty file is ``{}``); ValueError naming the file otherwise."""
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read config {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"config {path} is not valid YAML: {exc}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError(f"config {path} must be a mapping of settings, not a {type(raw).__name__}")
    return raw


def setting_keys(model: Any, prefix: str = "") -> list[str]:
    """Every dotted key of a pydantic config model: its fields and, through nested models, theirs. A
    nested model with ``setting_variants()`` (a field that holds one of several models, such as the
    sandbox's backend) contributes the keys of each variant."""
    out: list[str] = []
    for name, info in getattr(model, "model_fields", {}).items():
        key = prefix + name
        out.append(key)
        annotation = info.annotation
        if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
            variants = getattr(annotation, "setting_variants", None)
            for variant in variants() if callable(variants) else (annotation,):
                out += [k for k in setting_keys(variant, key + ".") if k not in out]
    return out


def nearest_key(key: str, valid: list[str]) -> str | None:
    """The valid key a mistyped ``key`` most likely meant: one ending in the same name (``max_steps``
    for ``episode.max_steps``), else the closest spelling; None when nothing is close."""
    import difflib

    leaf = key.rsplit(".", 1)[-1]
    same_leaf = [k for k in valid if k.rsplit(".", 1)[-1] == leaf and k != key]
    if same_leaf:
        return min(same_leaf, key=len)
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if close:
        return close[0]
    leaves = {k.rsplit(".", 1)[-1]: k for k in valid}
    close = difflib.get_close_matches(leaf, list(leaves), n=1, cutoff=0.75)
    return leaves[close[0]] if close else None


def unknown_key_message(key: str, valid: list[str]) -> str:
    """``key: not a setting (did you mean X?)`` for a key the config does not have."""
    near = nearest_key(key, valid)
    return f"{key}: not a setting" + (f" (did you mean {near}?)" if near else "")
