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

`--teachers 100,150`: the same run first trains on the gold demonstrations alone and saves
`runs/warm/teacher-100` and `teacher-150` (local teachers for the replay loop), then the policy on
every demonstration for `--steps` more: one recording and one SFT run for all three checkpoints.
For the random smoke model only the LM-head rows of the demonstrations' tokens are trained
(`SFTRun`, vocabulary "demos"; the loss stays the exact full-vocabulary cross-entropy).

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

__all__ = ["Demo", "Heartbeat", "SFTRun", "Turn", "edits_from_patch", "record_demo", "record_demos", "sft",
           "target_logprobs", "warmstart"]

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


def _duration(seconds: float) -> str:
    """`42 s`, `3 min 05 s`: how the console shows elapsed times and ETAs."""
    s = int(round(seconds))
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


class Heartbeat:
    """A `log` that also speaks when nothing else does: once `every_s` seconds pass without a line, it
    logs what is under way (`status`), and again every `every_s` while that lasts, so a console, a pipe
    or a log file never goes quiet for longer on a slow or busy machine (an SFT step, a grading, the
    model's load). `status(text)` names the work; with `timed`, the line says how long it has run."""

    def __init__(self, log: Callable[[str], None], every_s: float = 20.0) -> None:
        import threading
        import time

        self._log, self.every_s, self._clock = log, every_s, time.monotonic
        self._text, self._timed, self._since = "", False, self._clock()
        self._last = self._clock()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        if every_s > 0:
            threading.Thread(target=self._beat, daemon=True, name="warmstart-heartbeat").start()

    def __call__(self, text: str) -> None:
        with self._lock:
            self._log(text)
            self._last = self._clock()

    def status(self, text: str, timed: bool = True) -> None:
        with self._lock:
            if text != self._text or timed != self._timed:
                self._since = self._clock()
            self._text, self._timed = text, timed

    def _beat(self) -> None:
        while not self._stop.wait(min(1.0, self.every_s)):
            with self._lock:
                now = self._clock()
                if not self._text or now - self._last < self.every_s:
                    continue
                self._log(self._text + (f" ({_duration(now - self._since)})" if self._timed else ""))
                self._last = now

    def close(self) -> None:
        self._stop.set()


def _similar_lengths(members: list[tuple[list[int], list[int]]]) -> list[list[tuple[list[int], list[int]]]]:
    """`members` (completion ids, mask) in batches, longest first, a new batch where a completion is under
    half as long as its batch's first: padding a short one to a long one costs more than a pass of its own."""
    batches: list[list[tuple[list[int], list[int]]]] = []
    for member in sorted(members, key=lambda m: -len(m[0])):
        if batches and 2 * len(member[0]) >= len(batches[-1][0][0]):
            batches[-1].append(member)
        else:
            batches.append([member])
    return batches


#: SFT vocabularies: "full" (every row of the LM head; any model) or "demos" (only the rows of tokens
#: that occur in the demonstrations are trained, every other row is set to zero: for a random model)
VOCABULARIES = ("full", "demos")


class SFTRun:
    """Full-batch SFT of one model through one or more phases (`run`), with snapshots (`save`).

    Every step is one optimizer step over all the phase's demos, one loss per generated token (demos
    that share a prompt and diverge at one token are taught as an even split).

    `vocabulary="demos"` (for a randomly initialised model, such as the CPU smoke model): the output
    rows of tokens that occur in no demonstration are set to zero, so their logit is 0 for every
    input, and only the demos' rows (a few hundred of the tokenizer's 151,665) are trained. The loss
    is still the exact cross-entropy over the FULL vocabulary: the zero rows contribute
    `log(V - |demo vocabulary|)` to each log-partition, added in closed form. The LM head over the
    full vocabulary was ~90% of a step's time on the CPU; here a step costs the transformer body
    alone, and each shared token goes through it once per step (`_tree_nll`: the prompts' common
    prefix, then each prompt's rest, then the completions; about 40% less work on the demo's demos). (With tied embeddings, as the smoke model has, those tokens' input embeddings are zero
    too: they occur in none of the demos.) Never for a pretrained model: it erases those rows.
    """

    def __init__(self, demos: list[Demo], base_dir: str | Path, lr: float, seed: int = 0,
                 vocabulary: str = "full"):
        import math

        import torch
        from transformers import AutoModelForCausalLM

        if vocabulary not in VOCABULARIES:
            raise ValueError(f"vocabulary must be one of {VOCABULARIES}, not {vocabulary!r}")
        torch.manual_seed(seed)
        self.base_dir = base_dir
        self.model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
        self.model.train()
        head = self.model.get_output_embeddings()
        if vocabulary == "demos" and getattr(head, "bias", None) is not None:
            raise ValueError("vocabulary='demos' needs an LM head without a bias")
        self.vocabulary = vocabulary
        self.log_rest: float | None = None
        if vocabulary == "full":
            params = list(self.model.parameters())
        else:
            self._in, self._out = self.model.get_input_embeddings().weight, head.weight
            ids = sorted({i for d in demos for i in d.prompt_ids + d.completion_ids()})
            self.rows = torch.tensor(ids, dtype=torch.long)
            self.index = torch.full((max(self._in.shape[0], self._out.shape[0]),), -1, dtype=torch.long)
            self.index[self.rows] = torch.arange(len(ids))
            tied = self._out is self._in
            with torch.no_grad():
                self.embed = torch.nn.Parameter(self._in[self.rows].clone())
                self.unembed = self.embed if tied else torch.nn.Parameter(self._out[self.rows].clone())
                others = torch.ones(self._out.shape[0], dtype=torch.bool)
                others[self.rows] = False
                self._out[others] = 0.0
            rest = self._out.shape[0] - len(ids)
            self.log_rest = math.log(rest) if rest > 0 else None
            params = [p for p in self.model.parameters() if p is not self._in and p is not self._out]
            params += [self.embed] if tied else [self.embed, self.unembed]
        self.opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
        self.steps_done = 0

    @property
    def vocabulary_size(self) -> int:
        """Rows of the LM head this run trains."""
        return len(self.rows) if self.vocabulary == "demos" else self.model.get_output_embeddings().weight.shape[0]

    def _nll(self, ids: list[int], mask: list[int]):
        """Summed negative log-likelihood of one sequence's target tokens (vocabulary "full")."""
        return -target_logprobs(self.model, ids, mask).sum()

    def _embed(self, ids: Any):
        """Input embeddings of token ids (vocabulary "demos": the trained rows)."""
        import torch
        import torch.nn.functional as F

        return F.embedding(self.index[torch.as_tensor(ids, dtype=torch.long)], self.embed)

    @staticmethod
    def _keys_values(cache: Any) -> list[tuple[Any, Any]]:
        return [(layer.keys, layer.values) for layer in cache.layers]

    @staticmethod
    def _cache(kv: list[tuple[Any, Any]], repeat: int = 1) -> Any:
        """A cache of its own holding `kv` (keys and values per layer), each row `repeat` times: the tensors
        are shared, never changed (a cache appends by concatenation), so several continuations of one
        context each get one."""
        from transformers import DynamicCache

        return DynamicCache([(k.repeat_interleave(repeat, 0), v.repeat_interleave(repeat, 0)) if repeat > 1
                             else (k, v) for k, v in kv])

    def _tree_nll(self, groups: list[tuple[list[int], list[tuple[list[int], list[int]]]]]):
        """Summed negative log-likelihood of the target tokens of every group's members (vocabulary
        "demos"; a group: the demos that share a prompt), each shared token through the model once: the
        prompts' common prefix (the system prompt, the tools' schemas: most of each prompt) once for all
        groups, the rest of each prompt once for its group's members, then the members' completions,
        right-padded, in batches of similar length (a short lazy submit is not padded to a long fix)."""
        import torch

        body = self.model.model
        prompts = [p for p, _ in groups]
        limit = min(len(p) for p in prompts) - 1  # every prompt keeps a token of its own after the prefix
        shared = 0
        while shared < limit and all(p[shared] == prompts[0][shared] for p in prompts):
            shared += 1
        prefix = None
        if shared:
            prefix = self._keys_values(body(inputs_embeds=self._embed(prompts[0][:shared])[None],
                                            use_cache=True).past_key_values)
        total = torch.zeros(())
        for prompt, members in groups:
            head = body(inputs_embeds=self._embed(prompt[shared:])[None],
                        past_key_values=self._cache(prefix) if prefix else None, use_cache=True)
            context = self._keys_values(head.past_key_values)
            last = head.last_hidden_state[:, -1:]  # predicts each completion's first token
            for batch in _similar_lengths(members):
                total = total + self._completions_nll(context, last, batch)
        return total

    def _completions_nll(self, context: list[tuple[Any, Any]], last: Any,
                         members: list[tuple[list[int], list[int]]]):
        """Summed NLL of the target tokens of `members` (completion ids, target mask), all continuing the
        context whose keys and values are `context` and whose last hidden state is `last`."""
        import torch
        import torch.nn.functional as F

        body = self.model.model
        k, width = len(members), max(len(ids) for ids, _ in members)
        ids = torch.zeros(k, width, dtype=torch.long)  # padding: row 0, after every real token (never attended to)
        keep = torch.zeros(k, width, dtype=torch.bool)
        for j, (completion, mask) in enumerate(members):
            ids[j, :len(completion)] = self.index[torch.tensor(completion)]
            keep[j, :len(mask)] = torch.tensor(mask, dtype=torch.bool)
        rest = body(inputs_embeds=F.embedding(ids, self.embed), past_key_values=self._cache(context, k),
                    use_cache=True)
        hidden = torch.cat([last.expand(k, 1, -1), rest.last_hidden_state[:, :-1]], 1)[keep]
        logits = (hidden @ self.unembed.T).float()
        log_z = torch.logsumexp(logits, -1)
        if self.log_rest is not None:  # every other token's logit is exactly 0
            log_z = torch.logaddexp(log_z, torch.tensor(self.log_rest))
        return (log_z - logits.gather(-1, ids[keep][:, None])[:, 0]).sum()

    def _loss_terms(self, demos: list[Demo]) -> tuple[list[Callable[[], Any]], int]:
        """One closure per forward pass of a step (its summed NLL), and the number of target tokens."""
        n_targets = sum(sum(d.completion_tool_mask()) for d in demos)
        if self.vocabulary == "full":
            seqs = [(d.prompt_ids + d.completion_ids(), [0] * len(d.prompt_ids) + d.completion_tool_mask())
                    for d in demos]
            return [lambda ids=ids, mask=mask: self._nll(ids, mask) for ids, mask in seqs], n_targets
        groups: dict[tuple[int, ...], list[tuple[list[int], list[int]]]] = {}
        for d in demos:
            groups.setdefault(tuple(d.prompt_ids), []).append((d.completion_ids(), d.completion_tool_mask()))
        tree = [(list(p), m) for p, m in groups.items()]
        return [lambda: self._tree_nll(tree)], n_targets

    def run(self, demos: list[Demo], steps: int, label: str = "sft", log: Callable[[str], None] | None = None,
            snapshots: dict[int, Path] | None = None) -> float:
        """`steps` full-batch steps on `demos`; `snapshots` {step: dir}: save the model as it is after
        that step of this phase. Logs `[LABEL step/steps] loss=...  elapsed, ETA` about five times (a
        `Heartbeat` log also whenever it would otherwise be quiet: the latest step's line)."""
        import time

        terms, n_targets = self._loss_terms(demos)
        snapshots = snapshots or {}
        started = time.monotonic()
        loss = float("nan")
        status = log.status if isinstance(log, Heartbeat) else None
        if status is not None:
            status(f"[{label} 0/{steps}] the first step")
        for step in range(steps):
            self.opt.zero_grad()
            total = sum(term() for term in terms) / n_targets
            total.backward()
            self.opt.step()
            loss = total.item()
            self.steps_done += 1
            done = step + 1
            elapsed = time.monotonic() - started
            eta = f", ETA {_duration(elapsed / done * (steps - done))}" if done < steps else ""
            line = f"[{label} {done}/{steps}] loss={loss:.4f}  {_duration(elapsed)}{eta}"
            if status is not None:
                status(line, timed=False)
            if log and (step % max(1, steps // 5) == 0 or done == steps):
                log(line)
            if done in snapshots:
                self.save(snapshots[done])
        return loss

    def save(self, out: str | Path) -> Path:
        """Save the model (with the base's tokenizer, when it has one) to `out`."""
        import torch

        if self.vocabulary == "demos":
            with torch.no_grad():
                self._in[self.rows] = self.embed
                self._out[self.rows] = self.unembed
        out = Path(out)
        _save(self.model, self.base_dir, out)
        return out


def sft(demos: list[Demo], base_dir: str | Path, out_dir: str | Path, steps: int, lr: float, seed: int = 0,
        log: Callable[[str], None] | None = None, stages: tuple[int, ...] = (), vocabulary: str = "full") -> Path:
    """Fine-tune on the demos' generated turns (full batch each step, one loss per token: demos that
    share a prompt and diverge at one token are taught as an even split). Saves model + tokenizer;
    each step in `stages` also saves the model as it was then, in `<out_dir>/stage-<step>`.
    `vocabulary`: see `SFTRun` ("demos" only for a randomly initialised model)."""
    run = SFTRun(demos, base_dir, lr, seed=seed, vocabulary=vocabulary)
    run.run(demos, steps, "sft", log, {s: Path(out_dir) / f"stage-{s}" for s in stages if 0 < s < steps})
    run.model.eval()
    return run.save(out_dir)


# ------------------------------------------------------------------------------- the command
#: the stumble demonstration's first action: a view of a file that is not there (error kind file_not_found)
STUMBLE_SUFFIX = ".orig"


def record_demos(cfg: Any, lazy: bool = True, stumble: bool = False,
                 log: Callable[[str], None] = print) -> list[Demo]:
    """Per task of the config: its gold demonstration (kept when the hidden tests reward it 1.0), and
    optionally a stumble (a failing `view` first) and a lazy one (`submit` at once), each run on a
    fresh session of the config's env server. Raises `RunSetupError` as `warmstart` does."""
    import tempfile
    import time

    from trainer_client.run import RunSetupError

    if not cfg.env.urls:
        raise RunSetupError("no env server: pass --env-url or set env.urls")
    if not cfg.data.tasks:
        raise RunSetupError("the task file (--tasks) holds the gold patches it needs")
    if cfg.env.profile != "default":
        raise RunSetupError(f"warmstart records its demonstrations with the default profile's tools (view, "
                            f"str_replace, submit): set env.profile=default (not {cfg.env.profile!r})")
    tasks = {str(r["instance_id"]): r for r in cfg.task_rows()}
    rows = [{"prompt": [{"role": "user", "content": cfg.data.prompt}], "instance_id": iid} for iid in cfg.instance_ids()]
    kinds = ", ".join(["gold"] + (["stumble"] if stumble else []) + (["lazy"] if lazy else []))
    # said before the imports below (torch, transformers, TRL: seconds, tens of them on a busy machine)
    log(f"[warmstart] recording demonstrations through the env server: {len(rows)} task(s) x ({kinds})")
    status = log.status if isinstance(log, Heartbeat) else (lambda text, timed=True: None)
    status("[warmstart] starting: torch, transformers and TRL, the tokenizer and the tools' schemas")
    started = time.monotonic()

    from datasets import Dataset

    from trainer_client.config import build_grpo_config, load_tokenizer, model_path
    from trainer_client.environment import make_environment_class
    from trainer_client.trainer import SweGRPOTrainer

    env_cls = make_environment_class(cfg.env.urls, cfg.env.client, reset_keys=cfg.env.reset_keys, auto_submit=False,
                                     max_output_chars=cfg.env.max_output_chars)
    demos: list[Demo] = []
    try:
        env_cls.runtime.run(env_cls.runtime.pool.connect())  # a refused token (EnvAuthError) fails here, at once
        with tempfile.TemporaryDirectory() as scratch:
            # a trainer only for its tool schemas and tool-suffix templating: the rollouts' token layout
            grpo = build_grpo_config(cfg, output_dir=scratch, report_to=[], save_strategy="no")
            trainer = SweGRPOTrainer(model=model_path(cfg), processing_class=load_tokenizer(cfg), args=grpo,
                                     train_dataset=Dataset.from_list(rows), environment_factory=env_cls)
            for k, row in enumerate(rows, 1):
                iid = row["instance_id"]
                where = f"[warmstart] {k}/{len(rows)} {iid}"
                patch = (tasks.get(iid) or {}).get("patch") or ""
                status(f"{where}: reading the files the gold patch edits")
                probe = env_cls()
                probe.reset(**row)
                try:
                    edits = edits_from_patch(patch, _count_in_sandbox(probe))
                except (ValueError, RuntimeError) as exc:
                    log(f"{where}: skipped ({exc})")
                    continue
                finally:
                    probe.get_reward()
                status(f"{where}: the gold demonstration (its edits, then the hidden tests)")
                expert = record_demo(trainer, env_cls(), row, edits + [Turn("submit"), Turn(text="Done.")],
                                     f"{iid}:gold")
                if expert.reward != 1.0:
                    log(f"{where}: skipped (the gold demonstration got reward {expert.reward})")
                    continue
                demos.append(expert)
                extra = []
                if stumble and edits:
                    slip = Turn("view", {"path": str(edits[0].arguments["path"]) + STUMBLE_SUFFIX})
                    status(f"{where}: the stumble (a failing view, the edits, the hidden tests)")
                    stumbled = record_demo(trainer, env_cls(), row, [slip, *edits, Turn("submit"), Turn(text="Done.")],
                                           f"{iid}:stumble")
                    if stumbled.reward == 1.0:
                        demos.append(stumbled)
                        extra.append("a stumble (reward 1)")
                if lazy:
                    status(f"{where}: the lazy submit (the hidden tests)")
                    demos.append(record_demo(trainer, env_cls(), row, [Turn("submit"), Turn(text="Done.")],
                                             f"{iid}:lazy"))
                    extra.append("a lazy submit (reward 0)")
                log(f"{where}: {len(edits)} edit(s), {len(expert.completion_ids())} completion tokens, "
                    f"reward {expert.reward:g}" + "".join(f", + {e}" for e in extra)
                    + f"  ({_duration(time.monotonic() - started)})")
            del trainer
    finally:
        env_cls.runtime.close()
    if not demos:
        raise RunSetupError("no task gave a usable demonstration")
    return demos


def warmstart(cfg: Any, out_dir: str | Path, steps: int = 150, lr: float = 1e-2, lazy: bool = True,
              log: Callable[[str], None] = print, stumble: bool = False, stages: tuple[int, ...] = (),
              teachers: tuple[int, ...] = (), vocabulary: str = "auto", heartbeat_s: float = 20.0) -> Path:
    """Record gold-patch (and lazy) demonstrations for the config's tasks and SFT its model on them.

    `stumble` adds, per task, the gold demonstration preceded by a failing `view` (of the first edited
    file's name + `.orig`): a policy that sometimes errs and recovers, so error sites (channel 2's
    input) occur in its rollouts. `stages`: SFT steps at which a snapshot is also saved
    (`<out_dir>/stage-<step>`).

    `teachers` (steps, e.g. (60, 120)): the same run first trains on the gold demonstrations alone for
    max(teachers) steps, saving `<out_dir>/teacher-<step>` at each of those steps (greedy local
    teachers of different training stages for the replay loop), then continues on every demonstration
    for `steps` steps: the policy, in `<out_dir>`. One recording and one SFT run yield all of them.

    `vocabulary`: "full", "demos" (see `SFTRun`: much faster on the CPU, for a random model only) or
    "auto": "demos" for the config's random smoke model (`tiny-qwen`), "full" for any other model.

    `heartbeat_s`: when that long passes without a line, `log` is told what is under way (`Heartbeat`;
    0: never).

    Raises `RunSetupError` (trainer_client/run.py) without an env server or a task file, or when no
    task gave a usable demonstration."""
    if heartbeat_s > 0 and not isinstance(log, Heartbeat):
        heartbeat = Heartbeat(log, heartbeat_s)
        try:
            return warmstart(cfg, out_dir, steps=steps, lr=lr, lazy=lazy, log=heartbeat, stumble=stumble,
                             stages=stages, teachers=teachers, vocabulary=vocabulary, heartbeat_s=heartbeat_s)
        finally:
            heartbeat.close()
    import time

    from trainer_client.config import TINY_MODEL, model_path

    if vocabulary == "auto":
        vocabulary = "demos" if cfg.model.name_or_path == TINY_MODEL else "full"
    started = time.monotonic()
    demos = record_demos(cfg, lazy=lazy, stumble=stumble, log=log)
    recorded_s = time.monotonic() - started
    base = model_path(cfg)
    out = Path(out_dir)
    if isinstance(log, Heartbeat):
        log.status(f"[warmstart] {len(demos)} demonstrations recorded; loading the model for the SFT")
    run = SFTRun(demos, base, lr, seed=int(cfg.grpo.get("seed") or 0), vocabulary=vocabulary)
    vocab_note = (f"; the {run.vocabulary_size} tokens of the demonstrations' vocabulary trained, every other "
                  "output row zero" if vocabulary == "demos" else "")
    teacher_dirs: dict[int, Path] = {}
    if teachers:
        gold = [d for d in demos if d.name.endswith(":gold")]
        teacher_dirs = {s: out / f"teacher-{s}" for s in sorted(set(teachers)) if s > 0}
        log(f"[warmstart] SFT 1/2, teachers: {max(teacher_dirs)} steps on the {len(gold)} gold demonstrations, "
            f"lr {lr:g}, a teacher saved at step {', '.join(map(str, teacher_dirs))}{vocab_note}")
        run.run(gold, max(teacher_dirs), "sft teachers", log, teacher_dirs)
        log(f"[warmstart] SFT 2/2, policy: {steps} more steps on all {len(demos)} demonstrations")
        label = "sft policy"
    else:
        log(f"[warmstart] SFT on {len(demos)} demonstrations, {steps} steps, lr {lr:g}{vocab_note}")
        label = "sft"
    run.run(demos, steps, label, log, {s: out / f"stage-{s}" for s in stages if 0 < s < steps})
    run.model.eval()
    if isinstance(log, Heartbeat):
        log.status(f"[warmstart] saving the model to {out}")
    run.save(out)
    (out / "warmstart.json").write_text(json.dumps(
        {"base": str(base), "steps": steps, "lr": lr, "vocabulary": vocabulary,
         "teachers": {str(s): {"dir": d.name, "steps": s} for s, d in teacher_dirs.items()},
         "seconds": {"record": round(recorded_s, 1), "sft": round(time.monotonic() - started - recorded_s, 1)},
         "demos": [{"name": d.name, "reward": d.reward, "completion_tokens": len(d.completion_ids())}
                   for d in demos]},
        indent=2))
    log(f"[warmstart] model saved to {out} (use: --set model.name_or_path={out})"
        + "".join(f"; teacher {d}" for d in teacher_dirs.values()))
    return out
