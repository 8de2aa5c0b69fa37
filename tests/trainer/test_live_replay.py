"""Channel 3 fed during a real run: `trainer-client train` with the replay loop on, against the real
env server (bwrap sandbox) on loopback; then `--resume` restores the loss state exactly.

The teacher is tests/support/teacher_double.py (a named test double of an OpenAI-compatible server:
the point here is the loop inside training, not the teacher's quality; local model teachers are
tested in tests/replay/test_local_teachers.py and run in `make demo`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from support.teacher_double import FakeTeacherServer, Reply

from support.servers import start_server_process

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def always_git_diff(model: str, body: dict, n: int) -> Reply:
    return Reply.call("bash", command="git diff")  # never what the scripted policy does: a pair per state


@pytest.fixture(scope="module")
def server(bwrap, small_pack_file, tmp_path_factory):
    proc = start_server_process(small_pack_file, tmp_path_factory.mktemp("env-data"))
    url = proc.url
    yield url
    proc.stop()


def run_config(server, small_pack_file, toolcaller, out: Path, teachers: Path, steps: int):
    from trainer_client.config import load_config

    from . import toolcaller_support as tc

    cfg = load_config(ROOT / "trainer_client/configs/cpu_smoke.yaml", [
        f"model.name_or_path={toolcaller[0]}", f"env.urls=[\"{server}\"]", f"data.tasks={small_pack_file}",
        f"grpo.output_dir={out}", f"grpo.max_steps={steps}", "grpo.save_steps=2", "grpo.save_total_limit=2",
        "grpo.max_completion_length=192", "grpo.per_device_train_batch_size=2", "grpo.num_generations=2",
        "loss.pairs.weight=0.5", "loss.pairs.per_step=2", "output.plot=false",
        "replay.enabled=true", f"replay.teachers={teachers}", "replay.min_agreeing=1",
    ])
    cfg.data.prompt, cfg.data.instance_ids = tc.FIX_PROMPT, [tc.FIX_INSTANCE]
    return cfg


def test_train_with_the_loop_on_feeds_the_pairs_channel_and_resume_restores_it(server, small_pack_file, toolcaller,
                                                                      tmp_path):
    from trainer_client.losses.pairs_channel import ReferenceLogps
    from trainer_client.run import train
    from trainer_client.trainer import load_initial_policy

    out = tmp_path / "run"
    with FakeTeacherServer(always_git_diff) as fake:
        teachers = tmp_path / "teachers.yaml"
        teachers.write_text(json.dumps({"teachers": [
            {"name": "double", "model": "double", "base_url": fake.base_url, "price_in": 0, "price_out": 0}]}))
        # 3 steps: checkpoints at step 2 (save_steps) and at the end; step 3 trains on the pairs step 2's
        # rollouts mined (a 4th step, the earlier setting, showed nothing more, twice: before and after resuming)
        trainer = train(run_config(server, small_pack_file, toolcaller, out, teachers, steps=3))
        rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
        steps = [r for r in rows if "channels/pairs/used" in r]
        assert len(steps) == 3
        assert steps[0]["channels/pairs/buffer"] == 0  # nothing replayed before the first rollouts ended
        assert any(r["channels/pairs/used"] > 0 and r["channels/pairs"] != 0 for r in steps), steps
        assert steps[-1]["replay/pairs_mined"] > 0 and fake.bodies()
        state = trainer.loss_channels(trainer.model)["pairs"]
        sources = {(r.provenance.source, r.provenance.train_step is not None) for r in state.records}
        assert sources == {("live", True)}

        # the checkpoint at step 2 holds the loss state; resuming from it restores that state exactly
        saved = torch.load(out / "checkpoint-2" / "channels.pt", weights_only=False)
        assert saved["loss"]["pairs"]["records"], "pairs had reached the buffer by step 2"
        shutil.rmtree(out / "checkpoint-3")  # resume from step 2 (the last checkpoint left)
        resumed = train(run_config(server, small_pack_file, toolcaller, out, teachers, steps=3), resume=True)
    # resuming at step 2 of 3 restored the buffer, the sampler and the references before any new pair
    saved_pairs = saved["loss"]["pairs"]
    restored = resumed._resumed_channels["loss"]["pairs"]
    assert restored["records"] == saved_pairs["records"]
    after = resumed.loss_channels(resumed.model)["pairs"]
    n = len(saved_pairs["records"])
    assert [r.model_dump(mode="json") for r in after.records[:n]] == saved_pairs["records"]
    assert {i: after.reference.state_dict()[i] for i in range(n)} == saved_pairs["reference"]
    # ... and they are the initial policy's values, not the step-2 policy's (no re-basing)
    initial = ReferenceLogps()
    initial.compute(load_initial_policy(str(toolcaller[0]), resumed.model), after.pairs[:n])
    at_step2 = ReferenceLogps()
    step2 = load_initial_policy(str(out / "checkpoint-2"), resumed.model)
    at_step2.compute(step2, after.pairs[:n])
    for i in range(n):
        assert initial.state_dict()[i] == pytest.approx(saved_pairs["reference"][i], abs=1e-4)
    assert any(at_step2.state_dict()[i] != pytest.approx(saved_pairs["reference"][i], abs=1e-4)
               for i in range(n))
