"""Hint templates and the hint-conditioned teacher sequences (real Qwen2 tokenizer)."""

from __future__ import annotations

import torch

from trainer_client.losses import ERROR_KINDS, ErrorSite, HintRenderer, TemplateHintSource, build_hint_batch, load_hint_source
from trainer_client.losses.hint_context import parse_error_sites


def test_fallback_chain_key_kind_default(tmp_path):
    path = tmp_path / "h.yaml"
    path.write_text("templates:\n  default: 'D {error_kind}'\n  timeout: 'K'\n  shell.timeout: 'TK {tool}'\n")
    src = TemplateHintSource.from_yaml(path)
    assert src.hint(ErrorSite(0, "timeout", "shell.timeout", 3, tool_name="bash")) == "TK bash"
    assert src.hint(ErrorSite(0, "timeout", "other.timeout", 3)) == "K"
    assert src.hint(ErrorSite(0, "brand_new_kind", "x.brand_new_kind", 3)) == "D brand_new_kind"


def test_the_failing_tool_fills_the_template():
    src = load_hint_source()
    site = ErrorSite.from_dict({"turn": 2, "error_kind": "file_not_found", "hint_template_key": "file.not_found",
                                "token_start": 5, "tool_name": "view"})
    assert src.resolve_key(site) == "file.not_found" and src.hint(site).startswith("Hint: view could not find")


def test_tampered_grading_has_its_own_hint():
    src = load_hint_source()
    site = ErrorSite(4, "grading_tampered", "grading.tampered", 9)
    assert src.resolve_key(site) == "grading.tampered"
    text = src.hint(site)
    assert "{" not in text and "library code" in text and text != src.hint(ErrorSite(4, "x", "x.y", 9))


class _EchoSource:  # a stand-in for an LLM-written hint source
    def hint(self, site: ErrorSite) -> str:
        return f"LLM says: fix {site.error_kind}"


def test_hint_renderer_uses_the_chat_template(tokenizer):
    r = HintRenderer(tokenizer)
    assert tokenizer.decode(r.hint_ids("try ls")) == "<|im_start|>user\ntry ls<|im_end|>\n"
    assert tokenizer.decode(r.generation_prompt_ids) == "<|im_start|>assistant\n"


def _rollout(tokenizer):
    """A real rendered two-turn rollout: prompt, tool call, failing tool output, next turn."""
    msgs = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix foo."}]
    prompt = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    turn1 = '<tool_call>\n{"name": "bash", "arguments": {"command": "rg foo"}}\n</tool_call><|im_end|>\n'
    tool = "<|im_start|>user\n<tool_response>\nbash: rg: command not found\n</tool_response><|im_end|>\n"
    header = "<|im_start|>assistant\n"
    turn2 = '<tool_call>\n{"name": "bash", "arguments": {"command": "grep -rn foo ."}}\n</tool_call><|im_end|>\n'
    enc = lambda s: tokenizer(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    p, a, t, h, b = enc(prompt), enc(turn1), enc(tool), enc(header), enc(turn2)
    completion = a + t + h + b
    tool_mask = [1] * len(a) + [0] * (len(t) + len(h)) + [1] * len(b)
    return p, completion, tool_mask, len(a) + len(t), len(a) + len(t) + len(h)


def test_teacher_sequence_and_positions(tokenizer):
    p, comp, tmask, site_at_header, site_after_header = _rollout(tokenizer)
    renderer, src = HintRenderer(tokenizer), _EchoSource()
    pad = 2
    prompt_ids = torch.tensor([[tokenizer.pad_token_id] * pad + p] * 2)
    prompt_mask = torch.tensor([[0] * pad + [1] * len(p)] * 2)
    completion_ids = torch.tensor([comp + [tokenizer.pad_token_id] * 3] * 2)
    completion_mask = torch.tensor([[1] * len(comp) + [0] * 3] * 2)
    tool_mask = torch.tensor([tmask + [1] * 3] * 2)
    # both readings of token_start (at or after the assistant header) give the same teacher
    sites = parse_error_sites(
        [
            [{"turn": 1, "error_kind": "command_not_found", "hint_template_key": "shell.command_not_found", "token_start": site_at_header}],
            [ErrorSite(1, "command_not_found", "shell.command_not_found", site_after_header)],
        ],
        2,
    )
    batch = build_hint_batch(prompt_ids, prompt_mask, completion_ids, completion_mask, sites, src, renderer, tool_mask=tool_mask, pad_token_id=tokenizer.pad_token_id)
    assert batch is not None and batch.rows == [0, 1] and batch.n_sites == 2
    teacher_text = tokenizer.decode(batch.teacher_input_ids[0][batch.teacher_attention_mask[0].bool()])
    assert "command not found\n</tool_response><|im_end|>\n<|im_start|>user\nLLM says: fix command_not_found<|im_end|>\n<|im_start|>assistant\n<tool_call>" in teacher_text
    assert torch.equal(batch.teacher_input_ids[0], batch.teacher_input_ids[1])
    # counted tokens: only the second assistant turn (the student's own tokens after the site)
    n_turn2 = sum(tmask[site_after_header:])
    assert batch.n_tokens == 2 * n_turn2
    s_flat = batch.student_input_ids.reshape(-1)
    t_flat = batch.teacher_input_ids.reshape(-1)
    # the next token predicted at each student/teacher position is the same student token
    torch.testing.assert_close(s_flat[batch.student_positions + 1], t_flat[batch.teacher_positions + 1])
    assert tokenizer.decode(s_flat[batch.student_positions[:n_turn2] + 1]).startswith("<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"grep")


def test_no_sites_or_out_of_range_gives_none(tokenizer):
    p, comp, tmask, s, _ = _rollout(tokenizer)
    args = (torch.tensor([p]), torch.ones(1, len(p), dtype=torch.long), torch.tensor([comp]), torch.ones(1, len(comp), dtype=torch.long))
    r, src = HintRenderer(tokenizer), load_hint_source()
    assert build_hint_batch(*args, [[]], src, r) is None
    assert build_hint_batch(*args, [[ErrorSite(1, "timeout", "shell.timeout", len(comp) + 5)]], src, r) is None
