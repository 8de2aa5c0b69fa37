"""`env_client.adapters.skyrl_dataset`: the env's task file -> the dataset file SkyRL trains on.

The files are read back the way SkyRL's `PromptDataset` (skyrl 0.3.0, skyrl/train/dataset/dataset.py)
reads them: `datasets.load_dataset("parquet" | "json", data_files=..., keep_in_memory=True)["train"]`
(by the file's extension), then per row `prompt` (chat messages), `env_class`, and every other
column as the env's extras. The episode tests (test_skyrl.py) start their episodes from such a row.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.requirements import require_module

from env_client.adapters.skyrl_dataset import ENV_ID, USER_PROMPT, dataset_rows, system_prompt, write_dataset
from task_factory.demo_task import demo_tasks_file

ROOT = Path(__file__).resolve().parents[2]


def prompt_dataset_rows(path: Path) -> list[tuple[list, str, dict]]:
    """(messages, env_class, extras) per row, as SkyRL's PromptDataset loads and splits them."""
    datasets = require_module("datasets", "datasets", "SkyRL's loader reads the file with Hugging Face datasets")
    loader = "parquet" if path.suffix == ".parquet" else "json"
    ds = datasets.load_dataset(loader, data_files=str(path), keep_in_memory=True)["train"]
    out = []
    for i in range(len(ds)):
        row = dict(ds[i])
        messages, env_class = row.pop("prompt"), row.pop("env_class", None)
        out.append((messages, env_class, row))
    return out


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_dataset_file_has_the_columns_skyrl_reads(tmp_path, suffix):
    if suffix == ".parquet":
        require_module("pyarrow", "datasets", "a .parquet dataset file is written with pyarrow")
    tasks = tmp_path / "tasks.jsonl"  # two tasks; the dataset keeps the file's order
    demo = json.loads(demo_tasks_file().read_text().splitlines()[0])
    tasks.write_text("".join(json.dumps({**demo, "instance_id": i}) + "\n" for i in ("b__task-2", "a__task-1")))
    out = tmp_path / f"train{suffix}"
    assert write_dataset(tasks, out) == 2
    rows = prompt_dataset_rows(out)
    assert [extras["instance_id"] for _, _, extras in rows] == ["b__task-2", "a__task-1"]
    for messages, env_class, extras in rows:
        assert env_class == ENV_ID == "swe_openenv"  # what register() registers
        assert messages == [{"role": "system", "content": system_prompt()}, {"role": "user", "content": USER_PROMPT}]
        assert set(extras) == {"instance_id", "data_source"} and extras["data_source"] == ENV_ID
    assert "<tools>" in system_prompt() and '"name": "str_replace"' in system_prompt()


def test_dataset_command_and_its_errors(tmp_path):
    """`python -m env_client.adapters.skyrl_dataset`: a subset of the task file; an unknown id, a
    file SkyRL cannot read, a task without an instance id fail with one line."""
    cmd = [sys.executable, "-m", "env_client.adapters.skyrl_dataset", "--tasks", str(demo_tasks_file())]
    demo_id = json.loads(demo_tasks_file().read_text().splitlines()[0])["instance_id"]
    ok = subprocess.run([*cmd, "--out", str(tmp_path / "d.jsonl"), "--instance-ids", demo_id],
                        capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert ok.returncode == 0 and "wrote 1 rows" in ok.stdout, ok.stderr
    (row,) = [json.loads(line) for line in (tmp_path / "d.jsonl").read_text().splitlines()]
    assert row["instance_id"] == demo_id and row["env_class"] == ENV_ID and row["prompt"][1]["content"] == USER_PROMPT
    for extra, words in ((["--out", str(tmp_path / "x.jsonl"), "--instance-ids", "no-such-task"], "no-such-task"),
                         (["--out", str(tmp_path / "x.csv")], ".parquet, .jsonl or .json")):
        bad = subprocess.run([*cmd, *extra], capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert bad.returncode == 1 and bad.stderr.startswith("skyrl_dataset: error: ") and words in bad.stderr
        assert "Traceback" not in bad.stderr
    array = tmp_path / "tasks.json"  # a JSON array of tasks, as the server also reads them
    array.write_text(json.dumps([{"instance_id": "x"}, {"problem_statement": "no id"}]))
    with pytest.raises(ValueError, match=r"tasks.json\[1\]: a task needs an instance_id"):
        dataset_rows(array)
