"""`ThreeChannelLossMixin`: adds channels 2 and 3 to TRL's GRPO loss inside the trainer.

    class SweGRPOTrainer(ThreeChannelLossMixin, GRPOTrainer): ...

The trainer sets `self.loss_config` (a LossConfig). Channel 1 is `super()._compute_loss`
untouched; channels 2/3 are divided by `current_gradient_accumulation_steps` and every
channel is logged into `self._metrics[mode]` under `channels/...`, gathered over the ranks of a
multi-process run (losses averaged, the counts `CHANNEL_COUNTS` summed).

When channel 2 runs in a step, a forward hook on the backbone keeps the final hidden states
of GRPO's own forward over the rollouts; channel 2 reads the student side at the counted
positions from them (no second student forward; its gradient flows through GRPO's forward).
The hook only reads, so channel 1 is unchanged.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from trainer_client.distributed import gather_objects, merge_metrics

from .compose import ChannelOutputs, compute_channels, has_error_sites
from .config import LossConfig
from .hints import HintSource, load_hint_source
from .model_io import capture_final_hidden, is_peft_model
from .pairs import EncodedPair, PairSampler, encode_pair, load_pairs
from .replay import ReferenceLogps
from .taid import TAIDScheduler
from .teacher_context import HintRenderer

__all__ = ["CHANNEL_COUNTS", "ChannelState", "ThreeChannelLossMixin"]

log = logging.getLogger(__name__)

#: channel metrics that are counts: summed over the ranks (the others are averaged)
CHANNEL_COUNTS = ("channels/error_sites", "channels/sdpo_tokens", "channels/pairs")


def _tokenizer_of(processing_class: Any) -> Any:
    return getattr(processing_class, "tokenizer", processing_class)


def _rollout_hidden(captured: list[torch.Tensor], inputs: dict[str, Any]) -> torch.Tensor | None:
    """GRPO's (B, P + C, H) hidden states from the captured forwards (TRL may split the batch
    into row chunks); None when they do not match the rollouts (channel 2 then runs its own)."""
    b = inputs["completion_ids"].size(0)
    width = inputs["prompt_ids"].size(1) + inputs["completion_ids"].size(1)
    hidden = None
    if captured and all(h.dim() == 3 and h.size(1) == width for h in captured):
        hidden = captured[0] if len(captured) == 1 else torch.cat(captured, dim=0)
    if hidden is None or hidden.size(0) != b:
        log.debug("GRPO hidden states not captured as expected; channel 2 runs its own student forward")
        return None
    return hidden


class ChannelState:
    """What channels 2/3 keep across steps: hints, encoded pairs, sampler, reference, TAID t."""

    def __init__(self, config: LossConfig, tokenizer: Any, hint_source: HintSource | None = None):
        self.config = config
        self.tokenizer = tokenizer
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.hint_source = hint_source or load_hint_source(config.hints_path)
        self.renderer = HintRenderer(tokenizer)
        self.pairs: list[EncodedPair] = []
        if config.pairs_path and config.beta > 0:
            raw = load_pairs(config.pairs_path)
            self.pairs = [encode_pair(tokenizer, p, i, config.max_pair_length) for i, p in enumerate(raw)]
        self.sampler = PairSampler(len(self.pairs), config.pairs_per_step, config.pair_seed) if self.pairs else None
        self.reference = ReferenceLogps()
        self.taid = (
            TAIDScheduler(config.taid_total_steps, config.taid_t, config.taid_t_end, config.taid_alpha, config.taid_momentum)
            if config.divergence == "taid" and config.taid_adaptive
            else None
        )

    def prepare_reference(self, model: Any) -> None:
        """DPO without PEFT: score every pair under the current (initial) policy, once."""
        if self.pairs and self.config.pref_loss == "dpo" and not is_peft_model(model) and not len(self.reference):
            self.reference.compute(model, self.pairs, pad_token_id=self.pad_token_id)

    def next_pairs(self) -> list[EncodedPair]:
        return [self.pairs[i] for i in self.sampler.next()] if self.sampler else []

    @property
    def taid_t(self) -> float | None:
        return self.taid.t if self.taid else None


class ThreeChannelLossMixin:
    """Mix in before GRPOTrainer; reads `self.loss_config` (default: LossConfig())."""

    _channel_state: ChannelState | None = None
    hint_source: HintSource | None = None  # set to plug in another hint source

    def _get_channel_state(self, model: Any) -> ChannelState:
        if self._channel_state is None:
            config = getattr(self, "loss_config", None) or LossConfig()
            if self.state.global_step > 0:
                log.warning("three-channel state built after step 0: DPO references are not the initial policy")
            self._channel_state = ChannelState(config, _tokenizer_of(self.processing_class), self.hint_source)
            self._channel_state.prepare_reference(model)
        return self._channel_state

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        state = self._get_channel_state(model)
        cfg = state.config
        step = self.state.global_step
        reuse = cfg.reuse_grpo_hidden and cfg.alpha_at(step) > 0 and has_error_sites(inputs)
        with capture_final_hidden(model, enabled=reuse) as captured:
            loss = super()._compute_loss(model, inputs)  # type: ignore[misc]
        student_hidden = _rollout_hidden(captured, inputs) if reuse else None
        mode = "train" if self.model.training else "eval"
        accumulation = self.current_gradient_accumulation_steps if mode == "train" else 1
        out: ChannelOutputs = compute_channels(
            model,
            inputs,
            cfg,
            step=step,
            grpo_loss=loss,
            hint_source=state.hint_source,
            renderer=state.renderer,
            pairs=state.next_pairs() if cfg.beta_at(step) > 0 else None,
            reference=state.reference if len(state.reference) else None,
            taid_t=state.taid_t,
            gradient_accumulation_steps=accumulation,
            pad_token_id=state.pad_token_id,
            student_hidden=student_hidden,
        )
        if state.taid is not None and out.n_sdpo_tokens and mode == "train":
            state.taid.update(float(out.sdpo.detach()), step)
            out.extra["channels/taid_t"] = state.taid.t
        per_rank = gather_objects(self, out.metrics())  # every rank computes the loss of its own micro-batch
        for name, value in merge_metrics(per_rank, sums=CHANNEL_COUNTS).items():
            self._metrics[mode][name].append(value)
        return out.total
