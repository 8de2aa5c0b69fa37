"""`accelerate launch --num_processes 2` on the CPU (gloo): the GPU cluster's code path, DDP and FSDP2.

Two real env servers (bwrap, the small pack) on loopback; `trainer-client train` with the smoke
model runs one optimizer step under each accelerate config of trainer_client/configs/accelerate/
*_cpu2.yaml. A replayed pair file gives channel 3 (DPO, with its reference forward) a nonzero
gradient, so the step really moves the parameters. Checked from the run's artifacts: both ranks ran
rollouts and their sessions reached both replicas (the servers' traces), the logged env/channel
metrics cover the global batch, and the ranks' full parameters are equal after the step and differ
from the initial ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.servers import start_server_process

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
WORLD = 2
PER_DEVICE = 2  # cpu_smoke.yaml's per_device_train_batch_size


@pytest.fixture(scope="module")
def replicas(bwrap, small_pack_file, tmp_path_factory):
    servers = [start_server_process(small_pack_file, tmp_path_factory.mktemp(f"env-{k}")) for k in "ab"]
    yield [(proc.url, Path(proc.argv[proc.argv.index("--data-dir") + 1])) for proc in servers]
    for proc in servers:
        proc.stop()


@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory):
    from trainer_client.pair_records import PairProvenance, PairRecord, ToolCall

    path = tmp_path_factory.mktemp("pairs") / "pairs.jsonl"
    records = [PairRecord(state_id=f"ep{i}:1", messages=[{"role": "user", "content": f"Fix the bug {i}."}], tools=[],
                          chosen=ToolCall(tool_name="bash", arguments={"command": "ls"}),
                          rejected=ToolCall(tool_name="submit"), n_teachers_agreeing=1,
                          provenance=PairProvenance(episode_id=f"ep{i}", t=1, teachers=["t"], agreeing=["t"]))
               for i in range(4)]
    path.write_text("".join(r.model_dump_json() + "\n" for r in records))
    return path


def launch(accelerate_config: str, urls: list[str], tasks: Path, pairs: Path, out: Path, steps: int = 1) -> str:
    """`accelerate launch --config_file ... -m trainer_client.cli train ...`; its output (asserts rc 0)."""
    cmd = [str(Path(sys.executable).parent / "accelerate"), "launch", "--config_file",
           str(ROOT / "trainer_client/configs/accelerate" / accelerate_config), "--num_processes", str(WORLD),
           "-m", "trainer_client.cli", "train", "--config", str(ROOT / "trainer_client/configs/cpu_smoke.yaml"),
           *(a for url in urls for a in ("--env-url", url)), "--tasks", str(tasks), "--output-dir", str(out),
           "--max-steps", str(steps), "--set", "grpo.max_completion_length=32", "--set", "output.rank_report=true",
           "--set", "output.plot=false", "--set", f"loss.pairs.path={pairs}", "--set", 'grpo.save_strategy="no"']
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1",
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_DISABLE_TELEMETRY": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    return output


def _initial_digest() -> str:
    from transformers import AutoModelForCausalLM

    from trainer_client.distributed import parameters_digest
    from trainer_client.tiny_qwen import tiny_qwen_dir

    return parameters_digest(AutoModelForCausalLM.from_pretrained(str(tiny_qwen_dir())))[0]


@pytest.mark.parametrize("accelerate_config, distributed_type", [("ddp_cpu2.yaml", "MULTI_CPU"),
                                                                  ("fsdp2_cpu2.yaml", "FSDP")])
def test_two_processes_train_against_two_replicas(accelerate_config, distributed_type, replicas, small_pack_file,
                                                  pairs_file, tmp_path):
    urls = [url for url, _ in replicas]
    traces_before = [len(list((d / "traces").glob("*.jsonl"))) for _, d in replicas]
    out = tmp_path / "run"
    launch(accelerate_config, urls, small_pack_file, pairs_file, out)

    reports = [json.loads((out / "ranks" / f"rank{k}.json").read_text()) for k in range(WORLD)]
    assert [r["rank"] for r in reports] == list(range(WORLD))
    assert {r["world_size"] for r in reports} == {WORLD} and {r["distributed_type"] for r in reports} == {distributed_type}
    assert all(r["sharded"] for r in reports) == (distributed_type == "FSDP")
    # every rank ran its share of the rollouts, and its sessions went to both replicas (round robin from its rank)
    assert [r["rollouts"] for r in reports] == [PER_DEVICE] * WORLD
    for r in reports:
        assert sorted(r["sessions_by_replica"].values()) == [1, 1], r["sessions_by_replica"]
    # ... and reached the sandboxes: one trace per session on each server
    traces_after = [len(list((d / "traces").glob("*.jsonl"))) for _, d in replicas]
    opened = [sum(r["sessions_by_replica"][f"{u.replace('http', 'ws')}/mux"] for r in reports) for u in urls]
    assert [a - b for a, b in zip(traces_after, traces_before)] == opened == [WORLD, WORLD]
    # logged metrics are the gathered ones: the global batch, the pairs channel's pairs of both ranks
    step = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines() if '"reward"' in l]
    assert len(step) == 1
    assert step[0]["env/rollouts"] == WORLD * PER_DEVICE
    assert step[0]["channels/pairs/used"] == WORLD * 2  # loss.pairs.per_step on each rank
    assert step[0]["channels/pairs"] > 0 and step[0]["grad_norm"] > 0
    # one optimizer step: the ranks hold the same (full) parameters, and they moved
    assert reports[0]["param_digest"] == reports[1]["param_digest"]
    assert reports[0]["param_digest"] != _initial_digest()
