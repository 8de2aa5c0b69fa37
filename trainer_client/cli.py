"""`trainer-client`: GRPO training against env server replicas, warm start, and `replay`.

    trainer-client train --config trainer_client/configs/cpu_smoke.yaml \\
        --env-url http://127.0.0.1:8000 --set grpo.max_steps=3

Multi-process (DDP or FSDP; docs/deploy.md "Multi-process"): `accelerate launch --num_processes N
[--config_file ACCELERATE.yaml] -m trainer_client.cli train ...`.

A replica started with a token (`ENV_SERVER_TOKEN`) needs it here too: `--env-token TOKEN`,
the `ENV_SERVER_TOKEN` variable (the flag wins), or `?token=` on one `--env-url`; it is sent
as `Authorization: Bearer <token>` and never printed.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from contextlib import ExitStack
from pathlib import Path

from pydantic import SecretStr

from trainer_client.config import RunConfig, load_config, load_tokenizer, model_path
from env_client import TOKEN_ENV, EnvAuthError, NoLiveReplicaError, resolve_token, split_token

__all__ = ["build_parser", "main", "train"]


def _add_run_args(p: argparse.ArgumentParser, tasks_help: str) -> None:
    """The arguments every run command shares; `config_from_args` reads them."""
    p.add_argument("--config", required=True, metavar="FILE", help="run config (YAML)")
    p.add_argument("--env-url", action="append", default=[], metavar="URL",
                   help="env server replica (repeatable); replaces env.urls of the config")
    p.add_argument("--env-token", metavar="TOKEN",
                   help=f"bearer token of the env server replicas (default: ${TOKEN_ENV}; a ?token= on an "
                   "--env-url wins for that replica)")
    p.add_argument("--tasks", metavar="FILE", help=tasks_help)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="override any config key, e.g. grpo.learning_rate=1e-5 or loss.alpha=0.1 (repeatable)")


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="run GRPO training against the env server",
        description="Train a policy with GRPO (TRL GRPOTrainer + environment_factory) on SWE tasks served by "
        "one or more env server replicas. The YAML config maps to GRPOConfig (section `grpo`) plus our own "
        "options; see trainer_client/config.py.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  trainer-client train --config trainer_client/configs/cpu_smoke.yaml --env-url http://127.0.0.1:8000\n"
        "  trainer-client train --config gpu_qwen.yaml --env-url http://a:8000 --env-url http://b:8000 "
        "--set grpo.learning_rate=5e-7",
    )
    _add_run_args(p, tasks_help="task file whose instance_ids form the dataset (data.tasks)")
    p.add_argument("--output-dir", metavar="DIR", help="checkpoints, metrics.jsonl, metrics.png (grpo.output_dir)")
    p.add_argument("--max-steps", type=int, metavar="N", help="optimizer steps (grpo.max_steps)")
    p.add_argument("--resume", action="store_true", help="resume from the last checkpoint in the output dir")
    p.add_argument("--dry-run", action="store_true",
                   help="validate the config, print it and its per-device memory estimate (trainer_client/memory.py); "
                   "exit 1 when the estimate exceeds the device memory; do not train")
    p.add_argument("--device-memory-gb", type=float, metavar="GB",
                   help="memory of one trainer device for --dry-run (default: hardware.device_memory_gb)")
    p.add_argument("--num-devices", type=int, metavar="N",
                   help="trainer devices for --dry-run (default: hardware.num_devices or the accelerate config's)")
    p.set_defaults(func=_run_train)


def _add_warmstart(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "warmstart",
        help="SFT the config's model on demonstrations recorded through the env server",
        description="Record, per task, a demonstration built from the gold patch (str_replace per hunk, then "
        "submit; kept when the hidden tests reward it) and a lazy one (submit at once), through the env "
        "server, and fine-tune the config's model on them: GRPO then starts from a policy that calls tools "
        "and whose groups mix rewarded and unrewarded rollouts. See trainer_client/warmstart.py.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n"
        "  trainer-client warmstart --config trainer_client/configs/cpu_smoke.yaml --env-url http://127.0.0.1:8000 "
        "--tasks tasks.jsonl --out runs/warm\n"
        "  trainer-client train ... --set model.name_or_path=runs/warm",
    )
    _add_run_args(p, tasks_help="task file with the gold patches (data.tasks)")
    p.add_argument("--out", required=True, metavar="DIR", help="where the fine-tuned model is saved")
    p.add_argument("--steps", type=int, default=150, metavar="N", help="SFT steps (full batch; default 150)")
    p.add_argument("--lr", type=float, default=1e-2, metavar="X", help="AdamW learning rate (default 1e-2)")
    p.add_argument("--no-lazy", action="store_true", help="gold demonstrations only (no lazy submit)")
    p.add_argument("--stumble", action="store_true",
                   help="also a gold demonstration that starts with a failing view (error sites in the rollouts)")
    p.add_argument("--stages", type=lambda v: tuple(int(x) for x in v.split(",") if x), default=(), metavar="N,M",
                   help="SFT steps at which a snapshot is also saved, in OUT/stage-N (e.g. local teachers of "
                   "different training stages)")
    p.set_defaults(func=_run_warmstart, output_dir=None, max_steps=None)


def _run_warmstart(args: argparse.Namespace) -> int:
    from trainer_client.warmstart import warmstart

    warmstart(config_from_args(args), args.out, steps=args.steps, lr=args.lr, lazy=not args.no_lazy,
              stumble=args.stumble, stages=args.stages)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainer-client", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_train(sub)
    _add_warmstart(sub)
    from trainer_client.ablate import add_subcommand as _add_ablate

    _add_ablate(sub)
    try:  # issue 7's replay subcommand, when that module exists
        replay_cli = importlib.import_module("trainer_client.replay.cli")
    except ImportError:
        replay_cli = None
    if replay_cli is not None and hasattr(replay_cli, "add_subcommands"):
        replay_cli.add_subcommands(sub)
    return parser


def config_from_args(args: argparse.Namespace) -> RunConfig:
    overrides = list(args.overrides)
    if args.env_url:
        overrides.append(f"env.urls={args.env_url!r}".replace("'", '"'))
    if args.tasks:
        overrides.append(f"data.tasks={Path(args.tasks).resolve()}")
    if args.output_dir:
        overrides.append(f"grpo.output_dir={args.output_dir}")
    if args.max_steps is not None:
        overrides.append(f"grpo.max_steps={args.max_steps}")
    cfg = load_config(args.config, overrides)
    token = resolve_token(args.env_token)
    if token:
        cfg.env.client = cfg.env.client.model_copy(update={"token": SecretStr(token)})
    return cfg


def _run_train(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    if args.dry_run:
        return _dry_run(cfg, args)
    train(cfg, resume=args.resume)
    return 0


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


def _dry_run(cfg: RunConfig, args: argparse.Namespace) -> int:
    """Print the config, validate its GRPOConfig, print the memory estimate; 1 when it does not fit."""
    from trainer_client.config import build_grpo_config, build_peft_config
    from trainer_client.memory import estimate_for_config

    urls = [split_token(u)[0] for u in cfg.env.urls]  # a ?token= is never printed (nor is env.client.token)
    print(cfg.model_copy(update={"env": cfg.env.model_copy(update={"urls": urls})}).model_dump_json(indent=2))
    try:
        grpo, how = build_grpo_config(cfg), ""
    except ValueError as exc:  # bf16 / GPU fields on a machine without CUDA: validate the rest
        if "gpu" not in str(exc).lower():
            raise
        grpo, how = build_grpo_config(cfg, bf16=False, use_cpu=True), " (checked with bf16=False, use_cpu=True: no GPU here)"
    print(f"GRPOConfig ok{how}: output_dir={grpo.output_dir} max_steps={grpo.max_steps} use_vllm={grpo.use_vllm}")
    if cfg.peft is not None:
        print(f"peft_config ok: {type(build_peft_config(cfg)).__name__} r={cfg.peft.r} targets={cfg.peft.target_modules}")
    try:
        estimate = estimate_for_config(cfg, device_memory_gb=args.device_memory_gb, num_devices=args.num_devices)
    except ValueError as exc:  # a model whose shape is unknown here
        print(f"memory estimate: not computed: {exc}")
        return 0
    print(estimate.table())
    if not estimate.fits:
        print(f"trainer-client: error: the config does not fit: {estimate.table().splitlines()[-1]}", file=sys.stderr)
        return 1
    return 0


def train(cfg: RunConfig, resume: bool = False):
    """Run training for a validated config; returns the trainer (its log history holds the metrics)."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    from datasets import Dataset

    from trainer_client.config import build_grpo_config, build_loss_config, build_peft_config
    from trainer_client.distributed import allow_cpu_fsdp, write_rank_report
    from trainer_client.environment import make_environment_class
    from trainer_client.metrics import MetricsCallback, plot_metrics, quiet_progress
    from trainer_client.trainer import SweGRPOTrainer

    if not cfg.env.urls:
        raise SystemExit("trainer-client: no env server: pass --env-url or set env.urls")
    grpo = build_grpo_config(cfg)
    if grpo.use_cpu:
        allow_cpu_fsdp()  # an FSDP accelerate config on CPU ranks shards instead of falling back to DDP
    loss_config = build_loss_config(cfg)
    if cfg.replay.enabled and loss_config.beta <= 0:
        raise SystemExit("trainer-client: replay.enabled needs loss.beta > 0 (channel 3 is what the pairs feed)")
    rows = [{"prompt": [{"role": "user", "content": cfg.data.prompt}], "instance_id": iid}
            for iid in cfg.instance_ids()] * cfg.data.repeat
    env_cls = make_environment_class(cfg.env.urls, cfg.env.client, reset_keys=cfg.env.reset_keys,
                                     auto_submit=cfg.env.auto_submit, max_output_chars=cfg.env.max_output_chars,
                                     offset=grpo.process_index)  # ranks start their sessions on different replicas
    jsonl = Path(cfg.output.metrics_jsonl or Path(grpo.output_dir) / "metrics.jsonl")
    stack = ExitStack()
    try:
        live = None
        if cfg.replay.enabled and grpo.process_index == 0:  # one loop per run; every rank gets its pairs
            from trainer_client.replay.live import open_live_replay

            live = stack.enter_context(open_live_replay(cfg, Path(grpo.output_dir)))
        env_cls.runtime.run(env_cls.runtime.pool.connect())  # a refused token fails here, before the model loads
        if grpo.process_index == 0:
            capacity = env_cls.runtime.run(env_cls.runtime.pool.capacity())
            print(capacity_report(capacity, grpo, cfg.env.client.capacity_wait_s), flush=True)
        trainer = SweGRPOTrainer(
            model=model_path(cfg), processing_class=load_tokenizer(cfg), args=grpo,
            train_dataset=Dataset.from_list(rows), environment_factory=env_cls, loss_config=loss_config,
            callbacks=[MetricsCallback(jsonl)], peft_config=build_peft_config(cfg),
            live_replay=live, live_pairs=cfg.replay.enabled,
        )
        quiet_progress(trainer)  # one short line per step (MetricsCallback), not the raw log dicts too
        if grpo.process_index == 0:  # the run's resolved config (secrets masked), next to its metrics
            Path(grpo.output_dir).mkdir(parents=True, exist_ok=True)
            (Path(grpo.output_dir) / "config.json").write_text(cfg.model_dump_json(indent=2))
        trainer.train(resume_from_checkpoint=True if resume else None)
        trainer.save_model(str(Path(grpo.output_dir) / "final"))
        state = trainer._channel_state
        if live is not None and state is not None:  # the pairs channel 3 trained on, with their provenance
            with open(Path(grpo.output_dir) / "pairs.jsonl", "w", encoding="utf-8") as f:
                f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in state.records)
        if cfg.output.rank_report:
            write_rank_report(trainer, env_cls.runtime.pool, Path(grpo.output_dir) / "ranks")
    finally:
        stack.close()
        env_cls.runtime.close()
    if cfg.output.plot and grpo.process_index == 0:
        png = plot_metrics(jsonl, Path(grpo.output_dir) / "metrics.png")
        if png:
            print(f"metrics: {jsonl}  plot: {png}")
    return trainer


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (EnvAuthError, NoLiveReplicaError) as exc:  # a setup error: one line, no traceback
        print(f"trainer-client: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
