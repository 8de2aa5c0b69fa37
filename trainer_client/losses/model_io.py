"""Reading a causal LM as backbone + LM head (the chunked losses never ask it for full logits)."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

__all__ = ["adapters_disabled", "backbone_of", "capture_final_hidden", "final_hidden_states", "lm_head_params"]


def final_hidden_states(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The post-norm hidden states (B, L, H) that feed the LM head.

    Calls the model itself (so DDP/PEFT wrappers stay in the path) with logits_to_keep=1:
    only one position per row is projected onto the vocabulary.
    """
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        output_hidden_states=True,
        logits_to_keep=1,
        use_cache=False,
    )
    return out.hidden_states[-1]


def backbone_of(model: Any) -> torch.nn.Module | None:
    """The decoder whose `last_hidden_state` feeds the LM head (None when it cannot be told).

    The module TRL's fused LM head calls (`PreTrainedModel.base_model`), under DDP and PEFT.
    """
    unwrapped = getattr(model, "module", model)
    if is_peft_model(unwrapped):
        unwrapped = unwrapped.get_base_model()
    backbone = getattr(unwrapped, "base_model", None)
    if not isinstance(backbone, torch.nn.Module) or backbone is unwrapped:
        return None
    return backbone


@contextlib.contextmanager
def capture_final_hidden(model: Any, enabled: bool = True) -> Iterator[list[torch.Tensor]]:
    """Collect the backbone's `last_hidden_state` of every forward run inside the block.

    The tensors keep their autograd graph (a loss on them back-propagates through that same
    forward). The hook is removed on exit; disabled or without a known backbone, the list
    stays empty.
    """
    captured: list[torch.Tensor] = []
    backbone = backbone_of(model) if enabled else None
    if backbone is None:
        yield captured
        return

    def hook(module: Any, args: Any, output: Any) -> None:
        hidden = getattr(output, "last_hidden_state", None)
        if hidden is None and isinstance(output, (tuple, list)) and output:
            hidden = output[0]
        if isinstance(hidden, torch.Tensor):
            captured.append(hidden)

    handle = backbone.register_forward_hook(hook)
    try:
        yield captured
    finally:
        handle.remove()


def lm_head_params(model: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(weight (V, H), bias or None) of the model's output projection."""
    unwrapped = getattr(model, "module", model)  # DDP
    head = unwrapped.get_output_embeddings()
    return head.weight, getattr(head, "bias", None)


def is_peft_model(model: Any) -> bool:
    return hasattr(getattr(model, "module", model), "disable_adapter") and hasattr(
        getattr(model, "module", model), "peft_config"
    )


@contextlib.contextmanager
def adapters_disabled(model: Any) -> Iterator[None]:
    """Run the base model (PEFT adapters off); a no-op context for plain models."""
    unwrapped = getattr(model, "module", model)
    if is_peft_model(unwrapped):
        with unwrapped.disable_adapter():
            yield
    else:
        yield
