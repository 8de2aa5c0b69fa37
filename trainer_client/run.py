"""One training run as library code: its config from the run arguments, and `train`.

`trainer-client train` (cli.py), `trainer-client ablate` (ablate.py: one `train` process per
arm and seed) and tests call these. Nothing here prints usage or exits: a run that cannot start
as configured raises `RunSetupError`, whose message says what to change; cli.py turns it into
an error line and an exit code.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

from pydantic import SecretStr, ValidationError

from env_client import resolve_token
from env_client.urls import http_base
from trainer_client.config import RunConfig, config_error, load_config, load_tokenizer, model_path

__all__ = ["RunSetupError", "capacity_report", "name_the_base_model", "resolve_config", "train"]


class RunSetupError(ValueError):
    """A run cannot start, or cannot produce anything, with the config and inputs it was given
    (no env server, no step budget, no task file, no usable demonstration ...). The message says
    what is missing and how to supply it; `trainer-client` prints it and exits with 1."""


def resolve_config(config: str | Path, overrides: Sequence[str] = (), *, env_urls: Sequence[str] = (),
                   tasks: str | Path | None = None, output_dir: str | Path | None = None,
                   max_steps: int | None = None, env_token: str | None = None) -> RunConfig:
    """The run config as `trainer-client train` resolves it: the YAML file, then `overrides`
    (KEY=VALUE, in order), then each given run argument, which replaces its key (env.urls,
    data.tasks, grpo.output_dir, grpo.max_steps). The env servers' token: `env_token`, else
    $ENV_SERVER_TOKEN; kept as a secret (never dumped in clear). A config that does not validate
    raises `RunSetupError` with one line (`config_error`)."""
    overrides = list(overrides)
    if env_urls:
        overrides.append(f"env.urls={list(env_urls)!r}".replace("'", '"'))
    if tasks:
        overrides.append(f"data.tasks={Path(tasks).resolve()}")
    if output_dir:
        overrides.append(f"grpo.output_dir={output_dir}")
    if max_steps is not None:
        overrides.append(f"grpo.max_steps={max_steps}")
    try:
        cfg = load_config(config, overrides)
    except ValidationError as exc:  # one line naming the key, not pydantic's multi-line report
        raise RunSetupError(config_error(exc)) from None
    except ValueError as exc:  # the config file cannot be read, an override is malformed
        raise RunSetupError(str(exc)) from None
    token = resolve_token(env_token)
    if token:
        cfg.env.client = cfg.env.client.model_copy(update={"token": SecretStr(token)})
    return cfg


def capacity_report(capacity: dict[str, int | None], grpo, wait_s: float) -> str:
    """One or two lines comparing the replicas' advertised session limits with the run's concurrent rollouts.

    Concurrent rollouts = GRPOConfig.generation_batch_size (per_device_train_batch_size x processes
    x steps_per_generation): TRL generates one generation batch per optimizer step, and every
    rollout of it holds one env session (environment_factory's pool) from its reset to its reward.
    """
    processes = max(1, grpo.world_size)
    concurrent = grpo.generation_batch_size
    per_process = concurrent // processes
    how = (f"generation_batch_size {concurrent} = per_device_train_batch_size {grpo.per_device_train_batch_size} x "
           f"{processes} process(es) x steps_per_generation {grpo.steps_per_generation}")
    known = {u: v for u, v in capacity.items() if v is not None}
    if not known:
        return f"env capacity: not advertised by the replicas; the run holds up to {concurrent} sessions at once ({how})"
    total = sum(known.values())
    head = (f"env capacity: {len(known)} replica(s) advertise {total} sessions "
            f"({', '.join(f'{u}={v}' for u, v in known.items())}); concurrent rollouts: {concurrent} ({how})")
    if len(known) < len(capacity):
        head += f"; {len(capacity) - len(known)} replica(s) do not advertise a limit"
    if total >= concurrent:
        return head + ": ok"
    lines = [head + f": SHORT by {concurrent - total}: rollouts beyond {total} wait for a free slot "
             f"(at most {wait_s:g} s each, env.client.capacity_wait_s)"]
    if per_process > total:
        lines.append(f"env capacity: WARNING: one process's own batch ({per_process} rollouts) exceeds every slot "
                     f"there is ({total}): its excess rollouts can only get a slot after capacity_wait_s and fail; "
                     "add replicas, raise --max-sessions, or lower per_device_train_batch_size/steps_per_generation")
    return "\n".join(lines)


def name_the_base_model(card: Path, base: str, final: Path) -> None:
    """TRL's model card names a base model only when it is a hub id: for a local directory it writes
    "a fine-tuned version of [None](https://huggingface.co/None)" and `model="None"`. Name the local
    directory instead (no hub link), and the run's final model in the quick start."""
    if not card.exists():
        return
    text = card.read_text()
    fixed = text.replace("[None](https://huggingface.co/None)", f"the local model `{base}`")
    fixed = fixed.replace('model="None"', f'model="{final}"').replace("base_model: None\n", "")
    if fixed != text:
        card.write_text(fixed)


def train(cfg: RunConfig, resume: bool = False):
    """Run training for a validated config; returns the trainer (its log history holds the metrics).

    Raises `RunSetupError` before anything starts when the config names no env server, or turns
    the replay loop on without channel 3's weight."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    from datasets import Dataset

    from trainer_client.config import build_grpo_config, build_peft_config
    from trainer_client.distributed import allow_cpu_fsdp, write_rank_report
    from trainer_client.environment import make_environment_class
    from trainer_client.console import Heartbeat, RunConsole
    from trainer_client.metrics import MetricsCallback, plot_metrics, quiet_progress
    from trainer_client.trainer import SweGRPOTrainer

    if not cfg.env.urls:
        raise RunSetupError("no env server: pass --env-url or set env.urls")
    try:
        grpo = build_grpo_config(cfg)
        instance_ids = cfg.instance_ids()
    except (ValueError, OSError) as exc:  # a grpo key TRL does not have, no tasks, an unreadable task file
        raise RunSetupError(str(exc)) from None
    if grpo.use_cpu:
        allow_cpu_fsdp()  # an FSDP accelerate config on CPU ranks shards instead of falling back to DDP
    if cfg.replay.enabled and cfg.loss.pairs.weight <= 0:
        raise RunSetupError("replay.enabled needs loss.pairs.weight > 0 (the pairs channel is what the loop feeds)")
    rows = [{"prompt": [{"role": "user", "content": cfg.data.prompt}], "instance_id": iid}
            for iid in instance_ids] * cfg.data.repeat
    env_cls = make_environment_class(cfg.env.urls, cfg.env.client, reset_keys=cfg.env.reset_keys,
                                     auto_submit=cfg.env.auto_submit, max_output_chars=cfg.env.max_output_chars,
                                     offset=grpo.process_index,  # ranks start their sessions on different replicas
                                     suspicion_policy=cfg.env.suspicion_policy, profile=cfg.env.profile)
    jsonl = Path(cfg.output.metrics_jsonl or Path(grpo.output_dir) / "metrics.jsonl")
    stack = ExitStack()
    try:
        live = None
        if cfg.replay.enabled and grpo.process_index == 0:  # one loop per run; every rank gets its pairs
            from trainer_client.replay.during_training import open_live_replay

            live = stack.enter_context(open_live_replay(cfg, Path(grpo.output_dir)))
        env_cls.runtime.run(env_cls.runtime.pool.connect())  # a refused token fails here, before the model loads
        if grpo.process_index == 0:
            capacity = env_cls.runtime.run(env_cls.runtime.pool.capacity())
            print(capacity_report(capacity, grpo, cfg.env.client.capacity_wait_s), flush=True)
        # a new run in a used output directory starts its metrics file afresh; a resumed one appends
        callbacks = [MetricsCallback(jsonl, fresh=not resume and grpo.process_index == 0)]
        heartbeat = Heartbeat(every_s=cfg.output.heartbeat_s)
        callbacks.append(heartbeat)
        held_out = None
        if cfg.eval.tasks:
            from trainer_client.eval_during_training import HeldOutEvalCallback

            held_out = HeldOutEvalCallback(cfg.eval, cfg.env.urls, cfg.env.client, grpo.output_dir,
                                           cfg.data.prompt, cfg.env.max_output_chars)
            callbacks.insert(0, held_out)  # its eval/* metrics join the step's record before it is written
        trainer = SweGRPOTrainer(
            model=model_path(cfg), processing_class=load_tokenizer(cfg), args=grpo,
            train_dataset=Dataset.from_list(rows), environment_factory=env_cls, loss_settings=cfg.loss,
            callbacks=callbacks, peft_config=build_peft_config(cfg),
            live_replay=live, live_pairs=cfg.replay.enabled,
        )
        heartbeat.trainer = trainer
        if grpo.process_index == 0:
            samples = Path(grpo.output_dir) / "samples.jsonl"
            if not resume and samples.exists():
                samples.unlink()  # a new run in a used output directory starts it afresh, like metrics.jsonl
            trainer.run_console = RunConsole(grpo.output_dir, cfg.output.sample_every)
        if held_out is not None:
            if trainer.is_fsdp_enabled or trainer.is_deepspeed_enabled:
                raise RunSetupError("eval.tasks (held-out evaluation during training) generates on the main "
                                    "process only, which a sharded model (FSDP, DeepSpeed) cannot do: evaluate the "
                                    "saved checkpoints with `trainer-client evaluate --model CHECKPOINT` instead")
            held_out.trainer = trainer
        quiet_progress(trainer)  # one table row per step (MetricsCallback), not the raw log dicts too
        if grpo.process_index == 0:  # the run's resolved config (secrets masked), next to its metrics
            Path(grpo.output_dir).mkdir(parents=True, exist_ok=True)
            (Path(grpo.output_dir) / "config.json").write_text(cfg.model_dump_json(indent=2))
        trainer.train(resume_from_checkpoint=True if resume else None)
        trainer.save_model(str(Path(grpo.output_dir) / "final"))
        if grpo.process_index == 0:
            name_the_base_model(Path(grpo.output_dir) / "README.md", model_path(cfg), Path(grpo.output_dir) / "final")
        pairs = (trainer._channels or {}).get("pairs")
        if live is not None and pairs is not None:  # the pairs the pairs channel trained on, with their provenance
            with open(Path(grpo.output_dir) / "pairs.jsonl", "w", encoding="utf-8") as f:
                f.writelines(r.model_dump_json() + "\n" for r in pairs.records)
        if cfg.output.rank_report:
            write_rank_report(trainer, env_cls.runtime.pool, Path(grpo.output_dir) / "ranks")
    finally:
        stack.close()
        env_cls.runtime.close()
    if cfg.output.plot and grpo.process_index == 0:
        png = plot_metrics(jsonl, Path(grpo.output_dir) / "metrics.png")
        if png:
            print(f"metrics: {jsonl}  plot: {png}")
    if grpo.process_index == 0:
        print(traces_line(cfg.env.urls, Path(grpo.output_dir) / "samples.jsonl"), flush=True)
    return trainer


def traces_line(urls: list[str], samples: Path) -> str:
    """The run's last line: where its episodes' traces are (each on the replica that ran it)."""
    bases = ", ".join(http_base(u) for u in urls)
    kept = f"; {samples} names each sampled episode's trace" if samples.exists() else ""
    return (f"traces: each episode's trace is on the replica that ran it ({bases}): GET <replica>/episodes/"
            f"<episode_id>/trace, or <data-dir>/traces/<episode_id>.jsonl on its disk{kept}")
