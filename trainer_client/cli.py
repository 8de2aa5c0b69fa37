"""`trainer-client`: GRPO training against env server replicas, warm start, `replay` and `evaluate`.

    trainer-client train --config trainer_client/configs/cpu_smoke.yaml \\
        --env-url http://127.0.0.1:8000 --set grpo.max_steps=3

Multi-process (DDP or FSDP; docs/deploy.md "Multi-process"): `accelerate launch --num_processes N
[--config_file ACCELERATE.yaml] -m trainer_client.cli train ...`.

A replica started with a token (`ENV_SERVER_TOKEN`) needs it here too: `--env-token TOKEN`,
the `ENV_SERVER_TOKEN` variable (the flag wins), or `?token=` on one `--env-url`; it is sent
as `Authorization: Bearer <token>` and never printed.

This module only parses arguments, prints errors and picks exit codes (`main`); the commands'
work is library code that raises typed errors: run.py (`train`), warmstart.py and ablate.py.
The `replay` command is replay/cli.py's (its options, errors and exit codes), registered here
and also runnable alone as `python -m trainer_client.replay`.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import sys
from collections.abc import Iterator

from contract.extras import EXTRA_MODULES, missing_extra
from env_client import TOKEN_ENV, EnvAuthError, NoLiveReplicaError, split_token
from trainer_client.ablate import Arm, ablate, arms
from trainer_client.losses.channels import total_formula
from trainer_client.config import RunConfig
from trainer_client.run import RunSetupError, resolve_config, train

__all__ = ["AUTH_HINT", "build_parser", "config_from_args", "main"]

#: what to do about a refused token, in this CLI's words: replaces the client library's remedy
#: (`EnvAuthError.HINT`, which speaks of `token=` / `ClientConfig`) in the errors `main` prints
AUTH_HINT = f"pass --env-token or set {TOKEN_ENV}"


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
                   help="override any config key, e.g. grpo.learning_rate=1e-5 or loss.hints.weight=0.1 (repeatable)")


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
                   help="validate the config, print it and its per-device memory estimate "
                   "(trainer_client/memory_estimate.py); "
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
    p.add_argument("--teachers", type=lambda v: tuple(int(x) for x in v.split(",") if x), default=(), metavar="N,M",
                   help="the same run first trains on the gold demonstrations alone, saving a teacher in "
                   "OUT/teacher-N at each of these steps (local teachers for the replay loop), then the policy "
                   "on every demonstration for --steps more steps")
    p.add_argument("--vocabulary", choices=("auto", "demos", "full"), default="auto",
                   help="LM-head rows trained: 'demos' only the demonstrations' tokens (every other row zeroed; "
                   "a random model only, many times faster on the CPU), 'full' all; 'auto' (default): 'demos' "
                   "for the random smoke model (tiny-qwen), 'full' otherwise")
    p.set_defaults(func=_run_warmstart, output_dir=None, max_steps=None)


def _run_warmstart(args: argparse.Namespace) -> int:
    from trainer_client.warmstart import warmstart

    warmstart(config_from_args(args), args.out, steps=args.steps, lr=args.lr, lazy=not args.no_lazy,
              stumble=args.stumble, stages=args.stages, teachers=args.teachers, vocabulary=args.vocabulary)
    return 0


def _parse_arms(text: str) -> list[Arm]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    known = arms()
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown arm(s) {unknown}; choose from {', '.join(known)}")
    return [known[n] for n in dict.fromkeys(names)]


def _parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds must be integers, comma-separated: {text!r}") from None
    if not seeds:
        raise argparse.ArgumentTypeError("no seeds")
    return list(dict.fromkeys(seeds))


def _add_ablate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "ablate",
        help="train every loss arm x seed on the same budget and report what each channel adds",
        description="Train the loss arms over several seeds on the same tasks, steps and teacher USD ceiling,\n"
        "each as its own `trainer-client train` process under OUT/<arm>/seed<k>/, and report what each\n"
        f"channel adds ({total_formula()}):\n"
        + "".join(f"  {a.name:<12} {a.what}\n" for a in arms().values())
        + "Report: OUT/ablation.md (tables), arms.csv, runs.csv, curves.csv, ablation.json, and ablation.png\n"
        "(reward and pass rate against steps: mean across seeds, min-max band). A crashed run is a failed\n"
        "row with its log tail; a rerun keeps finished runs (--force reruns them).\n\n"
        "CPU vs GPU: with the CPU smoke config (cpu_smoke.yaml, a tiny model, a few steps) this is a smoke\n"
        "ablation: it checks the machinery and measures nothing. The same command with a GPU config\n"
        "(e.g. gpu_qwen.yaml, hundreds of steps, 3+ seeds) is the real measurement. See docs/ablation.md.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  trainer-client ablate --config trainer_client/configs/cpu_smoke.yaml --env-url http://127.0.0.1:8000 \\\n"
        "      --tasks tasks.jsonl --arms grpo,grpo+hints --seeds 0,1 --max-steps 2 --out runs/ablation-smoke\n"
        "  trainer-client ablate --config trainer_client/configs/gpu_qwen.yaml --env-url http://a:8000 \\\n"
        "      --tasks tasks.jsonl --seeds 0,1,2 --max-steps 200 --max-usd 20 --out runs/ablation \\\n"
        "      --set replay.teachers=teachers.yaml",
    )
    _add_run_args(p, tasks_help="task file whose instance_ids form the dataset of every run (data.tasks)")
    p.add_argument("--out", required=True, metavar="DIR", help="runs go to DIR/<arm>/seed<k>/, the report to DIR")
    p.add_argument("--arms", type=_parse_arms, default=list(arms().values()), metavar="A,B",
                   help=f"arms to run, comma-separated (default: all of {','.join(arms())})")
    p.add_argument("--seeds", type=_parse_seeds, default=[0, 1, 2], metavar="S,T",
                   help="seeds (grpo.seed, grpo.data_seed, loss.pairs.seed), comma-separated (default 0,1,2)")
    p.add_argument("--max-steps", type=int, metavar="N", help="optimizer steps of every run (default: grpo.max_steps)")
    p.add_argument("--max-usd", type=float, metavar="X",
                   help="teacher spend ceiling of every replay run (replay.max_total_usd)")
    p.add_argument("--window", type=int, metavar="K",
                   help="final window: the last K logged steps of each run (default: a quarter of the steps, >= 1)")
    p.add_argument("--held-out", metavar="FILE",
                   help="held-out task file (no repository shared with --tasks: `trainer-client tasks split`): every "
                   "run evaluates its policy there before and after training (eval.tasks); the report adds the "
                   "held-out resolved rate per arm, the measure that counts")
    p.add_argument("--force", action="store_true", help="rerun finished runs too")
    p.add_argument("--timeout-s", type=float, metavar="S", help="stop a run after S seconds (a failed run)")
    p.add_argument("--launcher", default=shlex.quote(sys.executable), metavar="CMD",
                   help="what starts `-m trainer_client.cli train` (default: this Python); multi-process: "
                   "'accelerate launch --num_processes 8 --config_file ACCELERATE.yaml'")
    p.set_defaults(func=_run_ablate, output_dir=None)


def _run_ablate(args: argparse.Namespace) -> int:
    runs = ablate(args)
    return 1 if any(r.status != "ok" for r in runs) else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainer-client", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_train(sub)
    _add_warmstart(sub)
    _add_ablate(sub)
    from trainer_client.replay.cli import add_subcommands as _add_replay

    _add_replay(sub)
    from evaluation.cli import add_subcommands as _add_evaluation

    _add_evaluation(sub, serve_checkpoint=_serve_checkpoint)
    return parser


@contextlib.contextmanager
def _serve_checkpoint(checkpoint: str, args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    """`evaluate --model DIR`: the checkpoint behind a local OpenAI-compatible server (the local
    teachers' machinery: `transformers serve` on the CPU, `--serve vllm` on a GPU)."""
    from trainer_client.replay.local import LocalServeOptions, LocalTeachers

    options = LocalServeOptions(serve=args.serve, device=args.device, max_concurrency=args.concurrency)
    with LocalTeachers([checkpoint], options) as local:
        server = local.servers[0]
        print(f"trainer-client evaluate: {checkpoint} served as {server.model} at {server.base_url} "  # ready
              f"({args.serve}, up in {server.startup_s or 0:.1f}s; log {server.log_path})", file=sys.stderr,
              flush=True)
        yield server.base_url, server.model


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The run config of a run command's arguments (`_add_run_args`), resolved like `resolve_config`."""
    return resolve_config(args.config, args.overrides, env_urls=args.env_url, tasks=args.tasks,
                          output_dir=args.output_dir, max_steps=args.max_steps, env_token=args.env_token)


def _run_train(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    if args.dry_run:
        return _dry_run(cfg, args)
    train(cfg, resume=args.resume)
    return 0


def _dry_run(cfg: RunConfig, args: argparse.Namespace) -> int:
    """Print the config, validate its GRPOConfig, print the memory estimate; 1 when it does not fit."""
    from trainer_client.config import build_grpo_config, build_peft_config
    from trainer_client.memory_estimate import estimate_for_config

    urls = [split_token(u)[0] for u in cfg.env.urls]  # a ?token= is never printed (nor is env.client.token)
    print(cfg.model_copy(update={"env": cfg.env.model_copy(update={"urls": urls})}).model_dump_json(indent=2))
    try:
        grpo, how = build_grpo_config(cfg), ""
    except ValueError as exc:  # bf16 / GPU fields on a machine without CUDA: validate the rest
        if "gpu" not in str(exc).lower():
            raise RunSetupError(str(exc)) from None
        try:
            grpo, how = build_grpo_config(cfg, bf16=False, use_cpu=True), " (checked with bf16=False, use_cpu=True: no GPU here)"
        except ValueError as again:
            raise RunSetupError(str(again)) from None
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


# The extra each command needs: training runs need the trainer's (torch, TRL, ...); `replay` its
# progress bar (tqdm) besides the client; `evaluate` with an endpoint and `tasks` run on the client
# extra alone, `evaluate --model CHECKPOINT` serves the checkpoint (torch, transformers).
_NEEDS: dict[str | None, tuple[str, tuple[str, ...]]] = {
    "train": ("train", EXTRA_MODULES["train"]),
    "warmstart": ("train", EXTRA_MODULES["train"]),
    "ablate": ("train", EXTRA_MODULES["train"]),
    "replay": ("train", (*EXTRA_MODULES["client"], "tqdm")),
}
_SERVE_NEEDS = ("train", (*EXTRA_MODULES["client"], "torch", "transformers"))


def _evaluate_model(argv: list[str]) -> str | None:
    """The value of `evaluate`'s --model in `argv` (None when not given)."""
    for i, arg in enumerate(argv):
        if arg == "--model" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--model="):
            return arg.split("=", 1)[1]
    return None


def _missing_extra(argv: list[str]) -> str | None:
    """The one line naming the extra the command of `argv` needs, when it is not installed; looked
    up before the parser is built (building it imports the evaluation harness, which needs httpx)."""
    command = next((a for a in argv if not a.startswith("-")), None)  # trainer-client has no global options
    extra, modules = _NEEDS.get(command, ("client", EXTRA_MODULES["client"]))
    name = f"trainer-client {command}" if command else "trainer-client"
    model = _evaluate_model(argv) if command == "evaluate" else None
    if model is not None and not model.startswith(("http://", "https://")):
        extra, modules = _SERVE_NEEDS  # a checkpoint directory, served by the command itself
        name = "trainer-client evaluate --model CHECKPOINT"
    return missing_extra(name, extra, modules)


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit code. The library code under it raises typed errors and this is
    where they become one line on stderr (no traceback) and an exit code: 1 for a run refused by
    its config or inputs (`RunSetupError`), 2 for env servers that refuse the token or are not up.
    A command's own outcome is its return value (e.g. 1: a dry run that does not fit, a failed
    ablation run); usage errors are argparse's (exit 2). A missing extra: one line naming it, exit 1."""
    problem = _missing_extra(sys.argv[1:] if argv is None else list(argv))
    if problem:
        print(problem, file=sys.stderr)
        return 1
    from evaluation import EvaluationError, TaskSetError  # after the check: it needs the client extra

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (RunSetupError, EvaluationError, TaskSetError) as exc:  # `evaluate` wraps a refused token in these
        print(f"trainer-client {args.command}: error: {EnvAuthError.reword(str(exc), AUTH_HINT)}", file=sys.stderr)
        return 1
    except (EnvAuthError, NoLiveReplicaError) as exc:
        print(f"trainer-client: error: {EnvAuthError.reword(str(exc), AUTH_HINT)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
