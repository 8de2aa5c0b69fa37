"""Warm start: supervised fine-tuning on demonstrations recorded through the env server.

A randomly initialised (or weak) policy almost never emits a well-formed tool call, so GRPO
has nothing to compare. `warmstart` records, per task, a demonstration built from the gold
patch (one `str_replace` per hunk, then `submit`; kept only if the hidden tests give it
reward 1.0) and, optionally, a lazy one (`submit` at once: reward 0.0), runs every tool call
on a real env-server session, and assembles the token ids the way GRPOTrainer assembles a
rollout (chat-templated prompt with the tool schemas, generated turn, TRL's templated tool
suffix, ...). A short SFT on the generated turns (tool outputs masked) then teaches the
policy both behaviours in equal measure: GRPO starts from a policy whose groups mix rewarded
and unrewarded rollouts, and the rewarded behaviour becomes more likely as it trains.

    trainer-client warmstart --config trainer_client/configs/cpu_smoke.yaml \\
        --env-url http://127.0.0.1:8000 --tasks TASKS.jsonl --out runs/warm
    trainer-client train ... --set model.name_or_path=runs/warm

(`--env-token TOKEN` or `ENV_SERVER_TOKEN` for a replica that requires a bearer token.)

The gold patch reaches only the trainer side (it is in the task file the trainer reads);
the demonstrations go through the env like any agent's actions.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

__all__ = ["Demo", "Turn", "edits_from_patch", "record_demo", "sft", "target_logprobs", "warmstart"]

_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@")


@dataclass
class Turn:
    """One assistant turn: a tool call (name + arguments) or a final text answer."""

    tool: str | None = None
    arguments: dict = field(default_factory=dict)
    text: str = ""

    def message_text(self) -> str:
        if self.tool is None:
            return self.text
        call = json.dumps({"name": self.tool, "arguments": self.arguments})
        return f"<tool_call>\n{call}\n</tool_call>"


@dataclass
class Demo:
    """A recorded episode as token segments: prompt, then (generated turn, tool suffix) pairs."""

    name: str
    prompt_ids: list[int]
    generated: list[list[int]]  # one per assistant turn
    suffixes: list[list[int]]  # templated tool output after each tool turn
    outputs: list[str]  # the env's tool outputs
    reward: float | None

    def completion_ids(self) -> list[int]:
        ids: list[int] = []
        for k, gen in enumerate(self.generated):
            ids += gen
            if k < len(self.suffixes):
                ids += self.suffixes[k]
        return ids

    def completion_tool_mask(self) -> list[int]:
        """1 on generated tokens, 0 on tool-output tokens (as GRPOTrainer's tool_mask)."""
        mask: list[int] = []
        for k, gen in enumerate(self.generated):
            mask += [1] * len(gen)
            if k < len(self.suffixes):
                mask += [0] * len(self.suffixes[k])
        return mask


# ------------------------------------------------------------------------------- patch -> edits
def _hunks(patch: str) -> list[tuple[str, list[str]]]:
    """(path, hunk body lines with their ' ', '-', '+' prefixes) for every hunk of a unified diff."""
    out: list[tuple[str, list[str]]] = []
    path: str | None = None
    body: list[str] | None = None
    for line in patch.splitlines():
        if line.startswith("diff --git "):
            path, body = None, None
        elif line.startswith("+++ "):
            target = line[4:].strip()
            path = None if target == "/dev/null" else target[2:] if target.startswith("b/") else target
        elif _HUNK.match(line):
            if path is None:
                raise ValueError("hunk before its file header (or a deleted file) in the patch")
            body = []
            out.append((path, body))
        elif body is not None and line[:1] in (" ", "-", "+"):
            body.append(line)
        elif body is not None and line.startswith("\\"):
            continue  # "\ No newline at end of file"
    return out


def edits_from_patch(patch: str, count: Callable[[str, str], int]) -> list[Turn]:
    """One `str_replace` per hunk: the changed lines, widened by the hunk's context lines until
    `count(path, old)` (occurrences in the file at the base commit) is exactly 1."""
    turns = []
    for path, body in _hunks(patch):
        changed = [i for i, line in enumerate(body) if line[0] != " "]
        if not changed:
            continue
        lo, hi = changed[0], changed[-1] + 1
        while True:
            window = body[lo:hi]
            old = "\n".join(l[1:] for l in window if l[0] != "+")
            new = "\n".join(l[1:] for l in window if l[0] != "-")
            if old.strip() and count(path, old) == 1:
                break
            if lo == 0 and hi == len(body):
                raise ValueError(f"{path}: no unique anchor for a hunk of the patch")
            lo, hi = max(0, lo - 1), min(len(body), hi + 1)
        turns.append(Turn("str_replace", {"path": path, "old": old, "new": new}))
    if not turns:
        raise ValueError("the patch changes no file")
    return turns


def _count_in_sandbox(env: Any) -> Callable[[str, str], int]:
    """Occurrences of a text in a workspace file, counted by Python inside the env's sandbox."""
    script = ("import base64,sys;print(open(sys.argv[1],encoding='utf-8',errors='surrogateescape').read()"
              ".count(base64.b64decode(sys.argv[2]).decode('utf-8','surrogateescape')))")

    def count(path: str, text: str) -> int:
        b64 = base64.b64encode(text.encode("utf-8", "surrogateescape")).decode()
        out = env.bash(f"python3 -c {shlex.quote(script)} {shlex.quote(path)} {b64}")
        numbers = re.findall(r"^\d+$", out, re.M)
        if not numbers:
            raise RuntimeError(f"could not count occurrences in {path}: {out[:300]}")
        return int(numbers[-1])

    return count


# ------------------------------------------------------------------------------- recording
def default_turn_ids(tok: Any, turn: Turn) -> list[int]:
    """The ids a model generates for `turn`: its text, canonically tokenized, then <|im_end|>."""
    return tok(turn.message_text(), add_special_tokens=False).input_ids + [tok.convert_tokens_to_ids("<|im_end|>")]


def record_demo(trainer: Any, env: Any, row: dict, turns: list[Turn], name: str,
                turn_ids: Callable[[Any, Turn], list[int]] = default_turn_ids) -> Demo:
    """Run `turns` on a fresh session of `env` (a SweEnvironment) for dataset `row`; token ids
    assembled like `trainer`'s rollouts (its tool schemas, its chat template's tool suffix)."""
    tok = trainer.processing_class
    tools = trainer._env_tools[None]
    issue = env.reset(**row)
    first = row["prompt"][-1]
    prompt = [*row["prompt"][:-1], {**first, "content": first["content"] + issue}]  # as TRL appends reset's text
    prompt_ids = list(tok.apply_chat_template(
        conversation=[prompt], tools=tools, add_generation_prompt=True, tokenize=True, return_dict=True,
    )["input_ids"][0])
    generated, suffixes, outputs = [], [], []
    for turn in turns:
        generated.append(turn_ids(tok, turn))
        if turn.tool is None:
            break
        out = str(getattr(env, turn.tool)(**turn.arguments))
        outputs.append(out)
        suffixes.append(list(trainer._get_tool_suffix_ids([{"role": "tool", "name": turn.tool, "content": out}])))
    reward = env.reward
    env.get_reward()  # releases the session
    return Demo(name, prompt_ids, generated, suffixes, outputs, reward)


# ------------------------------------------------------------------------------- SFT
def target_logprobs(model: Any, ids: list[int], mask: list[int]):
    """Log-probs of the masked target tokens of one sequence (the LM head sees only those rows)."""
    import torch

    x = torch.tensor([ids])
    hidden = model.model(input_ids=x).last_hidden_state[0, :-1]
    targets = torch.tensor(ids[1:])
    keep = torch.tensor(mask[1:], dtype=torch.bool)
    logits = model.lm_head(hidden[keep]).float()
    return torch.log_softmax(logits, -1).gather(-1, targets[keep][:, None])[:, 0]


def _save(model: Any, base_dir: str | Path, out: Path) -> None:
    from transformers import AutoTokenizer

    model.save_pretrained(str(out))
    try:
        AutoTokenizer.from_pretrained(str(base_dir)).save_pretrained(str(out))
    except (OSError, ValueError):
        pass  # a model dir without a tokenizer: the run config names the tokenizer


def sft(demos: list[Demo], base_dir: str | Path, out_dir: str | Path, steps: int, lr: float, seed: int = 0,
        log: Callable[[str], None] | None = None, stages: tuple[int, ...] = ()) -> Path:
    """Fine-tune on the demos' generated turns (full batch each step, one loss per token: demos that
    share a prompt and diverge at one token are taught as an even split). Saves model + tokenizer;
    each step in `stages` also saves the model as it was then, in `<out_dir>/stage-<step>`."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    seqs = [(d.prompt_ids + d.completion_ids(), [0] * len(d.prompt_ids) + d.completion_tool_mask()) for d in demos]
    n_targets = sum(sum(mask[1:]) for _, mask in seqs)
    for step in range(steps):
        opt.zero_grad()
        loss = sum(-target_logprobs(model, ids, mask).sum() for ids, mask in seqs) / n_targets
        loss.backward()
        opt.step()
        if log and (step % max(1, steps // 10) == 0 or step == steps - 1):
            log(f"[sft {step + 1}/{steps}] loss={loss.item():.4f}")
        if step + 1 in stages and step + 1 < steps:
            _save(model, base_dir, Path(out_dir) / f"stage-{step + 1}")
    model.eval()
    out = Path(out_dir)
    _save(model, base_dir, out)
    return out


# ------------------------------------------------------------------------------- the command
#: the stumble demonstration's first action: a view of a file that is not there (error kind file_not_found)
STUMBLE_SUFFIX = ".orig"


def warmstart(cfg: Any, out_dir: str | Path, steps: int = 150, lr: float = 1e-2, lazy: bool = True,
              log: Callable[[str], None] = print, stumble: bool = False, stages: tuple[int, ...] = ()) -> Path:
    """Record gold-patch (and lazy) demonstrations for the config's tasks and SFT its model on them.

    `stumble` adds, per task, the gold demonstration preceded by a failing `view` (of the first edited
    file's name + `.orig`): a policy that sometimes errs and recovers, so error sites (channel 2's
    input) occur in its rollouts. `stages`: SFT steps at which a snapshot is also saved.

    Raises `RunSetupError` (trainer_client/run.py) without an env server or a task file, or when no
    task gave a usable demonstration."""
    import tempfile

    from datasets import Dataset

    from trainer_client.config import build_grpo_config, load_tokenizer, model_path
    from trainer_client.environment import make_environment_class
    from trainer_client.run import RunSetupError
    from trainer_client.trainer import SweGRPOTrainer

    if not cfg.env.urls:
        raise RunSetupError("no env server: pass --env-url or set env.urls")
    if not cfg.data.tasks:
        raise RunSetupError("the task file (--tasks) holds the gold patches it needs")
    tasks = {str(r["instance_id"]): r for r in cfg.task_rows()}
    rows = [{"prompt": [{"role": "user", "content": cfg.data.prompt}], "instance_id": iid} for iid in cfg.instance_ids()]
    env_cls = make_environment_class(cfg.env.urls, cfg.env.client, reset_keys=cfg.env.reset_keys, auto_submit=False,
                                     max_output_chars=cfg.env.max_output_chars)
    base = model_path(cfg)
    demos: list[Demo] = []
    try:
        env_cls.runtime.run(env_cls.runtime.pool.connect())  # a refused token (EnvAuthError) fails here, at once
        with tempfile.TemporaryDirectory() as scratch:
            # a trainer only for its tool schemas and tool-suffix templating: the rollouts' token layout
            grpo = build_grpo_config(cfg, output_dir=scratch, report_to=[], save_strategy="no")
            trainer = SweGRPOTrainer(model=base, processing_class=load_tokenizer(cfg), args=grpo,
                                     train_dataset=Dataset.from_list(rows), environment_factory=env_cls)
            for row in rows:
                iid = row["instance_id"]
                patch = (tasks.get(iid) or {}).get("patch") or ""
                probe = env_cls()
                probe.reset(**row)
                try:
                    edits = edits_from_patch(patch, _count_in_sandbox(probe))
                except (ValueError, RuntimeError) as exc:
                    log(f"[warmstart] {iid}: skipped ({exc})")
                    continue
                finally:
                    probe.get_reward()
                expert = record_demo(trainer, env_cls(), row, edits + [Turn("submit"), Turn(text="Done.")],
                                     f"{iid}:gold")
                if expert.reward != 1.0:
                    log(f"[warmstart] {iid}: skipped (the gold demonstration got reward {expert.reward})")
                    continue
                demos.append(expert)
                if stumble and edits:
                    slip = Turn("view", {"path": str(edits[0].arguments["path"]) + STUMBLE_SUFFIX})
                    stumbled = record_demo(trainer, env_cls(), row, [slip, *edits, Turn("submit"), Turn(text="Done.")],
                                           f"{iid}:stumble")
                    if stumbled.reward == 1.0:
                        demos.append(stumbled)
                if lazy:
                    demos.append(record_demo(trainer, env_cls(), row, [Turn("submit"), Turn(text="Done.")],
                                             f"{iid}:lazy"))
                log(f"[warmstart] {iid}: {len(edits)} edit(s), {len(expert.completion_ids())} completion tokens, "
                    f"reward {expert.reward:g}" + (", + a lazy submit (reward 0)" if lazy else ""))
            del trainer
    finally:
        env_cls.runtime.close()
    if not demos:
        raise RunSetupError("no task gave a usable demonstration")
    log(f"[warmstart] SFT on {len(demos)} demonstrations, {steps} steps, lr {lr:g}")
    out = sft(demos, base, out_dir, steps=steps, lr=lr, seed=int(cfg.grpo.get("seed") or 0), log=log, stages=stages)
    (out / "warmstart.json").write_text(json.dumps(
        {"base": str(base), "steps": steps, "lr": lr, "demos": [
            {"name": d.name, "reward": d.reward, "completion_tokens": len(d.completion_ids())} for d in demos]},
        indent=2))
    log(f"[warmstart] model saved to {out} (use: --set model.name_or_path={out})")
    return out
