"""The agreement rule: when teacher answers for one state become a (chosen, rejected) pair."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from trainer_client.pair_records import ToolCall

from .canonical import CanonicalizerConfig, canonical_key


class AgreementRule(BaseModel):
    """Default (design docs): at least 2 teachers agree on X and the student chose Y != X.

    No consensus (nothing reaches `min_agree`, or a tie at the top) gives no pair, and
    neither does a consensus on the student's own action.
    """

    model_config = ConfigDict(extra="forbid")

    min_agree: int = Field(default=2, ge=1)
    """Teachers that must give the same canonical action X."""
    min_fraction: float = Field(default=0.0, ge=0.0, le=1.0)
    """Also require votes(X) / teachers that answered >= this (0.0: off)."""
    max_student_votes: int | None = None
    """If set, no pair when more than this many teachers sided with the student."""


@dataclass(frozen=True)
class Verdict:
    """The outcome for one state: `chosen` is None when there is no pair."""

    chosen: ToolCall | None
    agreeing: tuple[str, ...]
    reason: str
    """pair, no_student_action, no_answers, no_consensus, tie, agrees_with_student, student_supported;
    fork verification (verify.py): not_better, fork_failed."""
    evidence: dict | None = None
    """Fork verification: {"rewards": {actor: reward}, "forks": {actor: fork episode id}}."""


def decide(
    student: ToolCall | None,
    answers: dict[str, ToolCall],
    rule: AgreementRule,
    canon: CanonicalizerConfig | None = None,
) -> Verdict:
    """Apply `rule` to teacher `answers` (name -> action, in config order; failed calls absent)."""
    if student is None:
        return Verdict(None, (), "no_student_action")
    if not answers:
        return Verdict(None, (), "no_answers")
    keys = {name: canonical_key(a, canon) for name, a in answers.items()}
    ranked = Counter(keys.values()).most_common()
    top_key, top_votes = ranked[0]
    if top_votes < rule.min_agree or top_votes / len(answers) < rule.min_fraction:
        return Verdict(None, (), "no_consensus")
    if len(ranked) > 1 and ranked[1][1] == top_votes:
        return Verdict(None, (), "tie")
    agreeing = tuple(n for n, k in keys.items() if k == top_key)
    student_key = canonical_key(student, canon)
    if student_key == top_key:
        return Verdict(None, agreeing, "agrees_with_student")
    student_votes = sum(1 for k in keys.values() if k == student_key)
    if rule.max_student_votes is not None and student_votes > rule.max_student_votes:
        return Verdict(None, agreeing, "student_supported")
    return Verdict(answers[agreeing[0]], agreeing, "pair")
