"""`trainer-client replay` / `python -m trainer_client.replay`: traces in, pairs JSONL out."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path

import httpx

from env_client import EnvAuthError, resolve_token, split_token

from .agreement import AgreementRule
from .config import ReplayConfigError, TeachersFile, load_teachers
from .gating import GatingConfig
from .local import SERVE_PRESETS, LocalServeOptions, LocalTeachers, parse_local_teacher
from .models import FrozenState
from .normalize import NormalizeConfig
from .pair_mining import ReplayOptions, ReplayResult, replay
from .traces import TraceReadError, env_client, fetch_trace, read_trace_files


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_argument_group("traces (one or both)")
    src.add_argument("--traces", nargs="+", default=[], metavar="JSONL",
                     help="exported trace files: one state(t) record per line")
    src.add_argument("--env-url", help="env server base URL to fetch traces from (a ?token= is sent as the header)")
    src.add_argument("--episode", action="append", default=[], metavar="ID",
                     help="episode id to fetch from --env-url (repeatable)")
    src.add_argument("--env-token", metavar="TOKEN", help="the env server's bearer token (default: --env-token-env)")
    src.add_argument("--env-token-env", default="ENV_SERVER_TOKEN", metavar="VAR",
                     help="environment variable holding the env server's bearer token (default: %(default)s)")
    p.add_argument("--teachers", metavar="FILE",
                   help="teachers YAML (default: the packaged three teachers of the design docs)")
    loc = p.add_argument_group("local teachers (instead of --teachers: no API keys, price 0)")
    loc.add_argument("--local-teacher", action="append", default=[], metavar="[NAME=]CHECKPOINT",
                     help="serve this checkpoint directory on loopback and use it as a teacher (repeatable)")
    loc.add_argument("--local-serve", choices=sorted(SERVE_PRESETS), default="transformers",
                     help="server per checkpoint: transformers serve (CPU) or vllm (GPU) (default: %(default)s)")
    loc.add_argument("--local-device", default="cpu", help="device for transformers serve (default: %(default)s)")
    loc.add_argument("--local-threads", type=int, metavar="N", help="CPU threads per local server")
    loc.add_argument("--local-max-tokens", type=int, default=256, metavar="N",
                     help="output cap per local teacher answer (default: %(default)s)")
    loc.add_argument("--local-log-dir", metavar="DIR", help="keep the local servers' logs here")
    p.add_argument("--out", required=True, metavar="JSONL", help="normalized pairs output")
    p.add_argument("--max-usd", type=float, default=float("inf"), metavar="X",
                   help="hard ceiling on teacher spend (default: none)")
    p.add_argument("--gate", choices=["all", "error_sites", "entropy", "error_sites_or_entropy"],
                   default="all", help="which steps to query (default: all)")
    p.add_argument("--entropy-threshold", type=float, default=1.0)
    p.add_argument("--min-agree", type=int, default=2, help="teachers that must agree (default: 2)")
    p.add_argument("--no-dedup", action="store_true", help="keep duplicate pairs")
    p.add_argument("--raw-out", metavar="JSONL", help="also write the pairs before normalization")
    p.add_argument("--calls-out", metavar="JSONL", help="also write one record per teacher call")
    p.add_argument("--summary-out", metavar="JSON", help="also write the summary as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("-v", "--verbose", action="store_true", help="log retries")


def add_subcommands(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `replay` on the trainer-client CLI; the parsed args carry `func(args) -> int`."""
    p = subparsers.add_parser(
        "replay", help="replay frozen traces to N teachers and mine preference pairs",
        description=__doc__,
    )
    add_arguments(p)
    p.set_defaults(func=run)
    return p


async def _load_states(args: argparse.Namespace) -> list[FrozenState]:
    states = read_trace_files(args.traces)
    if args.episode:
        if not args.env_url:
            raise ReplayConfigError("--episode needs --env-url")
        base, url_token = split_token(args.env_url)
        async with env_client(url_token or resolve_token(args.env_token, args.env_token_env)) as client:
            for ep in args.episode:
                states.extend(await fetch_trace(client, base, ep))
    if not states:
        raise ReplayConfigError("no traces: give --traces FILE and/or --env-url URL --episode ID")
    return states


def _write_jsonl(path: str, rows) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(row.model_dump_json() + "\n")


async def _run(args: argparse.Namespace) -> ReplayResult:
    teachers = load_teachers(args.teachers)
    return await _replay(args, await _load_states(args), teachers)


def _local_teachers(args: argparse.Namespace) -> LocalTeachers:
    if args.teachers:
        raise ReplayConfigError("--teachers and --local-teacher are alternatives: give one of them")
    options = LocalServeOptions(serve=args.local_serve, device=args.local_device, threads=args.local_threads,
                                max_tokens=args.local_max_tokens, log_dir=args.local_log_dir)
    return LocalTeachers([parse_local_teacher(v) for v in args.local_teacher], options)


def _run_local(args: argparse.Namespace) -> ReplayResult:
    """Traces first (a bad trace fails before any server starts), then the local servers."""
    local = _local_teachers(args)
    states = asyncio.run(_load_states(args))
    with local:
        print("local teachers: " + ", ".join(f"{s.name} at {s.base_url} (up in {s.startup_s:.1f}s)"
                                             for s in local.servers), file=sys.stderr)
        return asyncio.run(_replay(args, states, local.teachers))


async def _replay(args: argparse.Namespace, states: list[FrozenState], teachers: TeachersFile) -> ReplayResult:
    opts = ReplayOptions(
        max_total_usd=args.max_usd,
        gating=GatingConfig(mode=args.gate, entropy_threshold=args.entropy_threshold),
        rule=AgreementRule(min_agree=args.min_agree),
        normalize=NormalizeConfig(dedup=not args.no_dedup),
    )
    from tqdm import tqdm  # the train extra's: `trainer-client evaluate` runs on the client extra alone

    bar = tqdm(total=len(states), unit="step", desc="replay", file=sys.stderr,
               disable=True if args.no_progress else None)
    pairs = 0

    def on_step(step, budget) -> None:
        nonlocal pairs
        pairs += bool(step.verdict and step.verdict.chosen)
        bar.set_postfix(usd=f"{budget.spent:.4f}", pairs=pairs, refresh=False)
        bar.update(1)

    try:
        return await replay(states, teachers, opts, on_step=on_step)
    finally:
        bar.close()


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        result = _run_local(args) if args.local_teacher else asyncio.run(_run(args))
    except (ReplayConfigError, TraceReadError, EnvAuthError, httpx.HTTPError, OSError) as exc:
        # a refused token: this command's flags, not the client library's `token=` (EnvAuthError.HINT)
        text = EnvAuthError.reword(str(exc), f"pass --env-token or set {args.env_token_env}")
        print(f"replay: error: {text}", file=sys.stderr)
        return 2
    _write_jsonl(args.out, result.pairs)
    if args.raw_out:
        _write_jsonl(args.raw_out, result.pairs_raw)
    if args.calls_out:
        _write_jsonl(args.calls_out, result.calls)
    if args.summary_out:
        Path(args.summary_out).write_text(json.dumps(result.summary.model_dump(), indent=2))
    print(result.summary.render())
    print(f"wrote {len(result.pairs)} pairs to {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer_client.replay", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))
