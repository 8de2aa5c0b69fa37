"""The tiny smoke model is a real Qwen2ForCausalLM that loads by path."""

from __future__ import annotations

from trainer_client.tiny_qwen import TinyQwenSpec, tiny_qwen_dir


def test_tiny_qwen_loads_by_path_and_generates(tmp_path, qwen_tokenizer):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = tiny_qwen_dir(TinyQwenSpec(), cache_dir=tmp_path)
    model = AutoModelForCausalLM.from_pretrained(str(path))
    assert type(model).__name__ == "Qwen2ForCausalLM"
    cfg = model.config
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size) == (64, 2, len(qwen_tokenizer))
    assert model.get_input_embeddings().weight.data_ptr() == model.get_output_embeddings().weight.data_ptr()
    assert 9_000_000 < sum(p.numel() for p in model.parameters()) < 11_000_000
    assert AutoTokenizer.from_pretrained(str(path))("Hello").input_ids == [9707]
    ids = torch.tensor([[9707]])
    out = model.generate(ids, max_new_tokens=4, do_sample=False)
    assert out.shape == (1, 5)
    # cached: the second call returns the same directory without rebuilding
    assert tiny_qwen_dir(TinyQwenSpec(), cache_dir=tmp_path) == path
