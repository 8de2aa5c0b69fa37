"""A SkyRL dataset from the env's task file: one row per task, in the columns SkyRL reads.

    python -m env_client.adapters.skyrl_dataset --tasks tasks.jsonl --out train.parquet
    # then: data.train_data="['train.parquet']" environment.env_class=swe_openenv

SkyRL's `PromptDataset` (skyrl.train.dataset) loads `.parquet`, `.json` / `.jsonl` files with
Hugging Face `datasets`, takes each row's `prompt` (chat messages) and `env_class`, and hands every
other column to the env as `extras` (`skyrl_gym.make(env_class, env_config, extras=row)`). A row
here is

    {"prompt": [{"role": "system", "content": system_prompt()},
                {"role": "user", "content": "Fix this issue:\\n\\n"}],
     "env_class": "swe_openenv", "instance_id": "<the task>", "data_source": "swe_openenv"}

`SWEOpenEnv.init` resets the episode with the row's `instance_id` and appends the issue the
replica sends to the last prompt message, so the task file only has to name the tasks (its
`instance_id`s; the replicas serve the same file). `data_source` is what SkyRL's evaluation groups
its metrics by. Framework-free: importing this module imports neither skyrl-gym nor SkyRL;
writing Parquet needs pyarrow (`.jsonl` needs nothing).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from contract import get_profile
from env_client.adapters import write_rows
from env_client.errors import MissingDependencyError

__all__ = ["ENV_ID", "USER_PROMPT", "build_parser", "dataset_rows", "main", "read_instance_ids", "system_prompt",
           "write_dataset"]

#: the env_class a SkyRL dataset row names (what `env_client.adapters.skyrl.register` registers)
ENV_ID = "swe_openenv"
#: the user message the issue is appended to (by `SWEOpenEnv.init`)
USER_PROMPT = "Fix this issue:\n\n"


def system_prompt(instructions: str | None = None, profile: str | None = None) -> str:
    """A system prompt listing the tools of ``profile`` (None: the default) the way Hermes-format chat
    templates do, after ``instructions`` (None: the profile's own, the contract's one prompt)."""
    chosen = get_profile(profile)
    instructions = chosen.instructions if instructions is None else instructions
    tools = "\n".join(json.dumps(spec.openai(), ensure_ascii=False) for spec in chosen.specs())
    return (f"{instructions}\n\n# Tools\n\nYou may call one or more functions.\n<tools>\n{tools}\n</tools>\n\n"
            "For each call, reply with a JSON object inside <tool_call></tool_call> tags:\n"
            '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


def _records(path: Path, text: str) -> list[tuple[str, Any]]:
    """(where, record) of a JSONL file, or of a JSON array / object (how the env server reads it)."""
    stripped = text.lstrip()
    if path.suffix != ".jsonl" and stripped.startswith(("[", "{")):
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            if stripped.startswith("["):
                raise ValueError(f"{path}: not a JSON array") from None
        else:  # one task, or a list of them
            return [(f"{path}[{i}]", r) for i, r in enumerate(data if isinstance(data, list) else [data])]
    records = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                records.append((f"{path}:{n}", json.loads(line)))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}: invalid JSON: {exc.msg}") from None
    return records


def read_instance_ids(tasks_path: str | Path) -> list[str]:
    """The `instance_id` of every task of an env task file (JSONL, or a JSON array / object), in
    order. ValueError naming the record without one, or a duplicate."""
    path = Path(tasks_path)
    records = _records(path, path.read_text(encoding="utf-8"))
    ids: list[str] = []
    seen: set[str] = set()
    for where, record in records:
        instance_id = record.get("instance_id") if isinstance(record, dict) else None
        if not isinstance(instance_id, str) or not instance_id:
            raise ValueError(f"{where}: a task needs an instance_id")
        if instance_id in seen:
            raise ValueError(f"{where}: duplicate instance_id {instance_id!r}")
        seen.add(instance_id)
        ids.append(instance_id)
    return ids


def dataset_rows(tasks_path: str | Path, instance_ids: list[str] | None = None, env_class: str = ENV_ID,
                 prompt: list[dict[str, str]] | None = None, data_source: str = ENV_ID) -> list[dict[str, Any]]:
    """One SkyRL row per task of `tasks_path` (only `instance_ids`, in the file's order, when given;
    ValueError for an id the file lacks). `prompt` defaults to `system_prompt()` + `USER_PROMPT`."""
    ids = read_instance_ids(tasks_path)
    if instance_ids:
        unknown = sorted(set(instance_ids) - set(ids))
        if unknown:
            raise ValueError(f"not in {tasks_path}: {', '.join(unknown)}")
        keep = set(instance_ids)
        ids = [i for i in ids if i in keep]
    messages = prompt or [{"role": "system", "content": system_prompt()}, {"role": "user", "content": USER_PROMPT}]
    return [{"prompt": [dict(m) for m in messages], "env_class": env_class, "instance_id": i,
             "data_source": data_source} for i in ids]


def write_dataset(tasks_path: str | Path, out: str | Path, **options: Any) -> int:
    """Write `dataset_rows(tasks_path, **options)` to `out` (`.parquet`: pyarrow; `.jsonl` / `.json`:
    JSON lines, which SkyRL's json loader reads); the number of rows."""
    return write_rows(dataset_rows(tasks_path, **options), out, "SkyRL")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m env_client.adapters.skyrl_dataset",
                                     description="Write a SkyRL dataset (prompt, env_class, instance_id, data_source "
                                     "per task) from the env's task file.")
    parser.add_argument("--tasks", required=True, metavar="FILE", help="the env's task file (JSONL or a JSON array)")
    parser.add_argument("--out", required=True, metavar="FILE", help="train.parquet, or a .jsonl / .json file")
    parser.add_argument("--instance-ids", metavar="A,B", help="only these tasks (comma-separated; default: all)")
    parser.add_argument("--env-class", default=ENV_ID, help=f"the env_class column (default: {ENV_ID}, what "
                        "register() registers)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """`python -m env_client.adapters.skyrl_dataset`: 0, or 1 with one line on stderr."""
    args = build_parser().parse_args(argv)
    ids = [i.strip() for i in (args.instance_ids or "").split(",") if i.strip()]
    try:
        n = write_dataset(args.tasks, args.out, instance_ids=ids or None, env_class=args.env_class,
                          data_source=args.env_class)
    except (OSError, ValueError, MissingDependencyError) as exc:
        print(f"skyrl_dataset: error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {n} rows to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
