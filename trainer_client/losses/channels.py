"""Loss channels: the registry every surface of the loss is generated from.

    total = grpo + sum over channels c of  weight_c(step) * loss_c / gradient_accumulation

Channel 1 is TRL's GRPO loss, untouched. Every other channel is one :class:`LossChannel` subclass
registered with :func:`register_channel`: its name (the one noun it goes by in code, config,
metrics and docs), its settings (a pydantic section with ``weight`` and ``schedule``), when it is
active, its loss and counts, and its state for checkpoints. From the registry come:

- the config's ``loss`` section (:class:`LossSettings`: one sub-section per channel, ``--set
  loss.<name>.weight=0.1``; a mistyped key names the nearest valid one);
- the metric keys (``channels/<name>``, ``channels/<name>/weight``, ``channels/<name>/<count>``);
- the step table's columns and legend (``trainer_client/metrics.py``);
- the ablation arms (``trainer_client/ablate.py``: GRPO alone, GRPO plus each channel, all).

The built-in channels: ``hints`` (channel 2, weight alpha: the same model with a hint at the env's
error sites as teacher; ``hints_channel.py``) and ``pairs`` (channel 3, weight beta: preference
pairs from teachers replaying frozen traces; ``pairs_channel.py``). This module imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from contract.registry import resolve

__all__ = ["CHANNELS", "ChannelContext", "ChannelLoss", "ChannelSettings", "LossChannel", "LossSettings",
           "WeightSchedule", "channel_class", "channel_names", "count_keys", "metric_key", "register_channel",
           "total_formula"]

#: the prefix of every channel metric
PREFIX = "channels/"


class WeightSchedule(BaseModel):
    """How a channel's weight evolves with the optimizer step.

    `constant`: the full weight from step 0. `warmup`: a linear ramp from 0 at step 0 to the full
    weight at `warmup_steps` (lets the policy first learn the tool format from GRPO alone)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["constant", "warmup"] = "constant"
    warmup_steps: int = Field(0, ge=0)

    def factor(self, step: int) -> float:
        """Multiplier in [0, 1] for the weight at optimizer step `step`."""
        if self.kind == "constant" or self.warmup_steps == 0:
            return 1.0
        return min(1.0, max(0.0, step / self.warmup_steps))


class ChannelSettings(BaseModel):
    """What every channel's section holds; a channel's own settings subclass it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    weight: float = Field(0.0, ge=0, description="the channel's weight in the total (0: off)")
    schedule: WeightSchedule = Field(default_factory=WeightSchedule, description="how the weight ramps up")

    def weight_at(self, step: int) -> float:
        """The scheduled weight at optimizer step `step`."""
        return self.weight * self.schedule.factor(step)


@dataclass
class ChannelContext:
    """What a channel may need from the trainer: the tokenizer, and plug-ins the trainer sets."""

    tokenizer: Any
    hint_source: Any = None  # channel hints: a HintSource; None = the configured templates
    reference_loader: Any = None  # channel pairs: () -> the initial policy (DPO's reference without PEFT)

    @property
    def pad_token_id(self) -> int:
        pad = getattr(self.tokenizer, "pad_token_id", None)
        return pad if pad is not None else 0


@dataclass
class StepInputs:
    """One loss computation's inputs besides the model: the GRPO batch, the step, and what the
    trainer's own forward left (`student_hidden`: its final hidden states, see hints_channel)."""

    batch: Any
    step: int = 0
    training: bool = True
    student_hidden: Any = None


@dataclass
class ChannelLoss:
    """A channel's unweighted loss for one batch, its counts (summed over ranks: error sites, pairs)
    and other values (averaged over ranks: a margin)."""

    loss: Any  # a scalar tensor; None: nothing to add this step (logged as 0)
    counts: dict[str, float] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)


class LossChannel:
    """A loss channel: subclass, set the class attributes, implement `compute`, register it.

    The instance lives for the run and holds the channel's state (`state_dict` goes into every
    checkpoint's channels.pt)."""

    name: ClassVar[str]
    """The one noun of the channel: its config section, its metric keys, its column, its arm."""
    number: ClassVar[int]
    """Its number in the docs' "channel N" (GRPO is 1)."""
    symbol: ClassVar[str]
    """The weight's symbol in the formula (alpha, beta)."""
    summary: ClassVar[str]
    """One line: what the channel trains on."""
    settings_class: ClassVar[type[ChannelSettings]] = ChannelSettings
    counts: ClassVar[tuple[str, ...]] = ()
    """Count metrics (``channels/<name>/<count>``), summed over ranks; the first is the step table's
    input column."""
    column: ClassVar[str] = ""
    """Header of the step table's input column (its first count)."""
    column_legend: ClassVar[str] = ""
    default_weight: ClassVar[float] = 0.0
    """The weight where the config gives none, and the weight an ablation arm turns it on with."""

    def __init__(self, settings: ChannelSettings, context: ChannelContext):
        self.settings = settings
        self.context = context

    # --- when it runs ----------------------------------------------------------------------------
    def weight_at(self, step: int) -> float:
        return self.settings.weight_at(step)

    def has_inputs(self, batch: Any) -> bool:
        """Whether `batch` holds what this channel trains on (error sites, pairs to draw)."""
        return True

    def active(self, step: int, batch: Any) -> bool:
        """Computed and added this step: a weight above 0 and inputs present."""
        return self.weight_at(step) > 0 and self.has_inputs(batch)

    def wants_grpo_hidden(self, step: int, batch: Any) -> bool:
        """Whether this step it reads the final hidden states of GRPO's own forward."""
        return False

    # --- what it computes ------------------------------------------------------------------------
    def prepare(self, model: Any) -> None:
        """Once, before the first optimizer step (not on a resumed run)."""

    def compute(self, model: Any, inputs: StepInputs) -> ChannelLoss:
        """The unweighted loss for this step (called only when `active`)."""
        raise NotImplementedError

    # --- checkpoints -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict`'s output exactly."""

    # --- ablation --------------------------------------------------------------------------------
    @classmethod
    def arm_overrides(cls, on: bool) -> list[str]:
        """Settings an ablation arm sets besides the weight, with this channel on or off."""
        return []

    @classmethod
    def arm_problem(cls, config: Any) -> str | None:
        """Why an arm with this channel on cannot run on this run config (None: it can)."""
        return None


# name -> its class, or where to import it from ("module:Class", relative to this package), so that
# reading the names (the config's sections, the step table, the arms) imports no torch.
CHANNELS: dict[str, str | type[LossChannel]] = {
    "hints": ".hints_channel:HintsChannel",
    "pairs": ".pairs_channel:PairsChannel",
}


def register_channel(cls: type[LossChannel]) -> type[LossChannel]:
    """Add a channel to the registry (usable as a class decorator); its name must be new."""
    if cls.name in CHANNELS and channel_class(cls.name) is not cls:
        raise ValueError(f"a loss channel named {cls.name!r} is already registered")
    CHANNELS[cls.name] = cls
    return cls


def channel_names() -> tuple[str, ...]:
    """The registered channels' names, in channel order."""
    return tuple(sorted(CHANNELS, key=lambda n: channel_class(n).number))


def channel_class(name: str) -> type[LossChannel]:
    """The class registered as `name` (imported on first use)."""
    return resolve(CHANNELS, name, __package__, "loss channel")


def metric_key(name: str, leaf: str | None = None) -> str:
    """``channels/<name>`` (the channel's unweighted loss) or ``channels/<name>/<leaf>``."""
    return f"{PREFIX}{name}" + (f"/{leaf}" if leaf else "")


def count_keys() -> tuple[str, ...]:
    """Every channel metric that is a count (summed over ranks; the others are averaged)."""
    return tuple(metric_key(n, c) for n in channel_names() for c in channel_class(n).counts)


def total_formula() -> str:
    """``total = grpo + alpha*hints + beta*pairs``, from the registry."""
    return "total = grpo" + "".join(f" + {channel_class(n).symbol}*{n}" for n in channel_names())


class LossSettings(BaseModel):
    """The run config's ``loss`` section: one sub-section per registered channel (its settings class).

    A channel the config does not name gets its settings' defaults with the channel's
    `default_weight`. Keys are checked against the registry when the section is read."""

    model_config = ConfigDict(extra="allow", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _channels(cls, raw: Any) -> Any:
        if isinstance(raw, LossSettings):
            return raw
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise ValueError(f"loss must be a mapping of channel sections ({', '.join(channel_names())})")
        from contract.overrides import unknown_key_message

        out: dict[str, Any] = {}
        unknown = [k for k in raw if k not in CHANNELS]
        if unknown:
            valid = [f"loss.{n}" for n in channel_names()] + [
                f"loss.{n}.{f}" for n in channel_names() for f in channel_class(n).settings_class.model_fields]
            raise ValueError("; ".join(f"loss.{k}: moved to {_MOVED[k]}" if k in _MOVED
                                       else unknown_key_message(f"loss.{k}", valid) for k in unknown))
        for name in channel_names():
            channel = channel_class(name)
            section = raw.get(name)
            if isinstance(section, ChannelSettings):
                out[name] = section
                continue
            section = dict(section or {})
            section.setdefault("weight", channel.default_weight)
            try:
                out[name] = channel.settings_class.model_validate(section)
            except Exception as exc:  # one line per error, keyed by the full dotted name
                errors = getattr(exc, "errors", None)
                if not callable(errors):
                    raise
                parts = []
                for err in errors():
                    where = ".".join(["loss", name, *(str(p) for p in err["loc"])])
                    if err["type"] == "extra_forbidden":
                        keys = [f"loss.{name}.{f}" for f in channel.settings_class.model_fields]
                        parts.append(unknown_key_message(where, keys))
                    else:
                        parts.append(f"{where}: {' '.join(err['msg'].removeprefix('Value error, ').split())}")
                raise ValueError("; ".join(parts)) from None
        return out

    def channel(self, name: str) -> ChannelSettings:
        """The settings of channel `name`."""
        return getattr(self, name)

    def items(self) -> list[tuple[str, ChannelSettings]]:
        return [(n, self.channel(n)) for n in channel_names()]


#: keys of the flat loss section before channels were plug-ins, and where each lives now
_MOVED = {
    "alpha": "loss.hints.weight", "alpha_schedule": "loss.hints.schedule", "beta": "loss.pairs.weight",
    "beta_schedule": "loss.pairs.schedule", "divergence": "loss.hints.divergence", "jsd_beta": "loss.hints.jsd_beta",
    "temperature": "loss.hints.temperature", "token_clip": "loss.hints.token_clip",
    "teacher_top_k": "loss.hints.teacher_top_k", "chunk_size": "loss.hints.chunk_size (and loss.pairs.chunk_size)",
    "chunk_backend": "loss.hints.chunk_backend", "reuse_grpo_hidden": "loss.hints.reuse_grpo_hidden",
    "hints_path": "loss.hints.templates", "pref_loss": "loss.pairs.loss", "dpo_beta": "loss.pairs.dpo_beta",
    "simpo_beta": "loss.pairs.simpo_beta", "simpo_gamma": "loss.pairs.simpo_gamma", "pairs_path": "loss.pairs.path",
    "pairs_per_step": "loss.pairs.per_step", "pair_seed": "loss.pairs.seed", "max_pair_length": "loss.pairs.max_length",
    **{k: f"loss.hints.{k}" for k in ("taid_t", "taid_adaptive", "taid_t_end", "taid_total_steps", "taid_alpha",
                                       "taid_momentum", "eaopd_h_max")},
}
