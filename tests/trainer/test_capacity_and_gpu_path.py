"""Capacity and the GPU path, exercised on the CPU against real env servers on loopback (bwrap sandbox, real tasks):

- a full replica makes new rollouts wait (bounded, one log line per wait episode, a metric)
  instead of failing; the trainer compares the replicas' advertised capacity with its
  concurrent rollouts at start;
- a one-step `train` with LoRA (peft section), loss channels and `report_to: [tensorboard]`:
  only adapter parameters change, the channel losses are finite, TensorBoard event files appear.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

import pytest
from support.pairs import write_pairs

import trainer_client
from env_client import ClientConfig, EnvCapacityError, mux_url
from trainer_client.config import build_grpo_config, load_config
from trainer_client.environment import make_environment_class

from support.servers import start_server_process

pytestmark = pytest.mark.slow
SMOKE = Path(trainer_client.__file__).parent / "configs" / "cpu_smoke.yaml"
PROMPT = [{"role": "user", "content": "fix it"}]


def _ids(tasks: Path) -> list[str]:
    return [json.loads(l)["instance_id"] for l in Path(tasks).read_text().splitlines() if l.strip()]


@pytest.fixture(scope="module")
def server_factory(bwrap, small_pack_file, tmp_path_factory):
    procs = []

    def start(max_sessions: int) -> str:
        proc = start_server_process(small_pack_file, tmp_path_factory.mktemp("env"), max_sessions=max_sessions)
        url = proc.url
        procs.append(proc)
        return url

    yield start
    for proc in procs:
        proc.stop()


def test_full_replica_makes_rollouts_wait_then_succeed(server_factory, small_pack_file, caplog):
    url = server_factory(1)
    iid = _ids(small_pack_file)[0]
    env_cls = make_environment_class([url], ClientConfig(capacity_wait_s=120, capacity_poll_s=0.2))
    pool = env_cls.runtime.pool
    results: dict[int, object] = {}

    def rollout(k: int) -> None:
        try:
            env = env_cls()
            env.reset(instance_id=iid, prompt=PROMPT)
            out = env.bash("echo rollout-$((40 + 2))")
            time.sleep(0.5)  # hold the only slot a while
            results[k] = (out, env.get_reward(), env.infra_error)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            results[k] = exc

    try:
        assert env_cls.runtime.run(pool.capacity()) == {mux_url(url): 1}
        caplog.set_level(logging.WARNING, logger="env_client")
        threads = [threading.Thread(target=rollout, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert all(isinstance(r, tuple) for r in results.values()) and len(results) == 3, results
        for out, reward, infra in results.values():
            assert "rollout-42" in out and reward == 0.0 and infra is None
        assert pool.capacity_waits >= 2 and pool.capacity_wait_s > 0  # two of three had to wait
        starts = [r for r in caplog.records if "at its session limit" in r.getMessage()]
        ends = [r for r in caplog.records if "capacity wait over" in r.getMessage()]
        assert 1 <= len(starts) <= 2 and len(ends) == len(starts)  # one line per wait episode, not per retry
    finally:
        env_cls.runtime.close()

    # without a wait budget the same situation fails at once: the limit is the server's, not the client's
    strict = make_environment_class([url], ClientConfig(capacity_wait_s=0))
    try:
        holder, other = strict(), strict()
        holder.reset(instance_id=iid, prompt=PROMPT)
        with pytest.raises(EnvCapacityError):
            other.reset(instance_id=iid, prompt=PROMPT)
        holder.get_reward()
    finally:
        strict.runtime.close()


def test_capacity_report_says_when_replicas_are_short():
    from trainer_client.run import capacity_report

    grpo = build_grpo_config(load_config(SMOKE, ["data.instance_ids=[t]", "grpo.per_device_train_batch_size=4",
                                                 "grpo.num_generations=4"]))
    assert grpo.generation_batch_size == 4
    ok = capacity_report({"ws://a/mux": 2, "ws://b/mux": 2}, grpo, 600)
    assert ok.endswith(": ok") and "advertise 4 sessions" in ok and "concurrent rollouts: 4" in ok
    short = capacity_report({"ws://a/mux": 1, "ws://b/mux": None}, grpo, 600).splitlines()
    assert "SHORT by 3" in short[0] and "1 replica(s) do not advertise" in short[0]
    assert "WARNING" in short[1] and "(4 rollouts) exceeds every slot there is (1)" in short[1]
    assert "not advertised" in capacity_report({"ws://a/mux": None}, grpo, 600)


def test_one_step_train_with_lora_channels_tensorboard_and_capacity_wait(server_factory, small_pack_file,
                                                                         tmp_path, capsys):
    """A 2-rollout batch against a 2-slot replica whose second slot is held by someone else until
    the trainer's pool starts waiting: the step waits, then trains (LoRA), and logs it all."""
    import torch
    from safetensors.torch import load_file

    from trainer_client.run import train
    from trainer_client.tiny_qwen import tiny_qwen_dir

    url = server_factory(2)
    iid = _ids(small_pack_file)[0]
    blocker_cls = make_environment_class([url])
    blocker = blocker_cls()
    blocker.reset(instance_id=iid, prompt=PROMPT)  # one of the two slots is taken
    released = threading.Event()

    class ReleaseOnWait(logging.Handler):
        def emit(self, record):
            if "at its session limit" in record.getMessage() and not released.is_set():
                released.set()
                threading.Timer(1.0, blocker._release).start()  # free the slot a second later

    handler = ReleaseOnWait()
    logging.getLogger("env_client").addHandler(handler)
    out = tmp_path / "run"
    pairs = write_pairs(tmp_path / "pairs.jsonl", 2)
    cfg = load_config(SMOKE, [
        f"env.urls=[{url}]", f"data.instance_ids=[{iid}]", f"grpo.output_dir={out}", "grpo.max_steps=1",
        "grpo.max_completion_length=32", "grpo.save_strategy='no'", "grpo.report_to=[tensorboard]",
        "peft.r=4", "peft.alpha=8", f"loss.pairs.path={pairs}", "loss.hints.weight=0.1", "loss.pairs.weight=0.05",
        "loss.pairs.per_step=1", "env.client.capacity_wait_s=300", "env.client.capacity_poll_s=0.2",
        "output.plot=false",
    ])
    try:
        trainer = train(cfg)
    finally:
        logging.getLogger("env_client").removeHandler(handler)
        blocker_cls.runtime.close()
    printed = capsys.readouterr().out
    assert "env capacity: 1 replica(s) advertise 2 sessions" in printed and "concurrent rollouts: 2" in printed
    assert released.is_set(), "the trainer's rollouts never had to wait"

    rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    step = next(r for r in rows if "reward" in r)
    assert step["env/capacity_waits"] >= 1 and step["env/capacity_wait_s"] > 0
    assert step["env/infra_failures"] == 0
    for key in ("channels/grpo", "channels/pairs", "channels/hints", "channels/total", "loss"):
        assert key in step and step[key] == step[key], key  # present and finite (the JSONL keeps finite numbers)
    assert step["channels/pairs/used"] == 1

    # LoRA: the base weights are the tiny model's, untouched; the adapters moved
    base = load_file(str(tiny_qwen_dir() / "model.safetensors"))
    model = trainer.model
    changed_lora = 0
    for name, p in model.named_parameters():
        if "lora_" in name:
            changed_lora += bool("lora_B" in name and p.detach().abs().sum() > 0)  # B starts at 0
            continue
        key = name.removeprefix("base_model.model.").replace(".base_layer", "")
        assert not p.requires_grad and torch.equal(p.detach(), base[key]), name
    assert changed_lora > 0
    assert (out / "final" / "adapter_model.safetensors").is_file()

    events = list((out / "runs").rglob("events.out.tfevents.*"))
    assert events and any(e.stat().st_size > 0 for e in events)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(events[0].parent))
    acc.Reload()
    assert any(tag.endswith("reward") for tag in acc.Tags()["scalars"]), acc.Tags()["scalars"]
