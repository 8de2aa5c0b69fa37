"""Builders shared by the trainer tests: a real tiny GRPO trainer and an in-process env double."""

from __future__ import annotations

import time
from pathlib import Path


class SleepEnvDouble:
    """In-process environment double: `sleep` blocks for `delay` seconds, `fail` is a failing
    command with error-site markers. Records per-turn markers like SweEnvironment."""

    delay: float = 0.0

    def __init__(self) -> None:
        self.turns: list[dict] = []
        self.started: list[float] = []  # perf_counter() at each call's start
        self.ended: list[float] = []  # and at its end

    def reset(self, **row) -> str:
        self.turns = []
        return " Call a tool."

    def sleep(self, seconds: float) -> str:
        """Wait a while.

        Args:
            seconds: How long to wait.
        """
        self.started.append(time.perf_counter())
        time.sleep(self.delay)
        self.ended.append(time.perf_counter())
        self.turns.append({"turn": len(self.turns), "tool_name": "sleep", "error_kind": None,
                           "hint_template_key": None, "error_source": None})
        return "slept"

    def fail(self, code: int) -> str:
        """Run a command that fails.

        Args:
            code: Exit code.
        """
        time.sleep(self.delay)
        self.ended.append(time.perf_counter())
        self.turns.append({"turn": len(self.turns), "tool_name": "fail", "error_kind": "nonzero_exit",
                           "hint_template_key": "shell.nonzero_exit", "error_source": "agent"})
        return f"exit code {code}"

    def get_reward(self) -> float:
        return float(len(self.turns))


def grpo_config(out: Path, **overrides):
    from trl import GRPOConfig

    kwargs = dict(
        output_dir=str(out), per_device_train_batch_size=2, num_generations=2, max_completion_length=48,
        max_steps=1, bf16=False, use_cpu=True, report_to=[], logging_steps=1, beta=0.0, save_strategy="no",
        dataloader_num_workers=0, seed=0,
    )
    kwargs.update(overrides)
    return GRPOConfig(**kwargs)


def build_trainer(out: Path, env_cls, trainer_cls=None, dataset=None, **overrides):
    from datasets import Dataset

    from trainer_client.tiny_qwen import tiny_qwen_dir
    from trainer_client.tokenizer import load_qwen_tokenizer
    from trainer_client.trainer import SweGRPOTrainer

    cls = trainer_cls or SweGRPOTrainer
    dataset = dataset or Dataset.from_list([{"prompt": [{"role": "user", "content": "Go."}]}] * 4)
    return cls(
        model=str(tiny_qwen_dir()),
        processing_class=load_qwen_tokenizer(),
        args=grpo_config(out, **overrides),
        train_dataset=dataset,
        environment_factory=env_cls,
    )


def scripted_first_turn(trainer, n: int, fail_every: int = 0):
    """n prompts whose first assistant turn is a fixed tool call (as if the model had generated it)."""
    from trl.chat_template_utils import parse_response

    tok = trainer.processing_class
    tools = trainer.tools
    prompts, prompt_ids, completion_ids, completions = [], [], [], []
    for i in range(n):
        prompt = [{"role": "user", "content": f"Go {i}."}]
        ids = tok.apply_chat_template(prompt, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False)
        failing = fail_every and i % fail_every == 0
        call = '{"name": "fail", "arguments": {"code": 1}}' if failing else '{"name": "sleep", "arguments": {"seconds": 1}}'
        comp = tok(f"<tool_call>\n{call}\n</tool_call><|im_end|>").input_ids
        prompts.append(prompt)
        prompt_ids.append(list(ids))
        completion_ids.append(comp)
        completions.append([parse_response(tok, comp, prefix=list(ids), tools=tools)])
    return prompts, prompt_ids, completion_ids, completions
