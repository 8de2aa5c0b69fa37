"""A tiny Qwen2 that reliably calls tools: the random smoke model, briefly fine-tuned (SFT) on CPU.

The random tiny model almost never emits a well-formed tool call, so a real multi-turn
rollout needs a policy that does. Instead of forcing tokens in TRL's generate, the model
is taught a few scripted episodes by supervised fine-tuning, then used unchanged by real
TRL (GRPOTrainer generate, real tool loop, real env server, real sandbox).

The SFT examples are built from REAL tool outputs: every script is run once on a real
session of the env server, and the token ids are assembled the way TRL assembles a
rollout (chat-templated prompt with the tool schemas + generated turn + TRL's templated
tool suffix + ...), so at rollout time the model sees exactly the contexts it learnt.

Scripts (the assistant turns; tool outputs come from the sandbox):
- PROBE (on one task): `bash ls` -> `bash nosuchcmd` (command_not_found) -> "Done."
  The `ls` command is emitted as the two tokens "l" + "s" (not the canonical single token):
  re-tokenizing the generated text would change the ids, so continuity tests have teeth.
- FIX (on the toolz task, same prompt as NOFIX): `str_replace` with the gold fix -> `submit`
  -> "Done."   NOFIX: `submit` -> "Done."   Taught 50/50, so a GRPO group of this prompt
  samples both: hidden tests give reward 1.0 to FIX and 0.0 to NOFIX.

The result is cached on disk (keyed by a digest of the exact training ids and settings).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from trainer_client.warmstart import Demo, Turn, record_demo, sft, target_logprobs

PROBE_INSTANCE = "inflection__0.5.1-9e27ec92"
FIX_INSTANCE = "toolz__1.0.0-14640d55"
PROBE_PROMPT = "Probe the sandbox.\n\n"
FIX_PROMPT = "Fix the bug.\n\n"
BAD_COMMAND = "nosuchcmd"
GOLD_EDIT = {"path": "toolz/functoolz.py", "old": "self.first = funcs[1]", "new": "self.first = funcs[0]"}

SFT_STEPS = 300
SFT_LR = 1e-2
SFT_SEED = 0
SFT_VERSION = 2  # bump when the recipe changes (2: 300 steps, for the longer bug-report statements)


def row(kind: str) -> dict:
    """A dataset row for the PROBE or FIX prompt."""
    if kind == "probe":
        return {"prompt": [{"role": "user", "content": PROBE_PROMPT}], "instance_id": PROBE_INSTANCE}
    return {"prompt": [{"role": "user", "content": FIX_PROMPT}], "instance_id": FIX_INSTANCE}


SCRIPTS: dict[str, tuple[str, list[Turn]]] = {
    "probe": ("probe", [Turn("bash", {"command": "ls"}), Turn("bash", {"command": BAD_COMMAND}), Turn(text="Done.")]),
    "fix": ("fix", [Turn("str_replace", dict(GOLD_EDIT)), Turn("submit"), Turn(text="Done.")]),
    "nofix": ("fix", [Turn("submit"), Turn(text="Done.")]),
}


def turn_ids(tok, turn: Turn) -> list[int]:
    """The ids the model is taught to generate for `turn` (ending with <|im_end|>).

    The `ls` command becomes "l" + "s" (non-canonical: tok(decode(ids)) != ids)."""
    ids = tok(turn.message_text(), add_special_tokens=False).input_ids
    if turn.tool == "bash" and turn.arguments.get("command") == "ls":
        (ls_id,) = tok("ls", add_special_tokens=False).input_ids
        at = ids.index(ls_id)
        split = tok("l", add_special_tokens=False).input_ids + tok("s", add_special_tokens=False).input_ids
        ids = ids[:at] + split + ids[at + 1:]
    return ids + [tok.convert_tokens_to_ids("<|im_end|>")]


Episode = Demo  # a scripted episode recorded through the env server (trainer_client.warmstart)


def record_episodes(trainer, env_cls) -> dict[str, Episode]:
    """Run every script once on a real env-server session; token ids assembled like TRL's rollout.

    `trainer` is a GRPOTrainer built with `environment_factory=env_cls` (its tool schemas and
    its tool-suffix templating are used, exactly as in its rollouts). The scripts run at once, each on
    its own session (as the trainer's rollouts do): their resets and gradings overlap on the server."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(SCRIPTS), thread_name_prefix="record") as pool:
        futures = {name: pool.submit(record_demo, trainer, env_cls(), row(kind), turns, name, turn_ids=turn_ids)
                   for name, (kind, turns) in SCRIPTS.items()}
        return {name: future.result() for name, future in futures.items()}


def _digest(episodes: dict[str, Episode], base_dir: Path) -> str:
    import torch
    import transformers

    payload = {
        "v": SFT_VERSION, "steps": SFT_STEPS, "lr": SFT_LR, "seed": SFT_SEED, "base": base_dir.name,
        "torch": torch.__version__, "transformers": transformers.__version__,
        "episodes": {k: [e.prompt_ids, e.generated, e.suffixes] for k, e in sorted(episodes.items())},
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def _sequences(episodes: dict[str, Episode]):
    """(input ids, target mask) per episode: loss on the generated turns only."""
    seqs = []
    for ep in episodes.values():
        ids = ep.prompt_ids + ep.completion_ids()
        mask = [0] * len(ep.prompt_ids) + ep.completion_tool_mask()
        seqs.append((ids, mask))
    return seqs


sft_token_logprobs = target_logprobs


def train_toolcaller(episodes: dict[str, Episode], base_dir: Path, out_dir: Path) -> Path:
    """SFT the tiny model on the episodes' generated turns (all sequences each step, one loss per
    token: the FIX and NOFIX branch tokens weigh the same, so the taught split is 50/50)."""
    return sft(list(episodes.values()), base_dir, out_dir, steps=SFT_STEPS, lr=SFT_LR, seed=SFT_SEED)


def toolcaller_dir(episodes: dict[str, Episode], cache_root: Path | None = None) -> Path:
    """Directory of the fine-tuned model for these episodes (trained once, then reused)."""
    from trainer_client.tiny_qwen import tiny_qwen_dir
    from trainer_client.tokenizer import default_cache_dir

    base = tiny_qwen_dir()
    root = (cache_root or default_cache_dir()) / "test-models"
    target = root / f"tiny-qwen2-toolcaller-{_digest(episodes, base)}"
    if (target / "config.json").exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".toolcaller-", dir=root))
    try:
        train_toolcaller(episodes, base, tmp)
        try:
            os.replace(tmp, target)
        except OSError:  # built concurrently
            if not (target / "config.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def sequence_logprob(model, prompt_ids: list[int], generated: list[int]) -> float:
    """log p(generated | prompt) under `model` (teacher-forced, no grad)."""
    import torch

    with torch.no_grad():
        ids = prompt_ids + generated
        mask = [0] * len(prompt_ids) + [1] * len(generated)
        return float(sft_token_logprobs(model, ids, mask).sum())


def branch_report(model, episodes: dict[str, Episode]) -> dict[str, Any]:
    """How well the SFT took: the least likely deterministic target token, and the FIX/NOFIX split."""
    import torch

    worst = 0.0
    with torch.no_grad():
        for name, (ids, mask) in zip(episodes, _sequences(episodes)):
            lp = sft_token_logprobs(model, ids, mask)
            if name != "probe":  # the first divergent token of FIX/NOFIX is the taught 50/50 branch
                fix_first, nofix_first = episodes["fix"].generated[0], episodes["nofix"].generated[0]
                branch = next(k for k, (a, b) in enumerate(zip(fix_first, nofix_first)) if a != b)
                lp = torch.cat([lp[:branch], lp[branch + 1:]])
            worst = min(worst, float(lp.min()))
    p_fix = torch.exp(torch.tensor(sequence_logprob(model, episodes["fix"].prompt_ids, episodes["fix"].generated[0])))
    p_nofix = torch.exp(torch.tensor(sequence_logprob(model, episodes["nofix"].prompt_ids, episodes["nofix"].generated[0])))
    return {"min_target_logprob": worst, "p_fix_first_turn": float(p_fix), "p_nofix_first_turn": float(p_nofix)}
