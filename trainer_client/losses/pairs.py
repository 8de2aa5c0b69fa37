"""Replayed preference pairs: the JSONL records, their chat-template rendering, a sampler.

The one pair type is ``PairRecord`` (trainer_client/pair_records.py; written by the replay teachers):
  {"state_id", "messages": [chat], "tools": [OpenAI function schemas],
   "chosen": {"tool_name", "arguments"}, "rejected": {...}, "n_teachers_agreeing",
   "provenance": {...}}
The state is rendered with the tokenizer's chat template (tools included, generation
prompt added); chosen and rejected become assistant tool-call turns rendered the same way,
and the response is the token difference.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from trainer_client.pair_records import PairRecord, ToolCall

__all__ = ["EncodedPair", "PairSampler", "collate_pairs", "encode_pair", "load_pairs"]


def _arguments(args: Any) -> dict:
    if isinstance(args, str):  # OpenAI wire format carries arguments as a JSON string
        args = json.loads(args) if args.strip() else {}
    if not isinstance(args, dict):
        raise ValueError(f"tool-call arguments must be an object, got {type(args).__name__}")
    return args


def _normalize_message(m: Mapping[str, Any]) -> dict:
    m = dict(m)
    if m.get("tool_calls"):
        calls = []
        for c in m["tool_calls"]:
            fn = dict(c.get("function", c))
            fn["arguments"] = _arguments(fn.get("arguments", {}))
            calls.append({**c, "function": fn})
        m["tool_calls"] = calls
    if m.get("content") is None:
        m["content"] = ""
    return m


def load_pairs(path: str | Path) -> list[PairRecord]:
    """Every record of a pairs JSONL (blank lines skipped; a bad line names its number)."""
    records = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:  # the record the env side writes: a pair it would not write is refused here
                records.append(PairRecord.model_validate_json(line))
            except ValueError as e:
                raise ValueError(f"{path}:{n}: bad pair record: {e}") from e
    return records


@dataclass(frozen=True)
class EncodedPair:
    index: int  # position in the dataset (the reference-log-prob cache key)
    prompt_ids: list[int]
    chosen_ids: list[int]
    rejected_ids: list[int]


def _as_message(action: ToolCall) -> dict:
    """A tool call as the assistant turn that makes it."""
    call = {"type": "function", "function": {"name": action.tool_name, "arguments": action.arguments}}
    return {"role": "assistant", "content": "", "tool_calls": [call]}


def _response_ids(tokenizer: Any, pair: PairRecord, messages: list[dict], action: ToolCall, prompt_text: str) -> list[int]:
    full = tokenizer.apply_chat_template(messages + [_as_message(action)], tools=pair.tools or None, tokenize=False)
    if not full.startswith(prompt_text):
        raise ValueError(f"pair {pair.state_id}: chat template is not prefix-preserving")
    return list(tokenizer(full[len(prompt_text) :], add_special_tokens=False)["input_ids"])


def encode_pair(tokenizer: Any, pair: PairRecord, index: int, max_length: int = 4096) -> EncodedPair:
    """Render and tokenize a pair; prompts too long for `max_length` keep their newest tokens."""
    messages = [_normalize_message(m) for m in pair.messages]
    prompt_text = tokenizer.apply_chat_template(
        messages, tools=pair.tools or None, tokenize=False, add_generation_prompt=True
    )
    prompt = list(tokenizer(prompt_text, add_special_tokens=False)["input_ids"])
    chosen = _response_ids(tokenizer, pair, messages, pair.chosen, prompt_text)
    rejected = _response_ids(tokenizer, pair, messages, pair.rejected, prompt_text)
    room = max_length - max(len(chosen), len(rejected))
    if room < 1:
        raise ValueError(f"pair {pair.state_id}: responses alone exceed max_length={max_length}")
    return EncodedPair(index, prompt[-room:], chosen, rejected)


class PairSampler:
    """k pairs per step: a seeded shuffle, without replacement within an epoch."""

    def __init__(self, n: int, k: int, seed: int = 0):
        if n < 1 or k < 1:
            raise ValueError("PairSampler needs n >= 1 and k >= 1")
        self.n, self.k = n, k
        self._rng = random.Random(seed)
        self._order: list[int] = []

    def grow(self, n: int) -> None:
        """Admit pairs `self.n .. n-1` (a live replay loop delivered them): each joins the current
        epoch's remaining order at a random place, so new pairs are drawn within this epoch."""
        for idx in range(self.n, n):
            self._order.insert(self._rng.randrange(len(self._order) + 1), idx)
        self.n = max(self.n, n)

    def state_dict(self) -> dict:
        return {"n": self.n, "k": self.k, "order": list(self._order), "rng": self._rng.getstate()}

    def load_state_dict(self, state: dict) -> None:
        self.n, self.k, self._order = int(state["n"]), int(state["k"]), list(state["order"])
        self._rng.setstate(state["rng"])

    def next(self) -> list[int]:
        out: list[int] = []
        while len(out) < min(self.k, self.n):
            if not self._order:
                self._order = list(range(self.n))
                self._rng.shuffle(self._order)
            idx = self._order.pop()
            if idx not in out:
                out.append(idx)
        return out

    def __iter__(self) -> Iterator[list[int]]:
        while True:
            yield self.next()


def collate_pairs(pairs: Sequence[EncodedPair], pad_token_id: int = 0):
    """input_ids/attention_mask/response_mask (2P, L): chosen rows first, then rejected, right-padded."""
    import torch

    seqs = [(p.prompt_ids, p.chosen_ids) for p in pairs] + [(p.prompt_ids, p.rejected_ids) for p in pairs]
    width = max(len(a) + len(b) for a, b in seqs)
    ids = torch.full((len(seqs), width), pad_token_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    resp = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, (prompt, response) in enumerate(seqs):
        n = len(prompt) + len(response)
        ids[i, :n] = torch.tensor(prompt + response, dtype=torch.long)
        attn[i, :n] = 1
        resp[i, len(prompt) : n] = 1
    return ids, attn, resp
