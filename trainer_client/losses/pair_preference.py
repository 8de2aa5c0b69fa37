"""Channel 3: the preference loss on teacher pairs (DPO with a reference, or SimPO).

The pairs come from teacher replay (trainer_client/replay/); the channel's value is logged as
`channels/replay`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from .config import LossConfig
from .model_io import adapters_disabled, is_peft_model
from .pairs import EncodedPair, collate_pairs
from .preference import dpo_sigmoid_loss, response_logps, simpo_loss

__all__ = ["ReferenceLogps", "PairPreferenceOutput", "pair_preference_loss"]


class ReferenceLogps:
    """Summed response log-probs of each pair under the reference policy, keyed by pair index.

    Fill it once under the initial policy (`compute` on the whole dataset before the first
    optimizer step); DPO then reads it instead of keeping a frozen model copy.
    """

    def __init__(self) -> None:
        self._values: dict[int, tuple[float, float]] = {}

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, index: int) -> bool:
        return index in self._values

    @torch.no_grad()
    def compute(self, model: Any, pairs: Sequence[EncodedPair], batch_size: int = 4, pad_token_id: int = 0) -> None:
        """Fill the entries missing for `pairs` (adapters disabled under PEFT)."""
        todo = [p for p in pairs if p.index not in self._values]
        was_training = getattr(model, "training", False)
        model.eval()
        try:
            with adapters_disabled(model):
                for s in range(0, len(todo), batch_size):
                    chunk = todo[s : s + batch_size]
                    ids, attn, resp = collate_pairs(chunk, pad_token_id)
                    device = next(model.parameters()).device
                    sums, _ = response_logps(model, ids.to(device), attn.to(device), resp.to(device))
                    c, r = sums[: len(chunk)].tolist(), sums[len(chunk) :].tolist()
                    for p, vc, vr in zip(chunk, c, r):
                        self._values[p.index] = (vc, vr)
        finally:
            model.train(was_training)

    def state_dict(self) -> dict[int, tuple[float, float]]:
        return dict(self._values)

    def load_state_dict(self, values: dict[int, tuple[float, float]]) -> None:
        self._values = {int(k): (float(v[0]), float(v[1])) for k, v in values.items()}

    def get(self, pairs: Sequence[EncodedPair], device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        missing = [p.index for p in pairs if p.index not in self._values]
        if missing:
            raise KeyError(f"no reference log-probs for pairs {missing}; call compute() before training")
        c = torch.tensor([self._values[p.index][0] for p in pairs], device=device)
        r = torch.tensor([self._values[p.index][1] for p in pairs], device=device)
        return c, r


@dataclass
class PairPreferenceOutput:
    loss: torch.Tensor  # mean over pairs
    margin: torch.Tensor  # detached mean of the (implicit-reward) margin chosen - rejected
    n_pairs: int


def pair_preference_loss(
    model: Any,
    pairs: Sequence[EncodedPair],
    config: LossConfig,
    reference: ReferenceLogps | None = None,
    pad_token_id: int = 0,
) -> PairPreferenceOutput:
    """Mean channel-3 loss over `pairs` under `config.pref_loss`.

    DPO reference: `reference` when given; otherwise, for a PEFT model, the base model
    with adapters disabled, computed now without gradient.
    """
    device = next(model.parameters()).device
    ids, attn, resp = (t.to(device) for t in collate_pairs(pairs, pad_token_id))
    sums, counts = response_logps(model, ids, attn, resp, chunk_size=config.chunk_size)
    n = len(pairs)
    chosen, rejected = sums[:n], sums[n:]
    if config.pref_loss == "simpo":
        avg_c = chosen / counts[:n].clamp(min=1)
        avg_r = rejected / counts[n:].clamp(min=1)
        losses = simpo_loss(avg_c, avg_r, config.simpo_beta, config.simpo_gamma)
        margin = (avg_c - avg_r).detach().mean()
    else:
        if reference is not None:
            ref_c, ref_r = reference.get(pairs, device)
        elif is_peft_model(model):
            with torch.no_grad(), adapters_disabled(model):
                ref, _ = response_logps(model, ids, attn, resp, chunk_size=config.chunk_size)
            ref_c, ref_r = ref[:n], ref[n:]
        else:
            raise ValueError("DPO needs reference log-probs (ReferenceLogps) or a PEFT model")
        losses = dpo_sigmoid_loss(chosen, rejected, ref_c, ref_r, config.dpo_beta)
        margin = ((chosen - ref_c) - (rejected - ref_r)).detach().mean()
    return PairPreferenceOutput(losses.mean(), margin, n)
