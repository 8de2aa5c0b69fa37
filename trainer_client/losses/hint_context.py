"""Channel hints' inputs: the hint-conditioned teacher sequences and the positions that count.

For a rollout with error sites the teacher sees the student's own tokens with a hint,
rendered by the chat template as a user message, spliced in at each site's `token_start`:

    teacher = prompt + c[:s1] + hint1 + c[s1:s2] + hint2 + c[s2:]

One teacher sequence covers all sites of a rollout (causal attention: hint k only affects
tokens after site k). Counted tokens are the student's own (completion_mask * tool_mask)
from the first site on; for each we record the hidden-state position that predicts it in
the student's and in the teacher's sequence, and in the trainer's own (prompt | completion)
layout, so that the student side can be read from the GRPO forward's hidden states instead of
a forward of its own. Sequences stop at the last counted token: later positions are never
read (causal attention), so the teacher forward does not run over them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from .hints import ErrorSite, HintSource

__all__ = ["HintRenderer", "HintBatch", "build_hint_batch", "parse_error_sites"]

_BASE = [
    {"role": "system", "content": "s"},
    {"role": "user", "content": "u"},
    {"role": "assistant", "content": "a"},
    {"role": "tool", "content": "t"},
]


class HintRenderer:
    """Token ids of a hint rendered as a user turn after a tool output, via the chat template."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self._cache: dict[str, list[int]] = {}
        base = tokenizer.apply_chat_template(_BASE, tokenize=False)
        with_prompt = tokenizer.apply_chat_template(_BASE, tokenize=False, add_generation_prompt=True)
        if not with_prompt.startswith(base):
            raise ValueError("chat template is not prefix-preserving for the generation prompt")
        self.generation_prompt_ids: list[int] = self._encode(with_prompt[len(base) :])
        self._base = base

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def hint_ids(self, text: str) -> list[int]:
        """`<|im_start|>user\\n{text}<|im_end|>\\n` for Qwen-style templates (cached)."""
        if text not in self._cache:
            full = self.tokenizer.apply_chat_template(_BASE + [{"role": "user", "content": text}], tokenize=False)
            if not full.startswith(self._base):
                raise ValueError("chat template is not prefix-preserving for an appended user turn")
            self._cache[text] = self._encode(full[len(self._base) :])
        return self._cache[text]


@dataclass
class HintBatch:
    """Right-padded student/teacher sequences of the rollouts that have counted tokens."""

    student_input_ids: torch.Tensor  # (R, Ls)
    student_attention_mask: torch.Tensor
    teacher_input_ids: torch.Tensor  # (R, Lt)
    teacher_attention_mask: torch.Tensor
    student_positions: torch.Tensor  # (N,) flat indices into (R * Ls) hidden states
    teacher_positions: torch.Tensor  # (N,) flat indices into (R * Lt) hidden states
    rows: list[int]  # rollout index of each sequence
    n_sites: int
    context_positions: torch.Tensor | None = None
    """(N,) flat indices into the (B * (P + C)) hidden states of the trainer's forward over
    cat(prompt_ids, completion_ids) (left-padded prompts, right-padded completions)."""

    @property
    def n_tokens(self) -> int:
        return int(self.student_positions.numel())


def parse_error_sites(raw: Any, batch_size: int) -> list[list[ErrorSite]]:
    """Normalize `inputs["error_sites"]` (per-rollout lists of dicts or ErrorSite) to ErrorSite lists."""
    if raw is None:
        return [[] for _ in range(batch_size)]
    if len(raw) != batch_size:
        raise ValueError(f"error_sites has {len(raw)} entries for a batch of {batch_size}")
    return [[s if isinstance(s, ErrorSite) else ErrorSite.from_dict(s) for s in (row or [])] for row in raw]


def _pad(seqs: Sequence[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, : len(s)] = 1
    return ids, mask


def build_hint_batch(
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    error_sites: Sequence[Sequence[ErrorSite]],
    hint_source: HintSource,
    renderer: HintRenderer,
    tool_mask: torch.Tensor | None = None,
    pad_token_id: int = 0,
) -> HintBatch | None:
    """Teacher/student sequences and counted positions; None when no token counts."""
    loss_mask = completion_mask if tool_mask is None else completion_mask * tool_mask
    gen = renderer.generation_prompt_ids
    students, teachers, s_pos, t_pos, c_pos, rows = [], [], [], [], [], []
    n_sites = 0
    width_p, width = prompt_ids.size(1), prompt_ids.size(1) + completion_ids.size(1)
    for b, sites in enumerate(error_sites):
        if not sites:
            continue
        prompt = prompt_ids[b][prompt_mask[b].bool()].tolist()
        valid = completion_mask[b].nonzero()
        length = int(valid.max()) + 1 if valid.numel() else 0
        comp = completion_ids[b, :length].tolist()
        counted = loss_mask[b, :length].bool().tolist()
        inserts: list[tuple[int, list[int]]] = []
        for site in sorted(sites, key=lambda s: s.token_start):
            start = site.token_start
            if not 0 < start <= length:
                continue
            # token_start may point past the assistant header; the hint goes before it
            if start >= len(gen) and comp[start - len(gen) : start] == gen:
                start -= len(gen)
            inserts.append((start, renderer.hint_ids(hint_source.hint(site))))
        if not inserts:
            continue
        teacher, offsets, prev = list(prompt), [0] * (length + 1), 0
        shift = 0
        for start, hint in inserts:
            teacher += comp[prev:start]
            for j in range(prev, start):
                offsets[j] = shift
            teacher += hint
            shift += len(hint)
            prev = start
        teacher += comp[prev:]
        for j in range(prev, length):
            offsets[j] = shift
        first = inserts[0][0]
        picked = [j for j in range(max(first, 1 - len(prompt)), length) if counted[j]]
        if not picked:
            continue
        r = len(rows)
        rows.append(b)
        n_sites += len(inserts)
        last = picked[-1]  # keep the last counted token itself (its id is the target), drop the rest
        students.append(prompt + comp[: last + 1])
        teachers.append(teacher[: len(prompt) + last + offsets[last] + 1])
        s_pos += [(r, len(prompt) + j - 1) for j in picked]
        t_pos += [(r, len(prompt) + j - 1 + offsets[j]) for j in picked]
        c_pos += [b * width + width_p + j - 1 for j in picked]
    if not rows:
        return None
    s_ids, s_mask = _pad(students, pad_token_id)
    t_ids, t_mask = _pad(teachers, pad_token_id)
    s_flat = torch.tensor([r * s_ids.size(1) + p for r, p in s_pos], dtype=torch.long)
    t_flat = torch.tensor([r * t_ids.size(1) + p for r, p in t_pos], dtype=torch.long)
    c_flat = torch.tensor(c_pos, dtype=torch.long)
    return HintBatch(s_ids, s_mask, t_ids, t_mask, s_flat, t_flat, rows, n_sites, c_flat)
