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
import os
import time
from collections.abc import Callable
from typing import Any

import torch

from trainer_client.distributed import gather_objects, merge_metrics

from .compose import ChannelOutputs, compute_channels, has_error_sites
from .config import LossConfig
from .hints import HintSource, load_hint_source
from .model_io import capture_final_hidden, is_peft_model
from .pair_preference import ReferenceLogps
from .pairs import EncodedPair, PairSampler, PreferencePair, encode_pair, load_pair_records
from .taid import TAIDScheduler
from .teacher_context import HintRenderer

__all__ = ["CHANNEL_COUNTS", "ChannelState", "ThreeChannelLossMixin"]

log = logging.getLogger(__name__)

#: channel metrics that are counts: summed over the ranks (the others are averaged)
CHANNEL_COUNTS = ("channels/error_sites", "channels/sdpo_tokens", "channels/pairs")
#: the loss state in every checkpoint folder
CHANNELS_FILE = "channels.pt"


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
    """What channels 2/3 keep across steps: hints, the pair buffer, its sampler, the DPO reference, TAID t.

    The pair buffer starts with `pairs_path` (if any) and grows with `add_pairs` (the live replay
    loop). DPO's reference is the initial policy: pairs present at the start are scored by the
    model before its first step (`prepare_reference`); pairs added later by
    `reference_model` (PEFT: the policy with adapters disabled; otherwise a frozen copy of the
    initial weights the trainer loads once, `reference_loader`). `state_dict` / `load_state_dict`
    carry all of it across a checkpoint, so a resumed run continues with the same loss state.
    """

    def __init__(self, config: LossConfig, tokenizer: Any, hint_source: HintSource | None = None,
                 reference_loader: Callable[[], Any] | None = None):
        self.config = config
        self.tokenizer = tokenizer
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.hint_source = hint_source or load_hint_source(config.hints_path)
        self.renderer = HintRenderer(tokenizer)
        self.records: list[dict] = []  # the buffer's pair records (PairRecord dumps), in index order
        self.pairs: list[EncodedPair] = []
        self.sampler: PairSampler | None = None
        self.reference = ReferenceLogps()
        self.reference_loader = reference_loader
        self._reference_model: Any = None
        self.pairs_refused = 0
        if config.pairs_path and config.beta > 0:
            self._append(load_pair_records(config.pairs_path))
        self.taid = (
            TAIDScheduler(config.taid_total_steps, config.taid_t, config.taid_t_end, config.taid_alpha, config.taid_momentum)
            if config.divergence == "taid" and config.taid_adaptive
            else None
        )

    def _append(self, records: list[dict]) -> list[EncodedPair]:
        """Encode and add pair records; a pair that cannot be rendered is counted and left out."""
        added = []
        for record in records:
            try:
                pair = PreferencePair.from_dict(record)
                encoded = encode_pair(self.tokenizer, pair, len(self.pairs), self.config.max_pair_length)
            except (KeyError, ValueError, TypeError) as exc:
                self.pairs_refused += 1
                log.warning("pair %s left out of the buffer: %s", record.get("state_id"), exc)
                continue
            self.records.append(dict(record))
            self.pairs.append(encoded)
            added.append(encoded)
        if self.pairs:
            if self.sampler is None:
                self.sampler = PairSampler(len(self.pairs), self.config.pairs_per_step, self.config.pair_seed)
            else:
                self.sampler.grow(len(self.pairs))
        return added

    def add_pairs(self, records: list[dict], model: Any) -> int:
        """Add pairs delivered during training; DPO references come from the initial policy. Returns
        how many joined the buffer."""
        added = self._append(records)
        if added and self.config.pref_loss == "dpo":
            self.reference.compute(self.reference_model(model), added, pad_token_id=self.pad_token_id)
        return len(added)

    def reference_model(self, model: Any) -> Any:
        """The model that scores DPO references: under PEFT the policy itself (ReferenceLogps.compute
        disables the adapters); otherwise the initial weights, loaded once."""
        if is_peft_model(model):
            return model
        if self._reference_model is None:
            if self.reference_loader is None:
                raise ValueError("DPO on pairs added during training needs the initial policy: give "
                                 "ChannelState a reference_loader, use PEFT, or pref_loss='simpo'")
            self._reference_model = self.reference_loader()
            self._reference_model.eval().requires_grad_(False)
        return self._reference_model

    def prepare_reference(self, model: Any) -> None:
        """DPO without PEFT: score every pair under the current (initial) policy, once."""
        if self.pairs and self.config.pref_loss == "dpo" and not is_peft_model(model) and not len(self.reference):
            self.reference.compute(model, self.pairs, pad_token_id=self.pad_token_id)

    def next_pairs(self) -> list[EncodedPair]:
        return [self.pairs[i] for i in self.sampler.next()] if self.sampler else []

    @property
    def taid_t(self) -> float | None:
        return self.taid.t if self.taid else None

    def state_dict(self) -> dict[str, Any]:
        return {"records": list(self.records), "reference": self.reference.state_dict(),
                "sampler": self.sampler.state_dict() if self.sampler else None,
                "taid": self.taid.state_dict() if self.taid else None, "pairs_refused": self.pairs_refused}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a checkpoint's loss state exactly: the same buffer (re-encoded: the same tokens),
        the same reference values, the sampler where it stood, TAID's t."""
        self.records, self.pairs, self.sampler = [], [], None
        self._append(state["records"])
        if len(self.pairs) != len(state["records"]):
            raise ValueError("checkpoint pair buffer does not re-encode with this tokenizer/config")
        self.reference.load_state_dict(state["reference"])
        if self.sampler is not None and state.get("sampler"):
            self.sampler.load_state_dict(state["sampler"])
        if self.taid is not None and state.get("taid"):
            self.taid.load_state_dict(state["taid"])
        self.pairs_refused = int(state.get("pairs_refused", 0))


class ThreeChannelLossMixin:
    """Mix in before GRPOTrainer; reads `self.loss_config` (default: LossConfig()).

    `self.live_replay` (a trainer_client.replay.during_training.LiveReplay on the main process, None
    elsewhere) feeds channel 3 during the run when `self.live_pairs` is set on every rank: before each
    loss the main process drains it and every rank adds the same new pairs. `channels.pt` in each checkpoint
    holds the loss state (and the loop's), restored by `train(resume_from_checkpoint=...)`.
    """

    _channel_state: ChannelState | None = None
    hint_source: HintSource | None = None  # set to plug in another hint source
    live_replay: Any = None
    live_pairs: bool = False
    reference_loader: Callable[[], Any] | None = None
    _resumed_channels: dict | None = None

    def _get_channel_state(self, model: Any) -> ChannelState:
        if self._channel_state is None:
            config = getattr(self, "loss_config", None) or LossConfig()
            state = ChannelState(config, _tokenizer_of(self.processing_class), self.hint_source,
                                 reference_loader=self.reference_loader)
            if self._resumed_channels is not None:
                state.load_state_dict(self._resumed_channels["loss"])
            else:
                if self.state.global_step > 0:
                    log.warning("three-channel state built after step 0 without a checkpoint's channels.pt: "
                                "DPO references are not the initial policy")
                state.prepare_reference(model)
            if self.live_pairs and config.beta > 0 and config.pref_loss == "dpo":
                state.reference_model(model)  # load the initial weights now, not inside a step when pairs arrive
            self._channel_state = state
        return self._channel_state

    def _take_live_pairs(self, state: ChannelState, model: Any) -> None:
        """The main process drains the loop; every rank adds the same pairs (a collective)."""
        started = time.perf_counter()
        mine = self.live_replay.drain() if self.live_replay is not None else []
        records = gather_objects(self, [p.model_dump(mode="json") for p in mine])[0]
        if records:
            state.add_pairs(records, model)
        self.replay_loop_s += time.perf_counter() - started

    #: seconds the training thread spent on the replay loop (queueing episodes, taking pairs, their
    #: DPO references) since the last logged step: `replay/train_thread_s`
    replay_loop_s: float = 0.0

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        state = self._get_channel_state(model)
        cfg = state.config
        step = self.state.global_step
        if self.live_pairs and cfg.beta_at(step) > 0:
            self._take_live_pairs(state, model)
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
        if self.live_pairs:
            out.extra["channels/pair_buffer"] = float(len(state.pairs))
        per_rank = gather_objects(self, out.metrics())  # every rank computes the loss of its own micro-batch
        for name, value in merge_metrics(per_rank, sums=CHANNEL_COUNTS).items():
            self._metrics[mode][name].append(value)
        if self.live_replay is not None and mode == "train":
            for name, value in self.live_replay.metrics().items():
                self._metrics[mode][name].append(value)
            self._metrics[mode]["replay/train_thread_s"].append(self.replay_loop_s)
            self.replay_loop_s = 0.0
        return out.total

    # ---------------------------------------------------------------- checkpoints
    def channels_state_dict(self) -> dict[str, Any]:
        return {"loss": self._channel_state.state_dict() if self._channel_state is not None else None,
                "replay": self.live_replay.state_dict() if self.live_replay is not None else None}

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        super()._save_checkpoint(model, trial)  # type: ignore[misc]
        if self.args.process_index == 0 and self._channel_state is not None:
            folder = os.path.join(self._get_output_dir(trial=trial), f"checkpoint-{self.state.global_step}")
            torch.save(self.channels_state_dict(), os.path.join(folder, CHANNELS_FILE))

    def train(self, resume_from_checkpoint: Any = None, *args: Any, **kwargs: Any) -> Any:
        """TRL's train; resuming also restores channels.pt (the pair buffer, the DPO reference values,
        the sampler, TAID's t, the replay loop's spend and queue)."""
        if resume_from_checkpoint is not None and resume_from_checkpoint is not False:
            if resume_from_checkpoint is True:
                from transformers.trainer_utils import get_last_checkpoint

                resume_from_checkpoint = get_last_checkpoint(self.args.output_dir)
                if resume_from_checkpoint is None:
                    raise ValueError(f"No valid checkpoint found in output directory ({self.args.output_dir})")
            path = os.path.join(resume_from_checkpoint, CHANNELS_FILE)
            if os.path.exists(path):
                saved = torch.load(path, map_location="cpu", weights_only=False)
                if saved.get("loss") is not None:
                    self._resumed_channels = saved
                if saved.get("replay") is not None and self.live_replay is not None:
                    self.live_replay.load_state_dict(saved["replay"])
            else:
                log.warning("%s has no %s: the loss state starts afresh", resume_from_checkpoint, CHANNELS_FILE)
        return super().train(resume_from_checkpoint, *args, **kwargs)  # type: ignore[misc]
