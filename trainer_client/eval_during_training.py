"""Held-out evaluation during `trainer-client train`: `eval/*` metrics beside the training ones.

With `eval.tasks` set, the model being trained is evaluated as an agent on those tasks (the
evaluator of `trainer-client evaluate`: evaluation/run.py) before the first step, every
`eval.every_steps` optimizer steps, and after the last. Each evaluation writes its full
outputs to `<output_dir>/eval/step-<N>/` (report.md, results.jsonl, rollouts.jsonl) and logs
`eval/resolved_rate`, `eval/resolved_ci_low`, `eval/resolved_ci_high`, `eval/pass@1`,
`eval/scored`, `eval/lost` and `eval/turns` through the trainer's own metrics, so they land in
metrics.jsonl, the per-step table and every `report_to` integration.

The policy is the training model itself, in this process (`TrainingModelPolicy`): its chat
template with the tools, `generate`, and TRL's `parse_response` (the parser GRPO's rollouts
use). Generation runs one request at a time on the main process; the env episodes run
`eval.concurrency` at a time. A sharded model (FSDP, ZeRO-3) would need every rank in each
`generate`: evaluate its saved checkpoints with `trainer-client evaluate` instead.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from env_client import ClientConfig
from evaluation import AgentLimits, EndpointError, EvalConfig, PolicyReply, evaluate, wire_tool_calls
from trainer_client.config import EvalSection

__all__ = ["HeldOutEvalCallback", "TrainingModelPolicy", "eval_metrics"]


class TrainingModelPolicy:
    """The trainer's current model as an evaluation policy (evaluation.agent.Policy)."""

    def __init__(self, trainer: Any, max_new_tokens: int, temperature: float):
        self.trainer = trainer
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self._lock = threading.Lock()

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> PolicyReply:
        return await asyncio.to_thread(self._generate, messages, tools)

    def _generate(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> PolicyReply:
        import torch
        from trl.chat_template_utils import parse_response

        from trainer_client.context import _plain

        trainer = self.trainer
        tokenizer = trainer._tokenizer  # TRL's: with the response schema parse_response needs
        kwargs = dict(getattr(trainer, "chat_template_kwargs", None) or {})
        ids = list(tokenizer.apply_chat_template([_plain(m) for m in messages], tools=tools or None,
                                                 add_generation_prompt=True, tokenize=True, return_dict=False,
                                                 **kwargs))
        model = trainer.accelerator.unwrap_model(trainer.model)
        limit = getattr(model.config, "max_position_embeddings", None)
        if limit is not None and len(ids) + 1 > limit:
            raise EndpointError("context_length", f"the context is {len(ids)} tokens; the model takes {limit}")
        new_tokens = self.max_new_tokens if limit is None else min(self.max_new_tokens, limit - len(ids))
        with self._lock:
            was_training = model.training
            model.eval()
            try:
                with torch.no_grad():
                    out = model.generate(torch.tensor([ids], device=model.device), max_new_tokens=new_tokens,
                                         do_sample=self.temperature > 0,
                                         temperature=self.temperature if self.temperature > 0 else None,
                                         top_p=None, top_k=None, pad_token_id=tokenizer.pad_token_id
                                         if tokenizer.pad_token_id is not None else tokenizer.eos_token_id)
            finally:
                model.train(was_training)
        completion = out[0, len(ids):].tolist()
        parsed = parse_response(tokenizer, completion, prefix=ids, tools=tools or None)
        calls = wire_tool_calls(parsed)
        return PolicyReply(content=str(parsed.get("content") or ""), tool_calls=calls, token_ids=completion,
                           finish_reason="tool_calls" if calls else "stop", prompt_tokens=len(ids),
                           completion_tokens=len(completion))


def eval_metrics(summary: dict[str, Any]) -> dict[str, float]:
    """The `eval/*` metrics of an evaluation summary (evaluation.stats.summarize)."""
    o = summary["overall"]
    out = {"eval/scored": float(o["scored"]), "eval/lost": float(o["lost"])}
    if o["resolved_rate"] is not None:
        out.update({"eval/resolved_rate": o["resolved_rate"], "eval/resolved_ci_low": o["ci95"][0],
                    "eval/resolved_ci_high": o["ci95"][1]})
    if o["pass@1"] is not None:
        out["eval/pass@1"] = o["pass@1"]
    if summary["turns"]["mean"] is not None:
        out["eval/turns"] = summary["turns"]["mean"]
    return out


class HeldOutEvalCallback(TrainerCallback):
    """Evaluate the training model on held-out tasks at the start, every N steps and at the end."""

    def __init__(self, section: EvalSection, env_urls: list[str], client: ClientConfig, output_dir: str | Path,
                 prompt: str, max_output_chars: int):
        self.section = section
        self.env_urls = list(env_urls)
        self.client = client
        self.output_dir = Path(output_dir)
        self.limits = AgentLimits(max_turns=section.max_turns, max_episode_s=section.max_episode_s,
                                  max_output_chars=max_output_chars, prompt=prompt)
        self.trainer: Any = None  # set by run.py once the trainer exists
        self.evaluated: dict[int, dict[str, float]] = {}

    def run(self, step: int) -> dict[str, float]:
        """Evaluate now (step `step`); the eval/* metrics."""
        s = self.section
        config = EvalConfig(env_urls=self.env_urls, tasks=s.tasks, samples=s.samples, concurrency=s.concurrency,
                            out=str(self.output_dir / "eval" / f"step-{step}"), model_name=f"step-{step}",
                            limits=self.limits, max_attempts=s.max_attempts, fresh=True, progress=False,
                            client=self.client, describe={"policy": "the training model (in process)",
                                                          "temperature": s.temperature,
                                                          "max_new_tokens": s.max_new_tokens})
        policy = TrainingModelPolicy(self.trainer, s.max_new_tokens, s.temperature)
        summary = asyncio.run(evaluate(config, policy))
        metrics = eval_metrics(summary)
        self.evaluated[step] = metrics
        o = summary["overall"]
        rate = "-" if o["resolved_rate"] is None else f"{o['resolved_rate']:.1%}"
        print(f"[eval step {step}] held-out resolved {o['resolved']}/{o['scored']} = {rate} "
              f"(95% CI {o['ci95'][0]:.0%}-{o['ci95'][1]:.0%}), lost {o['lost']}; "
              f"report: {Path(config.out) / 'report.md'}", flush=True)
        return metrics

    def _record(self, metrics: dict[str, float]) -> None:
        store = self.trainer._metrics["train"]  # logged (and cleared) with this step's training metrics
        for key, value in metrics.items():
            store[key].append(value)

    def on_train_begin(self, args, state, control, **kwargs):
        if self.section.at_start and state.is_world_process_zero and state.global_step not in self.evaluated:
            metrics = self.run(state.global_step)
            self.trainer.log(metrics)  # a record of its own, at the step training starts from

    def on_step_end(self, args, state, control, **kwargs):
        every = self.section.every_steps
        if every and state.global_step % every == 0 and state.is_world_process_zero:
            self._record(self.run(state.global_step))
            control.should_log = True

    def on_train_end(self, args, state, control, **kwargs):
        if self.section.at_end and state.is_world_process_zero and state.global_step not in self.evaluated:
            self.trainer.log(self.run(state.global_step))
