from trainer_client.pair_records import PairProvenance, PairRecord, ToolCall
from trainer_client.replay import NormalizeConfig, normalize_pairs

from .replay_support import TOOLS, bash


def pair(chosen: ToolCall, rejected: ToolCall, user="fix it", t=0) -> PairRecord:
    return PairRecord(
        state_id=f"ep:{t}", messages=[{"role": "user", "content": user}], tools=TOOLS,
        chosen=chosen, rejected=rejected, n_teachers_agreeing=2,
        provenance=PairProvenance(episode_id="ep", t=t, teachers=["a", "b"], agreeing=["a", "b"]),
    )


def test_filters_drop_by_length_words_and_special_chars():
    good = pair(bash("pytest -q tests"), bash("ls"))
    long = pair(bash("x" * 40000), bash("ls"))
    junk = pair(bash("ls"), bash("%$#@!&*^%$#@!{}[]"))
    wordy = pair(bash(" ".join(["w"] * 5000)), bash("ls"))
    kept, dropped = normalize_pairs([good, long, junk, wordy])
    assert kept == [good]
    assert dropped == {"length": 1, "special_chars": 1, "words": 1}


def test_submit_without_arguments_passes_the_defaults():
    p = pair(ToolCall(tool_name="submit"), bash("ls -la"))
    assert normalize_pairs([p])[0] == [p]


def test_dedup_is_on_context_plus_canonical_actions():
    a = pair(bash("pytest -q"), bash("ls"), t=0)
    same = pair(bash("pytest   -q"), bash("ls "), t=3)        # same context, equivalent actions
    other_ctx = pair(bash("pytest -q"), bash("ls"), user="another issue")
    other_rej = pair(bash("pytest -q"), bash("ls src"))
    kept, dropped = normalize_pairs([a, same, other_ctx, other_rej])
    assert kept == [a, other_ctx, other_rej]
    assert dropped == {"duplicate": 1}
    assert normalize_pairs([a, same], NormalizeConfig(dedup=False))[0] == [a, same]
