"""Two tiny tool-calling teacher checkpoints for a real env-server trace (two training stages).

The random smoke model (trainer_client/tiny_qwen.py, real Qwen2 tokenizer) is fine-tuned on the
trace's own state(t) prompts, tokenized the way `transformers serve` tokenizes a chat
request (its own message conversion + the Qwen2.5 chat template with the tool schemas),
to answer each state with a teacher action in Qwen's `<tool_call>` format. Stage "early"
trains until every target token is the greedy choice by a logit margin; stage "late" is
that checkpoint trained further and saved WITHOUT tokenizer files (like a weights-only
warm-start checkpoint), so serving it needs the served copy's added tokenizer.

Both are cached on disk under the project cache (keyed by a digest of the exact training
ids and recipe): built once (a minute or two on one CPU thread), then reused.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from trainer_client.replay import FrozenState
from trainer_client.warmstart import Turn, default_turn_ids, target_logprobs

INSTANCE = "calc-1"
# The student: the second `cat nope.txt` repeats a failing call (an error site: its
# observation carries error_kind), then it looks at the file instead of fixing it.
STUDENT = [("bash", {"command": "ls"}), ("bash", {"command": "cat nope.txt"}),
           ("bash", {"command": "cat nope.txt"}), ("view", {"path": "calc.py"})]
# What both teachers are taught to answer at state(t): t=0 agrees with the student (no pair),
# t=1..3 differ from it (a pair each when both teachers answer so).
TEACHER = [Turn("bash", {"command": "ls"}), Turn("view", {"path": "calc.py"}), Turn("view", {"path": "calc.py"}),
           Turn("str_replace", {"path": "calc.py", "old": "a - b", "new": "a + b"})]

LR = 1e-2
CHUNK = 20            # steps between margin checks
MIN_MARGIN = 2.0      # every target token must beat the runner-up logit by this much ...
MAX_STEPS = 400       # ... within this many steps (stage early)
LATE_EXTRA = 40       # stage late: this many steps more
RECIPE_VERSION = 1
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")


def served_prompt_ids(tok, state: FrozenState) -> list[int]:
    """The prompt ids `transformers serve` builds for this state's chat request (non-null fields,
    its message conversion, the chat template with the tools and the generation prompt)."""
    from transformers.cli.serving.utils import BaseHandler, Modality

    messages = [{k: v for k, v in m.items() if v is not None} for m in state.messages]
    inputs = BaseHandler.get_processor_inputs_from_messages(messages, Modality.LLM)
    out = tok.apply_chat_template(inputs, tools=state.tools, add_generation_prompt=True, tokenize=True,
                                  return_dict=True)
    return list(out["input_ids"])


def _examples(tok, states: list[FrozenState]) -> list[tuple[list[int], list[int]]]:
    """(ids, target mask) per state: the served prompt, then the teacher's turn + <|im_end|>."""
    assert [s.t for s in states] == list(range(len(TEACHER))), [s.t for s in states]
    out = []
    for state, turn in zip(states, TEACHER):
        prompt, gen = served_prompt_ids(tok, state), default_turn_ids(tok, turn)
        out.append((prompt + gen, [0] * len(prompt) + [1] * len(gen)))
    return out


def min_margin(model, examples) -> float:
    """The smallest (target logit - best other logit) over every target token (teacher-forced)."""
    import torch

    worst = float("inf")
    with torch.no_grad():
        for ids, mask in examples:
            hidden = model.model(input_ids=torch.tensor([ids])).last_hidden_state[0, :-1]
            keep = torch.tensor(mask[1:], dtype=torch.bool)
            logits = model.lm_head(hidden[keep]).float()
            target = torch.tensor(ids[1:])[keep]
            right = logits.gather(-1, target[:, None])[:, 0]
            logits.scatter_(-1, target[:, None], float("-inf"))
            worst = min(worst, float((right - logits.max(-1).values).min()))
    return worst


def _train(model, opt, examples, steps: int) -> None:
    n = sum(sum(mask[1:]) for _, mask in examples)
    model.train()
    for _ in range(steps):
        opt.zero_grad()
        loss = sum(-target_logprobs(model, ids, mask).sum() for ids, mask in examples) / n
        loss.backward()
        opt.step()
    model.eval()


def _digest(examples, base: Path) -> str:
    import torch
    import transformers

    payload = {"v": RECIPE_VERSION, "lr": LR, "chunk": CHUNK, "margin": MIN_MARGIN, "max": MAX_STEPS,
               "late": LATE_EXTRA, "base": base.name, "torch": torch.__version__,
               "transformers": transformers.__version__, "examples": examples}
    return hashlib.sha256(json.dumps(payload).encode()).hexdigest()[:16]


def build_teachers(out: Path, base: Path, examples) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    steps, margin = 0, min_margin(model, examples)
    while margin < MIN_MARGIN:
        if steps >= MAX_STEPS:
            raise RuntimeError(f"teacher SFT: min logit margin {margin:.3f} after {steps} steps")
        _train(model, opt, examples, CHUNK)
        steps += CHUNK
        margin = min_margin(model, examples)
    model.save_pretrained(str(out / "early"))
    shutil.copytree(base, out / "early", dirs_exist_ok=True,
                    ignore=lambda d, names: [n for n in names if n not in TOKENIZER_FILES])
    _train(model, opt, examples, LATE_EXTRA)
    model.save_pretrained(str(out / "late"))  # weights only: no tokenizer files
    info = {"early": {"steps": steps, "min_margin": margin},
            "late": {"steps": steps + LATE_EXTRA, "min_margin": min_margin(model, examples)}}
    (out / "recipe.json").write_text(json.dumps(info, indent=2))
    return info


def teacher_checkpoints(states: list[FrozenState], cache_root: Path | None = None) -> tuple[Path, Path]:
    """(early, late) checkpoint directories for this trace (trained once, then cached)."""
    from trainer_client.tiny_qwen import tiny_qwen_dir
    from trainer_client.tokenizer import load_qwen_tokenizer

    base = tiny_qwen_dir()
    examples = _examples(load_qwen_tokenizer(), states)
    target = cached_teachers(f"replay-teachers-{_digest(examples, base)}", base, examples, cache_root)
    return target / "early", target / "late"


def cached_teachers(name: str, base: Path, examples, cache_root: Path | None = None) -> Path:
    """:func:`build_teachers` into ``<cache>/test-models/<name>`` (``name`` carries the recipe's digest),
    built once; a build finished concurrently by another process is taken as it is."""
    from trainer_client.tokenizer import default_cache_dir

    root = (cache_root or default_cache_dir()) / "test-models"
    target = root / name
    if not (target / "recipe.json").exists():
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
        try:
            build_teachers(tmp, base, examples)
            try:
                os.replace(tmp, target)
            except OSError:  # built concurrently
                if not (target / "recipe.json").exists():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target
