"""The CPU trainer image, for real: built offline (docker/build-trainer-image.sh), CPU torch
and no vLLM inside, and a one-step GRPO smoke run (configs/cpu_smoke.yaml: tiny random
Qwen2 + the offline Qwen2 tokenizer) in a trainer container against an env container of
the compose deployment, over the compose network with a bearer token (the image alone also
loads its model with no network at all, as a non-root user).

Skips without a Docker engine or compose binary, unless CI=true or SWE_REQUIRE_DOCKER=1.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from containers_support import COMPOSE_FILE, ENV_UID, ROOT, TIMINGS, free_port_pair, wait_healthy

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def trainer_image(engine) -> str:
    """Build (or find up to date) the CPU trainer image offline; cached by its build-inputs label."""
    start = time.monotonic()
    proc = subprocess.run(["bash", str(ROOT / "docker" / "build-trainer-image.sh")], capture_output=True,
                          text=True, timeout=1500, cwd=ROOT)
    TIMINGS["trainer_image_build_s"] = time.monotonic() - start
    assert proc.returncode == 0, f"build-trainer-image.sh failed:\n{proc.stderr[-4000:]}"
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def env_replica(engine, compose, env_image, task_pack):
    """One env replica from compose.yaml (token required) under a unique project; `down -v` afterwards."""
    pack_dir, _ = task_pack
    project = f"swetrain{uuid.uuid4().hex[:8]}"
    port = free_port_pair()
    token = secrets.token_urlsafe(16)
    env = {**os.environ, "SWE_TASKS_DIR": str(pack_dir), "SWE_ENV_PORTS": f"{port}-{port}",
           "SWE_ENV_UID": str(ENV_UID if os.geteuid() == 0 else os.geteuid()),
           "SWE_ENV_GID": str(ENV_UID if os.geteuid() == 0 else os.getegid()),
           "SWE_ENV_IMAGE": env_image, "ENV_SERVER_TOKEN": token, "COMPOSE_PROJECT_NAME": project}
    base = [*compose, "-f", str(COMPOSE_FILE), "-p", project]

    def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([*base, *args], env=env, capture_output=True, text=True, timeout=timeout)

    up = run("up", "-d", "--no-build", "env")
    try:
        assert up.returncode == 0, f"compose up failed:\n{up.stdout}\n{up.stderr}"
        (container,), _ = wait_healthy(engine, project, 1, timeout_s=180)
        yield {"container": container, "network": f"{project}_default", "token": token, "pack": pack_dir}
    finally:
        run("down", "-v", "--remove-orphans", "--timeout", "10")


def test_trainer_image_is_cpu_only_and_offline(engine, trainer_image):
    """CPU torch, no vLLM, the train stack importable, the smoke model prebuilt and loadable
    as a non-root user with no network at all."""
    probe = (
        "import importlib.util as u, json, torch, trl, transformers\n"
        "from trainer_client.tiny_qwen import tiny_qwen_dir\n"
        "from trainer_client.tokenizer import load_qwen_tokenizer\n"
        "d = tiny_qwen_dir()\n"
        "m = transformers.AutoModelForCausalLM.from_pretrained(str(d))\n"
        "print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda, 'trl': trl.__version__,\n"
        "    'vllm': u.find_spec('vllm') is not None, 'dir': str(d), 'params': sum(p.numel() for p in m.parameters()),\n"
        "    'hello': load_qwen_tokenizer()('Hello')['input_ids']}))\n"
    )
    out = engine.containers.run(trainer_image, ["python3", "-c", probe], remove=True, network_mode="none",
                                user="65534:65534", environment={"HOME": "/tmp", "HF_HUB_OFFLINE": "1"})
    info = json.loads(out.decode().strip().splitlines()[-1])
    assert info["cuda"] is None and "+cpu" in info["torch"], info
    assert info["vllm"] is False and info["trl"] == "1.16.0", info
    assert info["dir"].startswith("/opt/swe-openenv-cache/"), info  # prebuilt, not built on the fly
    assert 5_000_000 < info["params"] < 20_000_000 and info["hello"] == [9707], info
    attrs = engine.images.get(trainer_image).attrs
    assert attrs["Config"]["Labels"].get("org.swe-openenv.build-inputs")
    assert attrs["Size"] < 3 * 1024**3, f"CPU trainer image is {attrs['Size'] / 1024**3:.1f} GiB"


def test_one_step_smoke_run_against_the_env_container(engine, trainer_image, env_replica, tmp_path: Path):
    """`trainer-client train --config configs/cpu_smoke.yaml --max-steps 1` in the trainer image,
    on the compose network, reaching the env replica by its service name with the token."""
    pack = env_replica["pack"]
    out_dir = tmp_path / "runs"
    out_dir.mkdir()
    out_dir.chmod(0o777)
    container = env_replica["container"]
    traces_before = _trace_count(container)
    start = time.monotonic()
    trainer = engine.containers.run(
        trainer_image,
        ["trainer-client", "train", "--config", "configs/cpu_smoke.yaml", "--env-url", "http://env:8000",
         "--tasks", str(pack / "tasks.jsonl"), "--max-steps", "1", "--output-dir", "/runs/smoke"],
        detach=True, network=env_replica["network"], user=f"{os.getuid()}:{os.getgid()}",
        environment={"HOME": "/tmp", "HF_HUB_OFFLINE": "1", "ENV_SERVER_TOKEN": env_replica["token"]},
        volumes={str(pack): {"bind": str(pack), "mode": "ro"}, str(out_dir): {"bind": "/runs", "mode": "rw"}},
        mem_limit="6g", labels={"org.swe-openenv.test": "trainer-smoke"},
    )
    try:
        status = trainer.wait(timeout=900)
        logs = trainer.logs().decode(errors="replace")
    finally:
        trainer.remove(force=True)
    TIMINGS["trainer_smoke_step_s"] = time.monotonic() - start
    assert status["StatusCode"] == 0, f"trainer exited {status}:\n{logs[-6000:]}"
    # the per-step table (trainer_client/metrics.py): its header, then the row of step 1 with a reward
    assert re.search(r"^ *step +reward ", logs, re.M) and re.search(r"^ +1 +-?[0-9.]+ ", logs, re.M), logs[-4000:]
    rows = [json.loads(line) for line in (out_dir / "smoke" / "metrics.jsonl").read_text().splitlines() if line]
    steps = [r for r in rows if "reward" in r]
    assert steps and steps[-1]["step"] == 1 and isinstance(steps[-1]["reward"], (int, float)), rows
    assert (out_dir / "smoke" / "final" / "config.json").exists()
    # the episodes really ran on the env replica: one trace per rollout (batch 2 x 2 generations)
    assert _trace_count(container) - traces_before >= 2


def test_the_trainer_is_refused_without_the_token(engine, trainer_image, env_replica):
    """The replica's token is what lets the trainer in (so the smoke run above did use it)."""
    pack = env_replica["pack"]
    out = engine.containers.run(
        trainer_image,
        ["sh", "-c", f"trainer-client train --config configs/cpu_smoke.yaml --env-url http://env:8000 "
                     f"--tasks {pack}/tasks.jsonl --max-steps 1 --output-dir /tmp/r; echo EXIT=$?"],
        remove=True, network=env_replica["network"], user=f"{os.getuid()}:{os.getgid()}",
        environment={"HOME": "/tmp", "HF_HUB_OFFLINE": "1"},
        volumes={str(pack): {"bind": str(pack), "mode": "ro"}}, stderr=True,
    ).decode(errors="replace")
    assert "EXIT=2" in out and "bearer token" in out, out[-3000:]


def _trace_count(container) -> int:
    code, out = container.exec_run(["sh", "-c", "ls /data/*/traces/*.jsonl 2>/dev/null | wc -l"])
    assert code == 0, out
    return int(out)
