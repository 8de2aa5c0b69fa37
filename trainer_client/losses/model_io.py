"""Reading a causal LM as backbone + LM head (the chunked losses never ask it for full logits)."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

__all__ = ["adapters_disabled", "final_hidden_states", "lm_head_params"]


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
