"""`SweGRPOTrainer`: TRL's GRPOTrainer with a concurrent tool phase and error sites.

Route chosen for concurrency: an override of `GRPOTrainer._tool_call_loop` (text-only).
Stock TRL (1.16.0) runs the tool calls of one rollout after another; here each round
dispatches the tool calls of all rollouts at once (one worker thread per rollout; a
rollout's own calls stay in order, because a session executes in order), then does the
same single batched generate per round as TRL. Token handling is TRL's: the next input is
prompt_ids + completion_ids + templated tool suffix, never re-tokenized; tool tokens get
tool_mask 0; results that would overflow the completion budget are rolled back.
`tests/trainer/test_tool_loop.py` pins that the override gives the same token ids and masks
as trl 1.16.0's own loop and that the loop's source is the one this was written against.

Error sites: for every failing agent tool call (the environment's per-turn record carries
error_kind / hint_template_key / error_source), the rollout gets
`{"turn", "error_kind", "hint_template_key", "token_start"}` where `token_start` indexes
completion_ids at the first token of the assistant turn generated after the failing tool
output. The list per rollout is put into the inputs dict as `error_sites` (shuffled and
split with the other per-rollout fields). Sites whose tool result was rolled back, or
whose following turn has no tokens, are not reported (the model never acted on them).

Scoring on the CPU: only completion positions go through the LM head (see
`compact_fused_lm_head`; stock trl 1.16 projects the whole prompt too, ~20x the work
for an agent prompt).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from trl import GRPOTrainer
from trl.chat_template_utils import parse_response

from contract import SuspicionPolicy, SuspicionReason
from env_client.urls import http_base
from trainer_client.console import RunConsole, rollout_summary
from trainer_client.distributed import gather_objects
from trainer_client.losses.mixin import LossChannelsMixin

log = logging.getLogger(__name__)

__all__ = ["CompactCpuScoringMixin", "ConcurrentToolsMixin", "SweGRPOTrainer", "LossChannelsMixin"]

#: error sources that are the policy's fault; env/infra failures never become error sites
SCORED_ERROR_SOURCES = frozenset({"agent", None})
#: the env's closed set of monitor flags (`env/suspicious/<reason>`; other values are not logged)
SUSPICION_REASONS: tuple[str, ...] = tuple(r.value for r in SuspicionReason)


class ConcurrentToolsMixin:
    """Concurrent tool phase + error sites + concurrent resets, on top of GRPOTrainer."""

    tool_workers: int = 64
    _last_error_sites: list[list[dict]] | None = None
    _tool_executor: ThreadPoolExecutor | None = None

    # ---------------------------------------------------------------- batch entry point
    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        self._prefetch_resets(inputs)
        self._last_error_sites = None
        output = super()._generate_and_score_completions(inputs)  # type: ignore[misc]
        sites = self._last_error_sites or [[] for _ in range(len(output["completion_ids"]))]
        output["error_sites"] = sites
        self._log_env_metrics(sites)
        if getattr(self, "live_pairs", False):
            self._queue_for_replay()
        return output

    def _queue_for_replay(self) -> None:
        """Hand this batch's finished episodes (every rank's) to the main process's replay loop; it
        reads their traces and asks the teachers in the background (a collective)."""
        from trainer_client.replay.during_training import FinishedEpisode

        started = time.perf_counter()
        mine = [FinishedEpisode(env.episode_id, env.replica_url, self.state.global_step)
                for env in getattr(self, "environments", None) or []
                if getattr(env, "episode_id", None) and env.done and not env.infra_error]
        everyone = [e for rank in gather_objects(self, mine) for e in rank]
        loop = getattr(self, "live_replay", None)
        if loop is not None:
            loop.submit(everyone)
        self.replay_loop_s = getattr(self, "replay_loop_s", 0.0) + time.perf_counter() - started

    def _prefetch_resets(self, inputs: list[dict[str, Any]]) -> None:
        """Start every rollout's remote reset at once (TRL's `reset` loop is serial); TRL then hands
        each example the same pool instance this predicts, whose `reset` picks up the result."""
        factories = getattr(self, "environment_factories", None)
        if not factories or getattr(self, "_multi_environment", False):
            return
        pool = self._environment_pool[None]
        while len(pool) < len(inputs):
            pool.append(factories[None]())
        for env, row in zip(pool, inputs):
            if hasattr(env, "_prepare"):
                env._prepare(**row)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        """TRL's reward loop asks each environment in turn; every rollout's grading is started first."""
        for env in getattr(self, "environments", None) or []:
            if hasattr(env, "_submit_ahead"):
                env._submit_ahead()
        return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)

    def _log_env_metrics(self, sites: list[list[dict]]) -> None:
        """Per-batch env metrics over the global batch: every rank's counts are gathered (a
        collective: every rank calls this once per generation batch) and summed before dividing."""
        mode = "train" if self.model.training else "eval"
        envs = getattr(self, "environments", None) or []
        counts: Counter = Counter()
        for env in envs:
            for rec in getattr(env, "turns", []):
                counts["turns"] += 1
                if rec.get("error_kind"):
                    counts[f"env/errors/{rec['error_kind']}"] += 1
            flags = set(getattr(env, "suspicious", ()))
            counts["env/infra_failures"] += bool(getattr(env, "infra_error", None))
            counts["env/passed"] += getattr(env, "reward", None) == 1.0  # resolved: every hidden test passes
            counts["env/reward_hacking"] += bool(getattr(env, "reward_hacking", False))
            counts["env/suspicious_submissions"] += bool(flags)
            for reason in SUSPICION_REASONS:  # the closed set, zeros included: a steady series per reason
                counts[f"env/suspicious/{reason}"] += reason in flags
            # what env.suspicion_policy did: a graded reward > 0 it set to 0, a rollout it took out of the loss
            decision = getattr(env, "decision", None)
            if decision is not None:
                counts["env/suspicious_zeroed"] += (decision.action is SuspicionPolicy.zero
                                                    and (getattr(env, "reward", None) or 0.0) > 0)
                counts["env/suspicious_masked"] += decision.action is SuspicionPolicy.mask
        counts["rollouts"] = len(envs)
        counts["sites"] = sum(map(len, sites)) if envs else 0
        counts.update(self._capacity_delta(envs))
        self.rollouts_local += len(envs)
        console = self.run_console
        rollouts = [rollout_summary(env) for env in envs]  # every rank's: the main process prints them
        per_rank = gather_objects(self, (dict(counts), self._tool_phase_s, rollouts, self._replicas(envs)))
        self._tool_phase_s = 0.0
        total: Counter = Counter()
        for rank_counts, *_ in per_rank:
            total.update(rank_counts)
        n = total.pop("rollouts", 0)
        if not n:
            return
        if console is not None and self.args.process_index == 0:  # lost rollouts, replicas, a sampled episode
            replicas: dict[str, bool] = {}
            for *_, rank_replicas in per_rank:
                for url, live in rank_replicas.items():
                    replicas[url] = replicas.get(url, True) and live
            console.report(self.state.global_step + 1, [r for _, _, rank, _ in per_rank for r in rank], replicas)
        metrics = self._metrics[mode]
        metrics["env/rollouts"].append(float(n))
        metrics["env/turns_per_rollout"].append(total.pop("turns", 0) / n)
        metrics["env/error_sites_per_rollout"].append(total.pop("sites", 0) / n)
        metrics["env/tool_phase_s"].append(max(seconds for _, seconds, *_ in per_rank))
        metrics["env/pass_rate"].append(total.pop("env/passed", 0) / n)
        for key in ("env/infra_failures", "env/reward_hacking", "env/suspicious_submissions", "env/suspicious_zeroed",
                    "env/suspicious_masked", *(f"env/suspicious/{r}" for r in SUSPICION_REASONS)):
            metrics[key].append(float(total.pop(key, 0)))
        for key in ("env/capacity_waits", "env/capacity_wait_s"):
            if key in total:
                metrics[key].append(float(total.pop(key)))
        for key, value in sorted(total.items()):  # env/errors/<kind>: per rollout
            metrics[key].append(value / n)

    #: the main process's console lines about the env (trainer_client/console.py); None: none
    run_console: RunConsole | None = None

    @staticmethod
    def _replicas(envs: list) -> dict[str, bool]:
        """Each replica of this rank's pool (URL -> live)."""
        runtime = getattr(envs[0], "runtime", None) if envs else None
        pool = getattr(runtime, "pool", None)
        return {http_base(c.url): not c.dead for c in getattr(pool, "connections", [])}

    _capacity_seen: tuple[int, float] = (0, 0.0)
    _tool_phase_s: float = 0.0
    rollouts_local: int = 0  # this rank's rollouts so far

    def _capacity_delta(self, envs: list) -> dict[str, float]:
        """`env/capacity_waits` (session opens that waited for a free replica slot) and
        `env/capacity_wait_s` (their seconds) of this rank since the previous batch."""
        runtime = getattr(envs[0], "runtime", None) if envs else None
        pool = getattr(runtime, "pool", None)
        if pool is None or not hasattr(pool, "capacity_waits"):
            return {}
        waits, seconds = pool.capacity_waits, pool.capacity_wait_s
        seen_waits, seen_seconds = self._capacity_seen
        self._capacity_seen = (waits, seconds)
        return {"env/capacity_waits": float(waits - seen_waits), "env/capacity_wait_s": float(seconds - seen_seconds)}

    # ---------------------------------------------------------------- the tool phase
    def _executor(self) -> ThreadPoolExecutor:
        if self._tool_executor is None:
            self._tool_executor = ThreadPoolExecutor(self.tool_workers, thread_name_prefix="tool-call")
        return self._tool_executor

    def _run_rollout_tools(self, i: int, calls: list[dict]) -> tuple[list[tuple[str, Any]], int, list[dict]]:
        """The tool calls of one assistant message, in order, TRL's way (sync ones one by one,
        then the async ones gathered); returns (name, result) pairs, failures, new turn records."""
        sync_tools, async_tools = self._sync_tool_dicts[i], self._async_tool_dicts[i]
        env = self.environments[i] if getattr(self, "environments", None) else None
        n_turns = len(getattr(env, "turns", ()))
        results: list[tuple[str, Any]] = []
        coros: list[tuple[str, Any]] = []
        failures = 0
        for call in calls:
            if call.get("type") != "function":
                failures += 1
                results.append((call.get("name", "unknown"), {"error": f"Unsupported tool call type: {call.get('type')}"}))
                continue
            name, arguments = call["function"]["name"], call["function"]["arguments"]
            try:
                if name in sync_tools:
                    results.append((name, sync_tools[name](**arguments)))
                elif name in async_tools:
                    coros.append((name, async_tools[name](**arguments)))
                else:
                    raise ValueError(f"Tool {name} not found.")
            except Exception as exc:  # noqa: BLE001 - the model's mistake becomes a tool message
                failures += 1
                results.append((name, {"error": str(exc)}))
        if coros:
            async def gather():
                return await asyncio.gather(*(c for _, c in coros), return_exceptions=True)

            outcomes = asyncio.run_coroutine_threadsafe(gather(), self.async_loop).result()
            for (name, _), outcome in zip(coros, outcomes):
                if isinstance(outcome, Exception):
                    failures += 1
                    results.append((name, {"error": str(outcome)}))
                else:
                    results.append((name, outcome))
        records = list(getattr(env, "turns", ())[n_turns:]) if env is not None else []
        return results, failures, records

    def _tool_call_loop(self, prompts, prompt_ids, completion_ids, completions, logprobs, images, multimodal_fields):
        if self._is_vlm or images is not None or multimodal_fields:
            log.warning("multimodal rollouts use TRL's serial tool loop (no error sites)")
            self._last_error_sites = None
            return super()._tool_call_loop(  # type: ignore[misc]
                prompts, prompt_ids, completion_ids, completions, logprobs, images, multimodal_fields
            )
        n = len(completion_ids)
        tool_mask = [[1] * len(ids) for ids in completion_ids]
        tool_images: list[list] = [[] for _ in range(n)]
        error_sites: list[list[dict]] = [[] for _ in range(n)]
        pending = {i: c[0].get("tool_calls") for i, c in enumerate(completions) if c[0].get("tool_calls")}
        active = sorted(pending)
        call_count = failure_count = iteration = 0

        envs = getattr(self, "environments", None) or []
        turn_ids = {i: list(completion_ids[i]) for i in active}  # what the policy generated for its turn
        while active and iteration < self.max_tool_calling_iterations:
            before = {i: (len(completions[i]), len(prompts[i])) for i in active}
            for i in active:  # the env records the turn's message with its calls: state(t) = this context
                if i < len(envs) and hasattr(envs[i], "pending_assistant"):
                    message = completions[i][-1]
                    envs[i].pending_assistant = {"content": str(message.get("content") or ""),
                                                 "tool_calls": list(message.get("tool_calls") or []),
                                                 "token_ids": turn_ids[i]}
            started = time.monotonic()
            futures = {i: self._executor().submit(self._run_rollout_tools, i, pending[i]) for i in active}
            records: dict[int, list[dict]] = {}
            for i in active:  # results are appended in rollout order: deterministic
                prompts[i].append(completions[i][-1])
                results, failures, records[i] = futures[i].result()
                call_count += len(pending[i])
                failure_count += failures
                for name, result in results:
                    message = {"role": "tool", "name": name, "content": result if isinstance(result, list) else str(result)}
                    prompts[i].append(message)
                    completions[i].append(message)
            self._tool_phase_s += time.monotonic() - started

            pct_ids = {}
            for i in active:
                tool_messages = []
                for message in reversed(completions[i]):
                    if message["role"] != "tool":
                        break
                    tool_messages.insert(0, message)
                pct_ids[i] = prompt_ids[i] + completion_ids[i] + self._get_tool_suffix_ids(tool_messages)

            if self.use_vllm and self.vllm_mode == "colocate":
                max_model_len = self.vllm_generation.llm.llm_engine.model_config.max_model_len
            else:
                max_model_len = self.model.config.max_position_embeddings
            kept = []
            for i in active:
                if len(pct_ids[i]) - len(prompt_ids[i]) > self.max_completion_length or len(pct_ids[i]) >= max_model_len:
                    del completions[i][before[i][0]:]  # roll back: the model never sees this result
                    del prompts[i][before[i][1]:]
                else:
                    kept.append(i)
            active = kept
            if not active:
                break

            post_ids, post_logprobs = self._generate_single_turn(
                [pct_ids[i] for i in active], None, {}, num_generations=1, has_tool_images=False
            )
            for k, i in enumerate(active):
                completion_tool_len = len(pct_ids[i]) - len(prompt_ids[i])
                excess = completion_tool_len + len(post_ids[k]) - self.max_completion_length
                if excess > 0:
                    post_ids[k] = post_ids[k][: len(post_ids[k]) - excess]
                    if logprobs is not None:
                        post_logprobs[k] = post_logprobs[k][: len(post_logprobs[k]) - excess]
                tool_len = completion_tool_len - len(completion_ids[i])
                tool_mask[i] += [0] * tool_len + [1] * len(post_ids[k])
                if logprobs is not None:
                    logprobs[i] += [0.0] * tool_len + post_logprobs[k]
                completion_ids[i] = pct_ids[i][len(prompt_ids[i]):] + post_ids[k]
                turn_ids[i] = list(post_ids[k])
                if post_ids[k]:
                    error_sites[i] += [
                        {
                            "turn": rec["turn"],
                            "tool_name": rec.get("tool_name") or "tool",
                            "error_kind": rec["error_kind"],
                            "hint_template_key": rec.get("hint_template_key"),
                            "token_start": completion_tool_len,
                        }
                        for rec in records[i]
                        if rec.get("error_kind") and rec.get("error_source") in SCORED_ERROR_SOURCES
                    ]

            tools_of = self._tools_per_rollout()
            post_completions = [
                parse_response(self._tokenizer, ids, prefix=pct_ids[i], tools=tools_of(i)) if ids else {}
                for i, ids in zip(active, post_ids)
            ]
            pending = {}
            for i, parsed in zip(active, post_completions):
                if parsed:
                    completions[i].append(parsed)
                    if parsed.get("tool_calls"):
                        pending[i] = parsed["tool_calls"]
            active = [i for i in active if i in pending]
            iteration += 1

        self._last_error_sites = error_sites
        return tool_mask, completions, completion_ids, logprobs, call_count, failure_count, tool_images

    def _tools_per_rollout(self):
        if self.environment_factories is not None:
            return lambda i: self._env_tools[self._batch_environments[i]]
        return lambda i: self.tools


@contextmanager
def compact_fused_lm_head():
    """Make TRL's fused LM head score only the labelled positions on the CPU too.

    trl 1.16's fused head projects only the completion positions on Triton devices, but on every
    other device it projects EVERY position (prompt included) to keep tile shapes static for
    graph compilers. Eager CPU has no such constraint, and an agent prompt (issue text + tool
    schemas) is ~1,000 tokens against a few dozen completion tokens, so the full projection
    (positions x 151,665 vocab) dominates a CPU step. The values are identical either way
    (tests/trainer/test_compact_scoring.py pins log-probs, entropies and gradients).
    """
    import trl.trainer.utils as trl_utils

    original = trl_utils._use_triton
    trl_utils._use_triton = lambda device: device.type == "cpu" or original(device)
    try:
        yield
    finally:
        trl_utils._use_triton = original


class CompactCpuScoringMixin:
    """Score completion positions only when the policy runs on the CPU (see compact_fused_lm_head)."""

    def _get_per_token_logps_and_entropies(self, model: Any, input_ids: Any, *args: Any, **kwargs: Any):
        if input_ids.device.type != "cpu":
            return super()._get_per_token_logps_and_entropies(model, input_ids, *args, **kwargs)  # type: ignore[misc]
        with compact_fused_lm_head():
            return super()._get_per_token_logps_and_entropies(model, input_ids, *args, **kwargs)  # type: ignore[misc]


class SweGRPOTrainer(LossChannelsMixin, CompactCpuScoringMixin, ConcurrentToolsMixin, GRPOTrainer):
    """GRPO (channel 1) + the loss channels (hints, pairs) + concurrent tools + completion-only scoring on
    the CPU.

    `loss_settings` (the run config's `loss` section, a LossSettings) configures the channels.
    """

    def __init__(self, *args: Any, loss_settings: Any = None, live_replay: Any = None, live_pairs: bool = False,
                 **kwargs: Any):
        """`live_replay`: the main process's LiveReplay (None on the others); `live_pairs`: True on
        every rank when the run feeds the pairs channel from it."""
        self.loss_settings = loss_settings
        self.live_replay, self.live_pairs = live_replay, live_pairs or live_replay is not None
        super().__init__(*args, **kwargs)
        model = args[0] if args else kwargs.get("model")
        if isinstance(model, str):  # DPO's reference for pairs that arrive mid-run: the initial weights
            self.reference_loader = lambda: load_initial_policy(model, self.model)

    def __del__(self) -> None:
        if self._tool_executor is not None:
            self._tool_executor.shutdown(wait=False)


def load_initial_policy(path: str, like: Any) -> Any:
    """The policy's starting weights from `path`, frozen, on `like`'s device and dtype (DPO's reference)."""
    from transformers import AutoModelForCausalLM

    reference = AutoModelForCausalLM.from_pretrained(path, dtype=like.dtype)
    return reference.to(next(like.parameters()).device).eval().requires_grad_(False)


def trl_tool_loop_source() -> str:
    """Source of the stock tool loop this override mirrors (pinned by a test)."""
    return inspect.getsource(GRPOTrainer._tool_call_loop)
