"""GRPO batches built from real chat-template renderings of short tool-using rollouts."""

from __future__ import annotations

import torch

_TURN1 = '<tool_call>\n{{"name": "bash", "arguments": {{"command": "{cmd}"}}}}\n</tool_call><|im_end|>\n'
_TOOL = "<|im_start|>user\n<tool_response>\n{out}\n</tool_response><|im_end|>\n"
_HEADER = "<|im_start|>assistant\n"
_TURN2 = '<tool_call>\n{{"name": "view", "arguments": {{"path": "{path}"}}}}\n</tool_call><|im_end|>\n'

_VARIANTS = [
    ("rg foo", "bash: rg: command not found", "src/foo.py", "command_not_found", "shell.command_not_found"),
    ("pytest", "1 failed, 3 passed", "tests/test_foo.py", "test_failure", "tests.failed"),
    ("cat nofile", "cat: nofile: No such file or directory", "src/", "nonzero_exit", "shell.nonzero_exit"),
    ("sleep 999", "timed out after 30 s", "README.md", "timeout", "shell.timeout"),
]


def make_grpo_batch(tokenizer, n: int = 4, with_sites: bool = True, seed: int = 0) -> dict:
    """prompt/completion ids and masks (left/right padded as TRL does), tool_mask, advantages,
    num_items_in_batch, and error_sites whose token_start is the first generated token of the
    turn after the failing tool output (the rollout engineer's convention)."""
    enc = lambda s: tokenizer(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    pad = tokenizer.pad_token_id
    prompts, comps, tmasks, sites = [], [], [], []
    for i in range(n):
        cmd, out, path, kind, key = _VARIANTS[i % len(_VARIANTS)]
        msgs = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": f"Fix issue {i}: " + "x " * i}]
        p = enc(tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True))
        a, t, h, b = enc(_TURN1.format(cmd=cmd)), enc(_TOOL.format(out=out)), enc(_HEADER), enc(_TURN2.format(path=path))
        prompts.append(p)
        comps.append(a + t + h + b)
        tmasks.append([1] * len(a) + [0] * (len(t) + len(h)) + [1] * len(b))
        sites.append([{"turn": 1, "error_kind": kind, "hint_template_key": key, "token_start": len(a) + len(t) + len(h)}] if with_sites else [])
    P, C = max(map(len, prompts)), max(map(len, comps))
    prompt_ids = torch.tensor([[pad] * (P - len(p)) + p for p in prompts])
    prompt_mask = torch.tensor([[0] * (P - len(p)) + [1] * len(p) for p in prompts])
    completion_ids = torch.tensor([c + [pad] * (C - len(c)) for c in comps])
    completion_mask = torch.tensor([[1] * len(c) + [0] * (C - len(c)) for c in comps])
    tool_mask = torch.tensor([m + [1] * (C - len(m)) for m in tmasks])
    g = torch.Generator().manual_seed(seed)
    advantages = torch.randn(n, generator=g)
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "tool_mask": tool_mask,
        "advantages": advantages,
        "num_items_in_batch": (completion_mask * tool_mask).sum(),
        "error_sites": sites,
    }
