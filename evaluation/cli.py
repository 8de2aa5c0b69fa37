"""`trainer-client evaluate` and `trainer-client tasks split|filter` (registered by trainer_client/cli.py).

    trainer-client evaluate --model http://127.0.0.1:8001/v1 --env-url http://127.0.0.1:8000 \\
        --tasks held_out.jsonl --samples 4 --concurrency 8 --out runs/eval

`--model` is an OpenAI-compatible base URL, or a checkpoint directory that the command serves
itself (`transformers serve` on the CPU, `--serve vllm` on a GPU) through the `serve_checkpoint`
hook the trainer's CLI passes in. With an endpoint nothing here needs torch.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ContextManager

from pydantic import ValidationError

from contract import PROFILES, UnknownProfile, get_profile
from contract.extras import install_line
from env_client import TOKEN_ENV, ClientConfig, resolve_token

from .agent import AgentLimits
from .endpoint import ChatEndpoint, EndpointConfig, EndpointError, list_models
from .harness import DEFAULT_CONFIG, HARNESSES, HarnessError, MiniSweAgentHarness, default_python, probe
from .harness import describe as harness_describe
from .run import EvalConfig, EvaluationError, evaluate
from .tasksets import filter_by_pass_rate, split_tasks

__all__ = ["ServeCheckpoint", "add_subcommands", "run_evaluate"]

ServeCheckpoint = Callable[[str, argparse.Namespace], ContextManager[tuple[str, str]]]
"""(checkpoint, args) -> a context manager yielding (base_url, model name) of a served checkpoint."""


def _add_evaluate(sub: argparse._SubParsersAction, serve: ServeCheckpoint | None) -> None:
    p = sub.add_parser(
        "evaluate",
        help="run a model as an agent on a task set and report its resolved rate",
        description="Run a model through the env server as an agent (the trainer's prompt, tool schemas and "
        "tool-output rendering), k samples per task, and report the resolved rate with its 95% interval, "
        "pass@k, per task source and repository, turns, tokens, error kinds, hack signals and cost. Writes "
        "OUT/results.jsonl (resumable: a rerun runs only what is missing), rollouts.jsonl, predictions.jsonl "
        "(SWE-bench tasks), report.md/json/png. See docs/evaluation.md.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  trainer-client evaluate --model http://127.0.0.1:8001/v1 --env-url http://127.0.0.1:8000 \\\n"
        "      --tasks held_out.jsonl --samples 4 --out runs/eval\n"
        "  OPENAI_API_KEY=... trainer-client evaluate --model https://api.example.com/v1 --model-name gpt-x \\\n"
        "      --api-key-env OPENAI_API_KEY --price-in 2.5 --price-out 10 --env-url ... --tasks ... --out ...\n"
        "  trainer-client evaluate --model runs/warm --env-url http://127.0.0.1:8000 --tasks t.jsonl --out runs/e",
    )
    p.add_argument("--model", required=True, metavar="URL|DIR",
                   help="an OpenAI-compatible base URL (http://host:port/v1), or a checkpoint directory to serve")
    p.add_argument("--model-name", metavar="NAME", help="the request's `model` (default: the endpoint's first model)")
    p.add_argument("--label", metavar="NAME", help="model_name_or_path in predictions and the report "
                   "(default: the model name)")
    p.add_argument("--api-key-env", metavar="VAR", help="environment variable holding the endpoint's API key")
    p.add_argument("--env-url", action="append", default=[], required=True, metavar="URL",
                   help="env server replica (repeatable)")
    p.add_argument("--env-token", metavar="TOKEN", help=f"bearer token of the env replicas (default: ${TOKEN_ENV})")
    p.add_argument("--tasks", metavar="FILE", help="task file (JSON/JSONL) whose tasks are evaluated")
    p.add_argument("--instance-id", action="append", dest="instance_ids", metavar="ID",
                   help="evaluate this task only (repeatable)")
    p.add_argument("--samples", type=int, default=1, metavar="K", help="episodes per task (default 1)")
    p.add_argument("--concurrency", type=int, default=8, metavar="N", help="episodes at a time (default 8)")
    p.add_argument("--out", required=True, metavar="DIR", help="results, rollouts, predictions and the report")
    p.add_argument("--config", metavar="RUN.yaml", help="a trainer run config: its data.prompt and "
                   "env.max_output_chars are used, so the model sees what training showed it")
    p.add_argument("--profile", metavar="NAME", help="the env's tool profile the default loop shows the model "
                   f"({', '.join(PROFILES)}; default: --config's env.profile, else default): the trainer's env.profile")
    p.add_argument("--max-turns", type=int, metavar="N", help="policy turns before auto-submit (30; with --harness "
                   "mini-swe-agent: the agent's step limit, default its config's)")
    p.add_argument("--max-episode-s", type=float, default=1800.0, metavar="S",
                   help="wall seconds of an episode, model calls and env steps, before auto-submit (1800)")
    p.add_argument("--max-context-tokens", type=int, metavar="N",
                   help="auto-submit once a turn's prompt + completion reach N tokens (default: the endpoint's limit)")
    p.add_argument("--max-tokens", type=int, default=2048, metavar="N", help="completion tokens per turn (2048)")
    p.add_argument("--temperature", type=float, metavar="T",
                   help="sampling temperature (default: 0 with --samples 1, else 1.0)")
    p.add_argument("--top-p", type=float, metavar="P")
    p.add_argument("--logprobs", action="store_true", help="ask for token ids and log-probs (vLLM) for the rollouts")
    p.add_argument("--price-in", type=float, default=0.0, metavar="USD", help="USD per million prompt tokens")
    p.add_argument("--price-out", type=float, default=0.0, metavar="USD", help="USD per million completion tokens")
    p.add_argument("--max-attempts", type=int, default=3, metavar="N",
                   help="attempts of an episode lost to infrastructure before it is reported lost (3)")
    p.add_argument("--parquet", action="store_true", help="also write rollouts.parquet (needs pyarrow)")
    p.add_argument("--fresh", action="store_true", help="discard OUT's earlier results instead of resuming")
    p.add_argument("--quiet", action="store_true", help="no per-episode progress lines")
    p.add_argument("--serve", default="transformers", metavar="transformers|vllm",
                   help="how a checkpoint --model is served (default transformers, CPU)")
    p.add_argument("--device", default="cpu", help="device of a served checkpoint (default cpu)")
    p.add_argument("--harness", choices=HARNESSES, default="default",
                   help="the agent loop: default (this project's: the trainer's prompt, tools and rendering) or "
                   "mini-swe-agent (its own DefaultAgent and config on the env's bash-only profile; docs/frameworks/"
                   "mini-swe-agent.md)")
    p.add_argument("--harness-python", metavar="PYTHON", help="with --harness mini-swe-agent: the python of a venv "
                   "with mini-swe-agent and this project's client (default: this one, if it has mini-swe-agent)")
    p.add_argument("--harness-config", action="append", metavar="SPEC", help="with --harness mini-swe-agent: its "
                   "config, a file, a built-in name or key=value (repeatable, merged in order; default swebench.yaml)")
    p.set_defaults(func=lambda args: run_evaluate(args, serve))


def _prompt_and_cut(args: argparse.Namespace) -> tuple[str, int, str]:
    """(prompt, output cut, tool profile): --config's (a trainer run config), --profile over its env.profile;
    the prompt defaults to the profile's (as the trainer's data.prompt does)."""
    data: dict[str, Any] = {}
    env: dict[str, Any] = {}
    if args.config:
        from contract.overrides import read_yaml_mapping

        raw = read_yaml_mapping(args.config)
        data, env = raw.get("data") or {}, raw.get("env") or {}
    try:
        profile = get_profile(getattr(args, "profile", None) or env.get("profile"))
    except UnknownProfile as exc:
        raise EvaluationError(f"--profile: {exc}") from None
    return (str(data.get("prompt", profile.prompt)), int(env.get("max_output_chars", AgentLimits().max_output_chars)),
            profile.name)


@contextlib.contextmanager
def _endpoint(args: argparse.Namespace, serve: ServeCheckpoint | None) -> Iterator[tuple[str, str]]:
    if args.model.startswith(("http://", "https://")):
        name = args.model_name
        if name is None:
            try:
                models = asyncio.run(list_models(args.model, args.api_key_env))
            except EndpointError as exc:  # a refused key, no /models: the run cannot start (one line, exit 1)
                hint = "" if exc.message.startswith("no model endpoint answers") else \
                    " (pass --model-name to skip the model list)"
                raise EvaluationError(exc.message + hint) from None
            if not models:
                raise EvaluationError(f"{args.model}/models lists no model: pass --model-name")
            name = models[0]
        yield args.model, name
        return
    if not Path(args.model).is_dir():
        raise EvaluationError(f"--model {args.model!r} is neither an http(s) URL nor a checkpoint directory")
    if serve is None:
        raise EvaluationError(f"serving a checkpoint needs the 'train' extra: {install_line('train')}")
    with serve(args.model, args) as (base_url, name):
        yield base_url, args.model_name or name


def run_evaluate(args: argparse.Namespace, serve: ServeCheckpoint | None = None) -> int:
    """`trainer-client evaluate`: 0 when the run finished (lost episodes included, reported)."""
    if args.api_key_env and not os.environ.get(args.api_key_env):  # before any request: none could succeed
        raise EvaluationError(f"--api-key-env {args.api_key_env}: the variable ${args.api_key_env} is not set "
                              "(or empty) in this environment")
    _harness_setup(args)
    if args.harness_info is None:
        _prompt_and_cut(args)  # a wrong --profile or --config is one line before any endpoint is asked
    if not args.model.startswith(("http://", "https://")) and not args.fresh:
        done = _nothing_left(args)  # before a checkpoint is served (tens of seconds)
        if done is not None:
            return _finish(args, done)
    with _endpoint(args, serve) as (base_url, name):
        config, endpoint_config = _configs(args, base_url, name)
        if args.harness_info is not None:
            summary = asyncio.run(evaluate(config, _harness(args, config, endpoint_config)))
        else:
            summary = asyncio.run(_evaluate(config, endpoint_config))
    return _finish(args, summary)


def _harness_setup(args: argparse.Namespace) -> None:
    """``args.harness_info``: None for the default loop; for mini-swe-agent, its version and config limits
    at the harness python (checked before anything is served or run: one line when it cannot run)."""
    args.harness_info = None
    harness = getattr(args, "harness", "default")
    if harness == "default":
        for flag in ("harness_python", "harness_config"):
            if getattr(args, flag, None):
                raise EvaluationError(f"--{flag.replace('_', '-')} needs --harness mini-swe-agent")
        return
    unused = [f for f, on in (("--config", args.config), ("--logprobs", args.logprobs), ("--profile", args.profile),
                              ("--max-context-tokens", args.max_context_tokens)) if on]
    if unused:
        raise EvaluationError(f"{', '.join(unused)}: not used by --harness mini-swe-agent (its own config sets the "
                              "prompt and the context; see docs/frameworks/mini-swe-agent.md)")
    python = args.harness_python or default_python()
    if python is None:
        raise EvaluationError("--harness mini-swe-agent: this python has no mini-swe-agent; pass --harness-python "
                              "with a venv that has it (python -m venv .venv-mini && .venv-mini/bin/pip install -e "
                              '".[client,minisweagent]")')
    args.harness_config = args.harness_config or [DEFAULT_CONFIG]
    try:
        info = probe(python, args.harness_config)
    except HarnessError as exc:
        raise EvaluationError(str(exc)) from None
    args.harness_info = {**info, "python": python}


def _harness(args: argparse.Namespace, config: EvalConfig, endpoint: EndpointConfig) -> MiniSweAgentHarness:
    return MiniSweAgentHarness(args.harness_info["python"], endpoint, config.env_urls, config.out,
                               configs=args.harness_config, token=resolve_token(args.env_token),
                               step_limit=config.limits.max_turns, max_episode_s=config.limits.max_episode_s)


def _configs(args: argparse.Namespace, base_url: str, name: str) -> tuple[EvalConfig, EndpointConfig]:
    """The run's settings, for the policy served at ``base_url`` as ``name``."""
    prompt, cut, profile = _prompt_and_cut(args)
    temperature = args.temperature if args.temperature is not None else (0.0 if args.samples == 1 else 1.0)
    token = resolve_token(args.env_token)
    client = ClientConfig(token=token) if token else ClientConfig()
    try:
        endpoint_config = EndpointConfig(
            base_url=base_url, model=name, api_key_env=args.api_key_env, temperature=temperature, top_p=args.top_p,
            max_tokens=args.max_tokens, logprobs=args.logprobs, price_in=args.price_in, price_out=args.price_out)
        served = args.model if args.model.startswith("http") else f"{args.model} (served: {args.serve})"
        describe = {"model": served, "model_name": name, "temperature": temperature, "top_p": args.top_p,
                    "max_tokens": args.max_tokens}
        info = getattr(args, "harness_info", None)
        max_turns = args.max_turns if args.max_turns is not None else AgentLimits().max_turns
        if info is not None:
            max_turns = args.max_turns if args.max_turns is not None else info.get("step_limit") or 10**6  # 0: none
            describe.update(harness_describe(info, args.harness_config))
        config = EvalConfig(
            env_urls=list(args.env_url), tasks=args.tasks, instance_ids=args.instance_ids, samples=args.samples,
            concurrency=args.concurrency, out=args.out, model_name=args.label or name,
            limits=AgentLimits(max_turns=max_turns, max_episode_s=args.max_episode_s,
                               max_context_tokens=args.max_context_tokens, max_output_chars=cut, prompt=prompt,
                               profile=profile),
            max_attempts=args.max_attempts, parquet=args.parquet, fresh=args.fresh, progress=not args.quiet,
            client=client, describe={k: v for k, v in describe.items() if v is not None})
    except ValidationError as exc:  # a flag out of range (--samples 0, --top-p 2): one line, exit 1
        raise EvaluationError("invalid settings: " + "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_url=False))) from None
    return config, endpoint_config


def _nothing_left(args: argparse.Namespace) -> dict[str, Any] | None:
    """For a checkpoint the command serves itself, the output folder first: an evaluation there with
    other settings is refused before anything is served; one with every episode done gets its report
    rewritten without serving (the summary); else None (serve and run)."""
    import json

    from .run import CONFIG, load_task_refs, read_results

    try:
        before = json.loads((Path(args.out) / CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # a new folder, or one the run itself will judge
    name = str((before.get("policy") or {}).get("model_name") or args.model_name or args.model)
    config, _ = _configs(args, "http://127.0.0.1:1", args.model_name or name)
    identity = json.loads(json.dumps(config.identity()))
    changed = sorted(k for k in identity if before.get(k) != identity[k])
    if changed:
        raise EvaluationError(f"{args.out} holds an evaluation with other settings ({', '.join(changed)}): "
                              "use another --out, or --fresh to discard it")
    done = {k for k, r in read_results(args.out).items() if r.status != "lost"}
    if any((t.instance_id, s) not in done for t in load_task_refs(config) for s in range(config.samples)):
        return None
    return asyncio.run(evaluate(config, _NoPolicy()))  # nothing to run: the report is rewritten


class _NoPolicy:
    """The policy of a rerun with nothing left to run: never asked."""

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        raise EvaluationError("internal: a finished evaluation asked its policy")


def _finish(args: argparse.Namespace, summary: dict[str, Any]) -> int:
    o = summary["overall"]
    rate = "-" if o["resolved_rate"] is None else f"{o['resolved_rate']:.1%}"
    print(f"resolved {o['resolved']}/{o['scored']} = {rate} (95% CI {o['ci95'][0]:.1%}-{o['ci95'][1]:.1%}), "
          f"lost {o['lost']}; report: {Path(args.out) / 'report.md'}")
    return 0


async def _evaluate(config: EvalConfig, endpoint_config: EndpointConfig) -> dict[str, Any]:
    try:
        endpoint = ChatEndpoint(endpoint_config)
    except EndpointError as exc:
        raise EvaluationError(exc.message) from None
    try:
        return await evaluate(config, endpoint)
    finally:
        await endpoint.aclose()


def _add_tasks(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tasks", help="split a task file into train / held-out, or filter it by measured pass rate",
                       description="Task files for the train -> evaluate -> train loop (evaluation/tasksets.py).")
    tsub = p.add_subparsers(dest="tasks_command", required=True, metavar="ACTION")
    s = tsub.add_parser("split", help="train / held-out by repository (no repository on both sides)",
                        description="Split a task file by repository: every repository goes wholly to one side, "
                        "chosen by a seeded hash of its name (reproducible anywhere).")
    s.add_argument("--tasks", required=True, metavar="FILE")
    s.add_argument("--held-out", type=float, default=0.2, metavar="SHARE", help="share of tasks held out (0.2)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--train-out", required=True, metavar="FILE")
    s.add_argument("--held-out-out", required=True, metavar="FILE")
    s.set_defaults(func=_run_split)
    f = tsub.add_parser("filter", help="keep tasks whose pass rate in an evaluation lies in a range",
                        description="Keep the tasks whose pass rate in an evaluation report lies in [--min, --max] "
                        "((--min, --max) with --strict). `--min 0 --max 1 --strict` keeps the tasks GRPO learns "
                        "from: some samples pass, some fail.")
    f.add_argument("--tasks", required=True, metavar="FILE")
    f.add_argument("--report", required=True, metavar="DIR|report.json", help="an evaluation's output directory")
    f.add_argument("--min", type=float, default=0.0, dest="min_rate")
    f.add_argument("--max", type=float, default=1.0, dest="max_rate")
    f.add_argument("--strict", action="store_true", help="exclude the bounds themselves")
    f.add_argument("--keep-unmeasured", action="store_true", help="keep tasks the report has no rate for")
    f.add_argument("--out", required=True, metavar="FILE")
    f.set_defaults(func=_run_filter)


def _run_split(args: argparse.Namespace) -> int:
    r = split_tasks(args.tasks, args.held_out, args.seed, args.train_out, args.held_out_out)
    print(f"train: {r['train']['tasks']} tasks from {len(r['train']['repos'])} repositories -> {args.train_out}")
    print(f"held out: {r['held_out']['tasks']} tasks from {len(r['held_out']['repos'])} repositories "
          f"({', '.join(r['held_out']['repos'])}) -> {args.held_out_out}")
    return 0


def _run_filter(args: argparse.Namespace) -> int:
    c = filter_by_pass_rate(args.tasks, args.report, args.out, args.min_rate, args.max_rate, args.strict,
                            args.keep_unmeasured)
    print(f"kept {c['kept']} tasks -> {args.out} (dropped: {c['below']} below, {c['above']} above the range, "
          f"{c['unmeasured']} without a rate{' (kept)' if args.keep_unmeasured else ''})", file=sys.stdout)
    return 0


def add_subcommands(sub: argparse._SubParsersAction, serve_checkpoint: ServeCheckpoint | None = None) -> None:
    """Register `evaluate` and `tasks` on a CLI's subparsers."""
    _add_evaluate(sub, serve_checkpoint)
    _add_tasks(sub)
