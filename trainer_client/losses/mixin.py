"""`LossChannelsMixin`: adds the registered loss channels (channels.py) to TRL's GRPO loss inside
the trainer.

    class SweGRPOTrainer(LossChannelsMixin, GRPOTrainer): ...

The trainer sets `self.loss_settings` (the run config's `loss` section, a LossSettings). GRPO is
`super()._compute_loss` untouched; the channels are divided by `current_gradient_accumulation_steps`
and every channel metric is logged into `self._metrics[mode]`, gathered over the ranks of a
multi-process run (losses averaged, the counts summed).

When a channel reads GRPO's own forward in a step (hints), a forward hook on the backbone keeps
the final hidden states of that forward over the rollouts; the hook only reads, so GRPO is unchanged.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

import torch

from trainer_client.distributed import gather_objects, merge_metrics

from .channels import ChannelContext, LossChannel, LossSettings, count_keys, metric_key
from .compose import ChannelOutputs, build_channels, compute_channels
from .model_io import capture_final_hidden

__all__ = ["CHANNELS_FILE", "LossChannelsMixin"]

log = logging.getLogger(__name__)

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


class LossChannelsMixin:
    """Mix in before GRPOTrainer; reads `self.loss_settings` (default: every channel's defaults).

    `self.live_replay` (a trainer_client.replay.during_training.LiveReplay on the main process, None
    elsewhere) feeds the pairs channel during the run when `self.live_pairs` is set on every rank: before
    each loss the main process drains it and every rank adds the same new pairs. `channels.pt` in each
    checkpoint holds every channel's state (and the loop's), restored by `train(resume_from_checkpoint=...)`.
    """

    _channels: dict[str, LossChannel] | None = None
    hint_source: Any = None  # set to plug in another hint source (channel hints)
    live_replay: Any = None
    live_pairs: bool = False
    reference_loader: Callable[[], Any] | None = None
    _resumed_channels: dict | None = None

    def loss_channels(self, model: Any) -> dict[str, LossChannel]:
        """The run's channel instances (built on first use: DPO's references scored then)."""
        if self._channels is None:
            settings = getattr(self, "loss_settings", None) or LossSettings()
            context = ChannelContext(_tokenizer_of(self.processing_class), hint_source=self.hint_source,
                                     reference_loader=self.reference_loader)
            channels = build_channels(settings, context)
            if self._resumed_channels is not None:
                saved = _current_layout(self._resumed_channels["loss"])
                for name, channel in channels.items():
                    if name in saved:
                        channel.load_state_dict(saved[name])
            else:
                if self.state.global_step > 0:
                    log.warning("loss channels built after step 0 without a checkpoint's channels.pt: "
                                "DPO references are not the initial policy")
                for channel in channels.values():
                    channel.prepare(model)
            pairs = channels.get("pairs")
            if self.live_pairs and pairs is not None and pairs.settings.weight > 0 and pairs.settings.loss == "dpo":
                pairs.reference_model(model)  # load the initial weights now, not inside a step when pairs arrive
            self._channels = channels
        return self._channels

    def _take_live_pairs(self, channels: dict[str, LossChannel], model: Any) -> None:
        """The main process drains the loop; every rank adds the same pairs (a collective)."""
        started = time.perf_counter()
        mine = self.live_replay.drain() if self.live_replay is not None else []
        records = gather_objects(self, [p.model_dump(mode="json") for p in mine])[0]
        if records:
            channels["pairs"].add(records, model)
        self.replay_loop_s += time.perf_counter() - started

    #: seconds the training thread spent on the replay loop (queueing episodes, taking pairs, their
    #: DPO references) since the last logged step: `replay/train_thread_s`
    replay_loop_s: float = 0.0

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        channels = self.loss_channels(model)
        step = self.state.global_step
        pairs = channels.get("pairs")
        if self.live_pairs and pairs is not None and pairs.weight_at(step) > 0:
            self._take_live_pairs(channels, model)
        reuse = any(c.wants_grpo_hidden(step, inputs) for c in channels.values())
        with capture_final_hidden(model, enabled=reuse) as captured:
            loss = super()._compute_loss(model, inputs)  # type: ignore[misc]
        student_hidden = _rollout_hidden(captured, inputs) if reuse else None
        mode = "train" if self.model.training else "eval"
        accumulation = self.current_gradient_accumulation_steps if mode == "train" else 1
        out: ChannelOutputs = compute_channels(
            model, inputs, channels, step=step, grpo_loss=loss, gradient_accumulation_steps=accumulation,
            student_hidden=student_hidden, training=mode == "train",
        )
        if self.live_pairs and pairs is not None:
            out.extra[metric_key("pairs", "buffer")] = float(len(pairs.pairs))
        per_rank = gather_objects(self, out.metrics())  # every rank computes the loss of its own micro-batch
        for name, value in merge_metrics(per_rank, sums=count_keys()).items():
            self._metrics[mode][name].append(value)
        if self.live_replay is not None and mode == "train":
            for name, value in self.live_replay.metrics().items():
                self._metrics[mode][name].append(value)
            self._metrics[mode]["replay/train_thread_s"].append(self.replay_loop_s)
            self.replay_loop_s = 0.0
        return out.total

    # ---------------------------------------------------------------- checkpoints
    def channels_state_dict(self) -> dict[str, Any]:
        return {"loss": {n: c.state_dict() for n, c in self._channels.items()} if self._channels is not None else None,
                "replay": self.live_replay.state_dict() if self.live_replay is not None else None}

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        super()._save_checkpoint(model, trial)  # type: ignore[misc]
        if self.args.process_index == 0 and self._channels is not None:
            folder = os.path.join(self._get_output_dir(trial=trial), f"checkpoint-{self.state.global_step}")
            torch.save(self.channels_state_dict(), os.path.join(folder, CHANNELS_FILE))

    def train(self, resume_from_checkpoint: Any = None, *args: Any, **kwargs: Any) -> Any:
        """TRL's train; resuming also restores channels.pt (every channel's state: the pair buffer, the DPO
        reference values, the sampler, TAID's t; the replay loop's spend and queue)."""
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


def _current_layout(saved: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's loss state by channel name; a checkpoint written before channels were plug-ins
    (one flat dict) is read into the hints and pairs channels' states."""
    if "records" not in saved:
        return saved
    return {"hints": {"taid": saved.get("taid")},
            "pairs": {"records": saved["records"], "reference": saved["reference"], "sampler": saved.get("sampler"),
                      "refused": saved.get("pairs_refused", 0)}}
