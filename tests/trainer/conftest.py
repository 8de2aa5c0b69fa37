"""Shared fixtures for the trainer-client tests: real tokenizer, real tiny model."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest
from support.requirements import missing
from support.servers import start_server_process


@pytest.fixture(scope="session", autouse=True)
def _few_threads():
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def qwen_tokenizer():
    from trainer_client.tokenizer import load_qwen_tokenizer

    return load_qwen_tokenizer()


# ------------------------------------------------------------------ real env server + a tool-calling tiny model
@pytest.fixture(scope="session")
def small_pack_file():
    """tests/support/taskpacks.py's small pack of real tasks. Where the builder cannot make it (no network,
    a missing toolchain: TaskgenError, or taskpack's RuntimeError "built k/n tasks") this fails
    under CI / SWE_REQUIRE_TASKPACK=1 and skips otherwise; any other exception is a bug: an error."""
    from support.taskpacks import build_small_pack

    from task_factory.sources import TaskgenError

    try:
        return build_small_pack(3)
    except RuntimeError as exc:
        if not (type(exc) is RuntimeError or isinstance(exc, TaskgenError)):
            raise  # NotImplementedError, RecursionError, ...: a bug, not a missing part
        missing("taskpack", f"the task builder could not build the small pack: {exc}"[:2000])


@pytest.fixture(scope="session")
def real_env_url(bwrap, small_pack_file, tmp_path_factory):
    """URL of one real env server (bwrap sandbox, the small pack) shared by the session."""
    proc = start_server_process(small_pack_file, tmp_path_factory.mktemp("env-data"))
    url = proc.url
    yield url
    proc.stop()


@pytest.fixture(scope="session")
def real_env_cls(real_env_url):
    """A SweEnvironment class bound to the session's real env server."""
    from trainer_client.environment import make_environment_class

    env_cls = make_environment_class([real_env_url])
    yield env_cls
    env_cls.runtime.close()


@pytest.fixture(scope="session")
def toolcaller(real_env_cls, tmp_path_factory):
    """(model dir, scripted episodes): the tiny model fine-tuned to follow the scripts of
    tests/trainer/toolcaller_support.py (SFT on CPU on first use, then cached on disk)."""
    from . import toolcaller_support as tc
    from .trainer_support import build_trainer

    recorder = build_trainer(tmp_path_factory.mktemp("record"), real_env_cls)
    episodes = tc.record_episodes(recorder, real_env_cls)
    del recorder
    assert episodes["fix"].reward == 1.0 and episodes["nofix"].reward == 0.0, "the scripted fix must be the gold fix"
    return tc.toolcaller_dir(episodes), episodes
