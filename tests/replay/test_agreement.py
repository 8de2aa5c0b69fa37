import pytest

from trainer_client.pair_records import ToolCall
from trainer_client.replay import AgreementRule, decide

from .replay_support import bash

X, Y, Z, W = bash("pytest -q"), bash("ls"), bash("cat setup.py"), bash("git status")
DEFAULT = AgreementRule()


@pytest.mark.parametrize("student, answers, reason, agreeing", [
    (Y, {"a": X, "b": X, "c": X}, "pair", ("a", "b", "c")),
    (Y, {"a": X, "b": Z, "c": X}, "pair", ("a", "c")),
    (Y, {"a": X, "b": X, "c": Y}, "pair", ("a", "b")),           # one teacher sides with the student
    (Y, {"a": X, "b": Z, "c": W}, "no_consensus", ()),           # all three disagree
    (Y, {"a": Y, "b": Y, "c": Y}, "agrees_with_student", ("a", "b", "c")),
    (Y, {"a": Y, "b": Y, "c": X}, "agrees_with_student", ("a", "b")),
    (Y, {"a": X}, "no_consensus", ()),                           # only one teacher answered
    (Y, {}, "no_answers", ()),
    (None, {"a": X, "b": X}, "no_student_action", ()),
    (Y, {"a": X, "b": X, "c": Z, "d": Z}, "tie", ()),
    (Y, {"a": bash("pytest   -q"), "b": bash(" pytest -q ")}, "pair", ("a", "b")),   # canonical agreement
    (bash("pytest  -q"), {"a": X, "b": X}, "agrees_with_student", ("a", "b")),
])
def test_default_rule_case_by_case(student, answers, reason, agreeing):
    v = decide(student, answers, DEFAULT)
    assert v.reason == reason
    assert v.agreeing == agreeing
    assert (v.chosen is not None) == (reason == "pair")
    if reason == "pair":
        assert v.chosen == answers[agreeing[0]]


def test_min_agree_three_needs_unanimity():
    rule = AgreementRule(min_agree=3)
    assert decide(Y, {"a": X, "b": X, "c": Z}, rule).reason == "no_consensus"
    assert decide(Y, {"a": X, "b": X, "c": X}, rule).reason == "pair"


def test_min_fraction_and_max_student_votes():
    assert decide(Y, {"a": X, "b": X, "c": Z, "d": W, "e": Y}, AgreementRule(min_fraction=0.5)).reason == "no_consensus"
    assert decide(Y, {"a": X, "b": X, "c": Y}, AgreementRule(max_student_votes=0)).reason == "student_supported"
    assert decide(Y, {"a": X, "b": X, "c": Z}, AgreementRule(max_student_votes=0)).reason == "pair"


def test_chosen_is_first_agreeing_teachers_original_action():
    a = ToolCall(tool_name="view", arguments={"path": "./src/a.py"})
    b = ToolCall(tool_name="view", arguments={"path": "/workspace/src/a.py"})
    v = decide(Y, {"a": a, "b": b}, DEFAULT)
    assert v.chosen == a and v.chosen.arguments["path"] == "./src/a.py"
