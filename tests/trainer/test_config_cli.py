"""Config loading, overrides, GRPOConfig validation, CLI parsing."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

import trainer_client
from trainer_client.cli import build_parser, config_from_args, main
from trainer_client.config import apply_overrides, build_grpo_config, load_config

CONFIGS = Path(trainer_client.__file__).parent / "configs"


def test_overrides_parse_yaml_values():
    raw = apply_overrides({"grpo": {"max_steps": 3}}, ["grpo.max_steps=7", "grpo.learning_rate=1e-5",
                                                      "env.urls=[http://a:1, http://b:2]", "output.plot=false"])
    assert raw["grpo"] == {"max_steps": 7, "learning_rate": 1e-5}
    assert raw["env"]["urls"] == ["http://a:1", "http://b:2"] and raw["output"]["plot"] is False
    with pytest.raises(ValueError):
        apply_overrides({}, ["nokey"])


def test_cpu_smoke_config_builds_grpo_config(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"instance_id": "a"}\n{"instance_id": "b"}\n')
    args = build_parser().parse_args(["train", "--config", str(CONFIGS / "cpu_smoke.yaml"), "--env-url", "http://x:1",
                                      "--env-url", "http://y:2", "--tasks", str(tasks), "--max-steps", "5",
                                      "--output-dir", str(tmp_path / "o"), "--set", "grpo.learning_rate=3e-4"])
    cfg = config_from_args(args)
    assert cfg.env.urls == ["http://x:1", "http://y:2"]
    assert cfg.instance_ids() == ["a", "b"]
    grpo = build_grpo_config(cfg)
    assert (grpo.max_steps, grpo.learning_rate, grpo.output_dir) == (5, 3e-4, str(tmp_path / "o"))
    assert grpo.use_vllm is False and grpo.bf16 is False and grpo.num_generations == 2


def test_unknown_keys_are_rejected(tmp_path):
    with pytest.raises(ValidationError):
        load_config(CONFIGS / "cpu_smoke.yaml", ["env.nope=1"])
    bad = load_config(CONFIGS / "cpu_smoke.yaml", ["grpo.not_a_field=1"])
    with pytest.raises(ValueError, match=r"^invalid config: grpo\.not_a_field: not a setting"):
        build_grpo_config(bad)  # named before TRL sees it (TRL's own TypeError was a traceback)
    typo = load_config(CONFIGS / "cpu_smoke.yaml", ["grpo.max_stepss=1"])
    with pytest.raises(ValueError, match=r"grpo\.max_stepss: not a setting \(did you mean grpo\.max_steps\?\)"):
        build_grpo_config(typo)


def test_values_of_the_wrong_type_are_one_line_naming_the_key(capsys):
    """The grpo section is checked against the types of TRL's GRPOConfig fields; the loss section is the
    channels' typed settings; each wrong value is one line naming its key, on the command."""
    bad = load_config(CONFIGS / "cpu_smoke.yaml", ["grpo.learning_rate=fast", "grpo.max_steps=2.5"])
    with pytest.raises(ValueError) as err:
        build_grpo_config(bad)
    assert str(err.value).startswith("invalid config: ") and "\n" not in str(err.value)
    assert sorted(str(err.value).removeprefix("invalid config: ").split("; ")) == [
        "grpo.learning_rate: Input should be a valid number, unable to parse string as a number (got 'fast')",
        "grpo.max_steps: Input should be a valid integer, got a number with a fractional part (got 2.5)"]
    ok = build_grpo_config(load_config(CONFIGS / "cpu_smoke.yaml", ["grpo.learning_rate=1e-5", 'grpo.save_strategy="no"']))
    assert ok.learning_rate == 1e-5 and ok.save_strategy == "no"
    base = ["train", "--config", str(CONFIGS / "cpu_smoke.yaml"), "--set", "data.instance_ids=[t]", "--dry-run"]
    for setting, line in (("grpo.learning_rate=fast", "grpo.learning_rate: Input should be a valid number"),
                          ("loss.alpha=0.3", "invalid config: loss.alpha: moved to loss.hints.weight"),
                          ("loss.hints.wieght=1", "loss.hints.wieght: not a setting (did you mean loss.hints.weight?)"),
                          ("loss.pairs.loss=ipo", "loss.pairs.loss: Input should be 'dpo' or 'simpo'"),
                          ("max_steps=2", "max_steps: not a setting (did you mean grpo.max_steps?)")):
        assert main([*base, "--set", setting]) != 0
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and line in err[0], (setting, err)


def test_help_lists_train_and_replay(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "train" in out and "replay" in out
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "--env-url" in capsys.readouterr().out


def test_dry_run(capsys, tmp_path):
    assert main(["train", "--config", str(CONFIGS / "cpu_smoke.yaml"), "--dry-run",
                 "--set", "data.instance_ids=[t1]", "--output-dir", str(tmp_path)]) == 0
    assert "GRPOConfig ok" in capsys.readouterr().out


def test_a_run_without_env_server_is_a_setup_error(capsys):
    """The library raises a typed error; the CLI prints it on one line and exits 1."""
    from trainer_client.run import RunSetupError, train

    with pytest.raises(RunSetupError, match="no env server"):
        train(load_config(CONFIGS / "cpu_smoke.yaml", ["data.instance_ids=[t1]"]))
    assert main(["train", "--config", str(CONFIGS / "cpu_smoke.yaml"), "--set", "data.instance_ids=[t1]"]) == 1
    assert "trainer-client train: error: no env server" in capsys.readouterr().err


def test_gpu_config_validates_or_skips():
    """Constructing the GPU config needs a CUDA device (bf16, vLLM); skipped cleanly without one."""
    cfg = load_config(CONFIGS / "gpu_qwen.yaml", ["data.instance_ids=[t]"])
    assert cfg.grpo["use_vllm"] is True and cfg.grpo["vllm_mode"] in ("colocate", "server")
    assert cfg.model.name_or_path.startswith("Qwen/")
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU: GPU config checked statically only")
    grpo = build_grpo_config(cfg)
    assert grpo.use_vllm and grpo.bf16 and grpo.max_completion_length == 16384
