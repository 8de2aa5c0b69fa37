"""Channel ``pairs`` (channel 3, weight beta): a preference loss (DPO with a reference, or SimPO)
on (chosen, rejected) tool calls that teachers replaying frozen traces preferred.

The pairs come from `trainer-client replay` (a file, ``loss.pairs.path``) and from the replay loop
during training (``replay.enabled``); both are ``PairRecord`` lines (trainer_client/pair_records.py).
The channel's state is its buffer of pairs, the sampler drawing ``per_step`` of them per step and
DPO's reference log-probs (scored once under the initial policy).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Literal, Sequence

from pydantic import Field

from trainer_client.pair_records import PairRecord

from .channels import ChannelContext, ChannelLoss, ChannelSettings, LossChannel, StepInputs

__all__ = ["PairsChannel", "PairsLoss", "PairsSettings", "ReferenceLogps", "pairs_loss"]

log = logging.getLogger(__name__)


class PairsSettings(ChannelSettings):
    """``loss.pairs``: the preference loss on replayed teacher pairs."""

    loss: Literal["dpo", "simpo"] = Field("dpo", description="dpo: against the initial policy's log-probs; "
                                          "simpo: length-normalized, no reference")
    dpo_beta: float = 0.1
    simpo_beta: float = 2.0
    simpo_gamma: float = Field(1.0, description="SimPO's target margin (in units of the beta-scaled, "
                               "length-normalized reward)")
    path: str | None = Field(None, description="JSONL of replayed pairs to start the buffer with")
    per_step: int = Field(2, ge=1, description="pairs drawn per optimizer step")
    seed: int = 0
    max_length: int = Field(4096, ge=8, description="rendered prompt+response tokens per pair; longer prompts "
                            "lose their oldest tokens")
    chunk_size: int = Field(256, ge=0, description="tokens per chunk of the response log-probs; 0: all at once")


class ReferenceLogps:
    """Summed response log-probs of each pair under the reference policy, keyed by pair index.

    Filled once under the initial policy (`compute` before the first optimizer step); DPO then
    reads it instead of keeping a frozen model copy."""

    def __init__(self) -> None:
        self._values: dict[int, tuple[float, float]] = {}

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, index: int) -> bool:
        return index in self._values

    def compute(self, model: Any, pairs: Sequence[Any], batch_size: int = 4, pad_token_id: int = 0) -> None:
        """Fill the entries missing for `pairs` (adapters disabled under PEFT)."""
        import torch

        from .model_io import adapters_disabled
        from .pairs import collate_pairs
        from .preference import response_logps

        todo = [p for p in pairs if p.index not in self._values]
        was_training = getattr(model, "training", False)
        model.eval()
        try:
            with torch.no_grad(), adapters_disabled(model):
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

    def get(self, pairs: Sequence[Any], device: Any = "cpu") -> tuple[Any, Any]:
        import torch

        missing = [p.index for p in pairs if p.index not in self._values]
        if missing:
            raise KeyError(f"no reference log-probs for pairs {missing}; call compute() before training")
        c = torch.tensor([self._values[p.index][0] for p in pairs], device=device)
        r = torch.tensor([self._values[p.index][1] for p in pairs], device=device)
        return c, r


@dataclass
class PairsLoss:
    loss: Any  # mean over pairs
    margin: Any  # detached mean of the (implicit-reward) margin chosen - rejected
    n_pairs: int


def pairs_loss(
    model: Any,
    pairs: Sequence[Any],
    settings: PairsSettings,
    reference: ReferenceLogps | None = None,
    pad_token_id: int = 0,
) -> PairsLoss:
    """Mean preference loss over encoded `pairs` under `settings.loss`.

    DPO's reference: `reference` when given; otherwise, for a PEFT model, the base model with adapters
    disabled, computed now without gradient."""
    import torch

    from .model_io import adapters_disabled, is_peft_model
    from .pairs import collate_pairs
    from .preference import dpo_sigmoid_loss, response_logps, simpo_loss

    device = next(model.parameters()).device
    ids, attn, resp = (t.to(device) for t in collate_pairs(pairs, pad_token_id))
    sums, counts = response_logps(model, ids, attn, resp, chunk_size=settings.chunk_size)
    n = len(pairs)
    chosen, rejected = sums[:n], sums[n:]
    if settings.loss == "simpo":
        avg_c = chosen / counts[:n].clamp(min=1)
        avg_r = rejected / counts[n:].clamp(min=1)
        losses = simpo_loss(avg_c, avg_r, settings.simpo_beta, settings.simpo_gamma)
        margin = (avg_c - avg_r).detach().mean()
    else:
        if reference is not None:
            ref_c, ref_r = reference.get(pairs, device)
        elif is_peft_model(model):
            with torch.no_grad(), adapters_disabled(model):
                ref, _ = response_logps(model, ids, attn, resp, chunk_size=settings.chunk_size)
            ref_c, ref_r = ref[:n], ref[n:]
        else:
            raise ValueError("DPO needs reference log-probs (ReferenceLogps) or a PEFT model")
        losses = dpo_sigmoid_loss(chosen, rejected, ref_c, ref_r, settings.dpo_beta)
        margin = ((chosen - ref_c) - (rejected - ref_r)).detach().mean()
    return PairsLoss(losses.mean(), margin, n)


class PairsChannel(LossChannel):
    """Channel 3. The buffer starts with `path` (if any) and grows with `add` (the replay loop during
    training); DPO's reference is the initial policy: pairs present at the start are scored by the model
    before its first step (`prepare`), pairs added later by `reference_model` (PEFT: the policy with
    adapters disabled; otherwise the initial weights, loaded once by the context's `reference_loader`)."""

    name: ClassVar[str] = "pairs"
    number: ClassVar[int] = 3
    symbol: ClassVar[str] = "beta"
    summary: ClassVar[str] = "preference pairs from teachers replaying frozen traces"
    settings_class: ClassVar[type[ChannelSettings]] = PairsSettings
    counts: ClassVar[tuple[str, ...]] = ("used",)
    column: ClassVar[str] = "used"
    column_legend: ClassVar[str] = "used: pairs in the step's loss (the pairs' input)"
    default_weight: ClassVar[float] = 0.05
    settings: PairsSettings

    def __init__(self, settings: PairsSettings, context: ChannelContext):
        super().__init__(settings, context)
        self.records: list[PairRecord] = []  # the buffer, in index order
        self.pairs: list[Any] = []  # their encodings (EncodedPair)
        self.sampler: Any = None
        self.reference = ReferenceLogps()
        self.reference_loader: Callable[[], Any] | None = context.reference_loader
        self._reference_model: Any = None
        self.refused = 0
        if settings.path and settings.weight > 0:
            from .pairs import load_pairs

            self.extend(load_pairs(settings.path))

    def has_inputs(self, batch: Any) -> bool:
        return bool(self.pairs)

    def extend(self, records: Sequence[PairRecord | dict]) -> list[Any]:
        """Encode and add pairs to the buffer (no DPO reference scored: `add` does); a pair that cannot be
        rendered is counted and left out. Returns the encodings added."""
        from .pairs import PairSampler, encode_pair

        added = []
        for record in records:
            try:
                pair = record if isinstance(record, PairRecord) else PairRecord.model_validate(record)
                encoded = encode_pair(self.context.tokenizer, pair, len(self.pairs), self.settings.max_length)
            except (KeyError, ValueError, TypeError) as exc:
                self.refused += 1
                state_id = getattr(record, "state_id", None) or (record.get("state_id") if isinstance(record, dict) else None)
                log.warning("pair %s left out of the buffer: %s", state_id, exc)
                continue
            self.records.append(pair)
            self.pairs.append(encoded)
            added.append(encoded)
        if self.pairs:
            if self.sampler is None:
                self.sampler = PairSampler(len(self.pairs), self.settings.per_step, self.settings.seed)
            else:
                self.sampler.grow(len(self.pairs))
        return added

    def add(self, records: Sequence[PairRecord | dict], model: Any) -> int:
        """Add pairs delivered during training (their DPO references from the initial policy); returns
        how many joined the buffer."""
        added = self.extend(records)
        if added and self.settings.loss == "dpo":
            self.reference.compute(self.reference_model(model), added, pad_token_id=self.context.pad_token_id)
        return len(added)

    def reference_model(self, model: Any) -> Any:
        """The model that scores DPO references: under PEFT the policy itself (ReferenceLogps.compute
        disables the adapters); otherwise the initial weights, loaded once."""
        from .model_io import is_peft_model

        if is_peft_model(model):
            return model
        if self._reference_model is None:
            if self.reference_loader is None:
                raise ValueError("DPO on pairs added during training needs the initial policy: give the "
                                 "channel a reference_loader, use PEFT, or loss.pairs.loss=simpo")
            self._reference_model = self.reference_loader()
            self._reference_model.eval().requires_grad_(False)
        return self._reference_model

    def prepare(self, model: Any) -> None:
        """DPO without PEFT: score every pair under the current (initial) policy, once."""
        from .model_io import is_peft_model

        if self.pairs and self.settings.loss == "dpo" and not is_peft_model(model) and not len(self.reference):
            self.reference.compute(model, self.pairs, pad_token_id=self.context.pad_token_id)

    def next_pairs(self) -> list[Any]:
        return [self.pairs[i] for i in self.sampler.next()] if self.sampler else []

    def compute(self, model: Any, inputs: StepInputs) -> ChannelLoss:
        out = pairs_loss(model, self.next_pairs(), self.settings,
                         reference=self.reference if len(self.reference) else None,
                         pad_token_id=self.context.pad_token_id)
        return ChannelLoss(out.loss, {"used": float(out.n_pairs)}, {"margin": float(out.margin)})

    def state_dict(self) -> dict[str, Any]:
        return {"records": [r.model_dump(mode="json") for r in self.records], "reference": self.reference.state_dict(),
                "sampler": self.sampler.state_dict() if self.sampler else None, "refused": self.refused}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The same buffer (re-encoded: the same tokens), the same reference values, the sampler where it
        stood."""
        self.records, self.pairs, self.sampler = [], [], None
        self.extend(state["records"])
        if len(self.pairs) != len(state["records"]):
            raise ValueError("checkpoint pair buffer does not re-encode with this tokenizer/config")
        self.reference.load_state_dict(state["reference"])
        if self.sampler is not None and state.get("sampler"):
            self.sampler.load_state_dict(state["sampler"])
        self.refused = int(state.get("refused", 0))

    @classmethod
    def arm_overrides(cls, on: bool) -> list[str]:
        """An arm with pairs runs the replay loop (it is what feeds the buffer during training)."""
        return [f"replay.enabled={'true' if on else 'false'}"]

    @classmethod
    def arm_problem(cls, config: Any) -> str | None:
        from pathlib import Path

        teachers, local = config.replay.teachers, config.replay.local_models
        if not teachers and not local:
            return ("needs replay teachers but none are configured: set replay.teachers=TEACHERS.yaml "
                    "or replay.local_models=[CHECKPOINT, ...] (--set); not run (it would only be GRPO)")
        if teachers and not Path(teachers).is_file():
            return f"replay.teachers {teachers!r} is not a file"
        return None
