"""A loss channel is one registry entry: a throwaway channel added in this test (a class and one
`register_channel` call) reaches every surface generated from the registry: the config's `loss`
section, the loss the trainer computes, the metric keys, the step table and its legend, the plot's
channel panels, the ablation arms and `trainer-client ablate --arms`; its state goes into checkpoints."""

from __future__ import annotations

from typing import ClassVar

import pytest
import torch

from trainer_client.losses import channels as registry
from trainer_client.losses.channels import (ChannelLoss, ChannelSettings, LossChannel, LossSettings, StepInputs,
                                            count_keys, register_channel, total_formula)

from .channels_support import make_channels
from .conftest import tiny_qwen
from .rollouts_support import make_grpo_batch


class LengthSettings(ChannelSettings):
    target: float = 0.0


class LengthChannel(LossChannel):
    """Throwaway: the squared distance of the mean output logit from `target`, counting its calls."""

    name: ClassVar[str] = "length"
    number: ClassVar[int] = 4
    symbol: ClassVar[str] = "gamma"
    summary: ClassVar[str] = "a test channel"
    settings_class: ClassVar[type[ChannelSettings]] = LengthSettings
    counts: ClassVar[tuple[str, ...]] = ("calls",)
    column: ClassVar[str] = "calls"
    column_legend: ClassVar[str] = "calls: the test channel's calls"

    def __init__(self, settings, context):
        super().__init__(settings, context)
        self.calls = 0

    def compute(self, model, inputs: StepInputs) -> ChannelLoss:
        self.calls += 1
        ids = inputs.batch["completion_ids"][:, :4]
        mean = model(input_ids=ids).logits.mean()
        return ChannelLoss((mean - self.settings.target) ** 2, {"calls": float(self.calls)})

    def state_dict(self):
        return {"calls": self.calls}

    def load_state_dict(self, state):
        self.calls = state["calls"]


@pytest.fixture
def length_channel():
    register_channel(LengthChannel)
    try:
        yield LengthChannel
    finally:
        registry.CHANNELS.pop("length", None)  # the registry as it was


def test_a_registered_channel_reaches_every_surface(length_channel, tokenizer, capsys):
    # config: its section, typed, with a one-line error naming its keys
    settings = LossSettings.model_validate({"length": {"weight": 0.5, "target": 1.0}})
    assert settings.length.target == 1.0 and settings.hints.weight == 0.1  # the others keep their defaults
    with pytest.raises(ValueError, match=r"loss\.length\.targt: not a setting \(did you mean loss\.length\.target\?\)"):
        LossSettings.model_validate({"length": {"targt": 1}})
    from trainer_client.config import load_config

    cfg = load_config(None, ["loss.length.weight=0.25", "data.instance_ids=[t]"])
    assert cfg.loss.length.weight == 0.25

    # the loss: added with its weight, its metrics under its name
    model = tiny_qwen(151936, seed=3)
    assert list(make_channels(tokenizer)) == ["hints", "pairs", "length"]  # every channel, in channel order
    from trainer_client.losses import ChannelContext, build_channels, compute_channels

    channels = build_channels(settings, ChannelContext(tokenizer))
    assert list(channels) == ["hints", "pairs", "length"]
    grpo = torch.tensor(0.25)
    out = compute_channels(model, make_grpo_batch(tokenizer, 2, with_sites=False), channels, grpo_loss=grpo)
    torch.testing.assert_close(out.total, grpo + 0.5 * out.losses["length"])
    m = out.metrics()
    assert m["channels/length"] > 0 and m["channels/length/weight"] == 0.5 and m["channels/length/calls"] == 1
    assert "channels/length/calls" in count_keys()  # summed over ranks
    assert channels["length"].state_dict() == {"calls": 1}

    # the step table, its legend and the plot
    from trainer_client.metrics import MetricsCallback, channel_curves, columns

    assert ("length", "channels/length", 8, ".4f") in columns() and ("calls", "channels/length/calls", 5, "g") in columns()
    assert total_formula() == "total = grpo + alpha*hints + beta*pairs + gamma*length"
    losses, inputs = channel_curves()
    assert ("channels/length", "4 length") in losses and ("channels/length/calls", "calls (length)") in inputs
    import tempfile
    from types import SimpleNamespace

    with tempfile.TemporaryDirectory() as tmp:
        cb = MetricsCallback(f"{tmp}/m.jsonl")
        cb.on_log(None, SimpleNamespace(global_step=1, is_world_process_zero=True), None,
                  logs={"reward": 0.5, **m})
    printed = capsys.readouterr().out
    assert "length" in printed.splitlines()[0].split() and "gamma*length" in printed

    # the ablation arms and the command's choices
    from trainer_client.ablate import arms
    from trainer_client.cli import main

    assert "grpo+length" in arms() and arms()["all"].channels == {"hints", "pairs", "length"}
    overrides = arms()["grpo+length"].overrides({"hints": 0.1, "pairs": 0.05, "length": 0.7})
    assert "loss.length.weight=0.7" in overrides and "loss.hints.weight=0.0" in overrides
    with pytest.raises(SystemExit):
        main(["ablate", "--help"])
    assert "grpo+length" in capsys.readouterr().out
    with pytest.raises(ValueError, match="already registered"):
        register_channel(type("Other", (LengthChannel,), {}))
