"""Pair normalization: length, word-count and special-character filters, then deduplication.

The design documents run these four ops through data-juicer; they are a few lines each,
so they live here in plain Python (no heavy dependency, no file round trip, exact control
over what text is measured: the rendered action, not its JSON punctuation).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

from trainer_client.pair_records import PairRecord, ToolCall

from .canonical import CanonicalizerConfig, canonical_key


class NormalizeConfig(BaseModel):
    """Bounds applied to both chosen and rejected (as rendered by `action_text`)."""

    model_config = ConfigDict(extra="forbid")

    min_chars: int = Field(default=4, ge=0)
    max_chars: int = Field(default=32000, ge=1)
    min_words: int = Field(default=1, ge=0)
    max_words: int = Field(default=4096, ge=1)
    max_special_ratio: float = Field(default=0.5, ge=0.0, le=1.0)
    """Share of non-space characters that are neither letters nor digits."""
    dedup: bool = True
    """Drop pairs whose context, chosen and rejected all repeat an earlier pair
    (e.g. the shared first steps of a GRPO group's rollouts)."""


def action_text(action: ToolCall) -> str:
    """The action as the text the filters measure: tool name, then each argument value."""
    parts = [action.tool_name]
    for key in sorted(action.arguments):
        value = action.arguments[key]
        parts.append(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
    return "\n".join(parts)


def special_ratio(text: str) -> float:
    chars = [c for c in text if not c.isspace()]
    if not chars:
        return 0.0
    return sum(1 for c in chars if not c.isalnum()) / len(chars)


def _reject_reason(text: str, cfg: NormalizeConfig) -> str | None:
    if not cfg.min_chars <= len(text) <= cfg.max_chars:
        return "length"
    if not cfg.min_words <= len(text.split()) <= cfg.max_words:
        return "words"
    if special_ratio(text) > cfg.max_special_ratio:
        return "special_chars"
    return None


def pair_fingerprint(pair: PairRecord, canon: CanonicalizerConfig | None = None) -> str:
    ctx = json.dumps([pair.messages, pair.tools], sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    key = "\0".join((ctx, canonical_key(pair.chosen, canon), canonical_key(pair.rejected, canon)))
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def normalize_pairs(
    pairs: Iterable[PairRecord], cfg: NormalizeConfig | None = None,
    canon: CanonicalizerConfig | None = None,
) -> tuple[list[PairRecord], Counter[str]]:
    """Kept pairs (input order) and a count of dropped pairs by reason."""
    cfg = cfg or NormalizeConfig()
    kept: list[PairRecord] = []
    dropped: Counter[str] = Counter()
    seen: set[str] = set()
    for pair in pairs:
        reason = _reject_reason(action_text(pair.chosen), cfg) or _reject_reason(action_text(pair.rejected), cfg)
        if reason is None and cfg.dedup:
            fp = pair_fingerprint(pair, canon)
            reason = "duplicate" if fp in seen else None
            seen.add(fp)
        if reason:
            dropped[reason] += 1
        else:
            kept.append(pair)
    return kept, dropped
