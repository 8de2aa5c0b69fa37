"""Local teachers: tiny tool-calling checkpoints behind `transformers serve`, over real HTTP.

End to end on the CPU: a real env server (bwrap sandbox) on loopback records an episode
with an error site (a failing `cat`), two local teachers (two training stages of a tiny
Qwen2 fine-tuned on that trace; tests/replay/local_teachers_support.py, cached on disk) are
started as `transformers serve` processes, and the unchanged `replay()` / `trainer-client
replay --local-teacher` query them and mine pairs. No test double anywhere.

Also: failures (a missing checkpoint, a server that dies at start) give a clear error and
leave no process behind; and the paid teachers file carries dated price checks.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import re
import time
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from support.requirements import missing  # noqa: E402

from trainer_client.replay import ReplayOptions, load_teachers, replay  # noqa: E402
from trainer_client.replay.budget import Budget  # noqa: E402
from trainer_client.replay.cli import add_subcommands  # noqa: E402
from trainer_client.replay.client import TeacherClient  # noqa: E402
from trainer_client.replay.local import (  # noqa: E402
    SERVE_PRESETS,
    LocalServeOptions,
    LocalTeacher,
    LocalTeacherError,
    LocalTeachers,
    parse_local_teacher,
    stage_checkpoint,
)

from . import local_teachers_support as ltm  # noqa: E402
from .replay_support import make_task  # noqa: E402

TEACHERS_FILE = Path(__file__).resolve().parents[2] / "trainer_client" / "replay" / "teachers.default.yaml"


def _serve_available() -> None:
    from transformers.utils.import_utils import is_serve_available

    if not is_serve_available():
        missing("transformers-serve", "transformers serve needs fastapi, uvicorn and openai (transformers[serving])")


def _children_serving() -> list[int]:
    """Pids of this process's children that run a local teacher server."""
    me, out = os.getpid(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == me and "trainer_client.replay.local" in cmd:
            out.append(int(entry.name))
    return out


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


# ------------------------------------------------------------------ the trace and the teachers
@pytest.fixture(scope="module")
def env_trace(bwrap, tmp_path_factory):
    """(env url, episode id, state(t) records): STUDENT's episode on a real env server."""
    from support.servers import run_server

    import env_client
    from env_server.config import ServerConfig
    from trainer_client.replay.traces import env_client as http_client
    from trainer_client.replay.traces import fetch_trace
    from verifier.task import load_tasks

    root = tmp_path_factory.mktemp("local-teachers-env")
    tasks = make_task(root, ltm.INSTANCE)

    async def record(url: str):
        pool = env_client.ReplicaPool([url])
        try:
            session, obs = await pool.open_session(instance_id=ltm.INSTANCE)
            for tool, args in ltm.STUDENT:
                await session.call_tool(tool, args)
            await pool.release(session)
        finally:
            await pool.close()
        episode = obs["metadata"]["episode_id"]
        async with http_client() as http:
            return episode, await fetch_trace(http, url, episode)

    with run_server(ServerConfig(tasks_path=tasks, data_dir=root / "data"), load_tasks(tasks)) as server:
        episode, states = asyncio.run(record(server.url))
        yield server.url, episode, states


@pytest.fixture(scope="module")
def teacher_ckpts(env_trace):
    """(early, late): the two training stages (late has no tokenizer files)."""
    _serve_available()
    import torch

    torch.set_num_threads(1)
    return ltm.teacher_checkpoints(env_trace[2])


# ------------------------------------------------------------------ end to end
# the first run fine-tunes the two teachers (a few minutes on one CPU thread), later runs reuse them
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_local_teachers_replay_a_real_trace(env_trace, teacher_ckpts):
    _, episode, states = env_trace
    early, late = teacher_ckpts
    assert [s.next_action.tool_name for s in states] == [t for t, _ in ltm.STUDENT]
    error_sites = [s.t for s in states if s.obs_metadata.get("error_kind")]
    assert error_sites == [2, 3], error_sites  # after each failing `cat nope.txt`
    assert not (late / "tokenizer.json").exists() and (early / "tokenizer.json").exists()

    t0 = time.monotonic()
    with LocalTeachers([LocalTeacher(checkpoint=early, name="early"), LocalTeacher(checkpoint=late, name="late")],
                       threads=1) as local:
        up_s = time.monotonic() - t0
        servers = {s.name: s for s in local.servers}
        assert servers["early"].added_files == []
        assert "tokenizer.json" in servers["late"].added_files  # the served copy got the trainer's tokenizer
        tf = local.teachers
        assert [(t.name, t.price_in, t.price_out, t.api_key_env, t.tool_choice) for t in tf.teachers] == \
            [("early", 0.0, 0.0, None, None), ("late", 0.0, 0.0, None, None)]
        assert all(t.base_url.startswith("http://127.0.0.1:") for t in tf.teachers)
        result = asyncio.run(replay(states, tf, ReplayOptions(max_total_usd=0.0)))
        pgids = [s.proc.pid for s in local.servers]

        # request settings as transformers serve treats them: tool_choice is accepted (and
        # ignored), no temperature leaves the checkpoint's greedy default, max_tokens caps output
        async def ask(cfg):
            client = TeacherClient(cfg, tf.retry, Budget())
            try:
                return await client.ask(states[1])
            finally:
                await client.aclose()

        early_cfg = tf.teachers[0]
        forced = asyncio.run(ask(early_cfg.model_copy(update={"tool_choice": "required", "temperature": None})))
        assert forced.ok and forced.action.tool_name == ltm.TEACHER[1].tool, forced
        cut = asyncio.run(ask(early_cfg.model_copy(update={"max_tokens": 5})))
        assert not cut.ok and cut.error == "no_tool_call" and cut.completion_tokens == 5, cut

    from trainer_client.tokenizer import load_qwen_tokenizer

    tok = load_qwen_tokenizer()
    calls = result.calls
    assert len(calls) == 2 * len(states)
    for c in calls:
        t = int(c.state_id.rsplit(":", 1)[1])
        assert c.ok, (c.teacher, c.state_id, c.error, c.error_detail)
        assert (c.action.tool_name, c.action.arguments) == (ltm.TEACHER[t].tool, ltm.TEACHER[t].arguments)
        assert c.cost_usd == 0.0 and not c.cost_estimated and c.attempts == 1
        # the server tokenized the request exactly as the teachers were trained on it
        assert c.prompt_tokens == len(ltm.served_prompt_ids(tok, states[t]))
    # t=0 agrees with the student (no pair); t=1..3 differ: one pair each, both teachers agreeing
    assert sorted(p.provenance.t for p in result.pairs) == [1, 2, 3]
    for pair in result.pairs:
        assert pair.provenance.episode_id == episode
        assert pair.provenance.teachers == ["early", "late"]
        assert pair.provenance.agreeing == ["early", "late"] and pair.n_teachers_agreeing == 2
        assert pair.provenance.costs == {"early": 0.0, "late": 0.0}
        assert pair.rejected == states[pair.provenance.t].next_action
    at_error = next(p for p in result.pairs if p.provenance.t == 2)
    assert at_error.rejected.arguments == {"command": "cat nope.txt"}
    assert at_error.chosen.tool_name == "view" and at_error.chosen.arguments == {"path": "calc.py"}
    assert all(_group_gone(g) for g in pgids) and _children_serving() == []

    latency = sorted(c.latency_s for c in calls)
    print(f"\nlocal teachers: up in {up_s:.1f}s ("
          + ", ".join(f"{n} {s.startup_s:.1f}s" for n, s in servers.items())
          + f"); per-call latency min {latency[0]:.2f}s median {latency[len(latency) // 2]:.2f}s "
          f"max {latency[-1]:.2f}s; replay wall {result.summary.wall_s:.1f}s")


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_cli_local_teachers_from_the_env_server(env_trace, teacher_ckpts, tmp_path, capsys):
    url, episode, _ = env_trace
    early, late = teacher_ckpts
    parser = argparse.ArgumentParser(prog="trainer-client")
    add_subcommands(parser.add_subparsers(dest="command"))
    out, calls_out = tmp_path / "pairs.jsonl", tmp_path / "calls.jsonl"
    args = parser.parse_args([
        "replay", "--env-url", url, "--episode", episode, "--local-teacher", f"early={early}",
        "--local-teacher", str(late), "--local-threads", "1", "--local-log-dir", str(tmp_path / "logs"),
        "--gate", "error_sites", "--max-usd", "0", "--out", str(out), "--calls-out", str(calls_out),
        "--no-progress"])
    assert args.func(args) == 0
    captured = capsys.readouterr()
    assert "local teachers: early at http://127.0.0.1:" in captured.err
    calls = [json.loads(line) for line in calls_out.read_text().splitlines()]
    assert len(calls) == 4  # gate error_sites: t=2 and t=3, two teachers each
    assert all(c["ok"] and c["cost_usd"] == 0.0 for c in calls)
    assert {c["teacher"] for c in calls} == {"early", "late"}
    pairs = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(p["provenance"]["t"] for p in pairs) == [2, 3]
    assert all(p["provenance"]["teachers"] == ["early", "late"] for p in pairs)
    assert (tmp_path / "logs" / "late.log").read_text()  # logs kept where asked
    assert _children_serving() == []


# ------------------------------------------------------------------ failures
def test_missing_checkpoint_is_a_clear_error_and_starts_nothing(tmp_path, capsys):
    local = LocalTeachers([tmp_path / "no-such-checkpoint"])
    with pytest.raises(LocalTeacherError, match=r"no-such-checkpoint does not exist"):
        local.start()
    assert local.servers == [] and local.workdir is None and _children_serving() == []

    parser = argparse.ArgumentParser(prog="trainer-client")
    add_subcommands(parser.add_subparsers(dest="command"))
    trace = tmp_path / "trace.jsonl"
    trace.write_text(json.dumps({"episode_id": "e", "t": 0, "messages": [{"role": "user", "content": "x"}],
                                 "next_action": {"tool_name": "bash", "arguments": {"command": "ls"}}}) + "\n")
    args = parser.parse_args(["replay", "--traces", str(trace), "--local-teacher", str(tmp_path / "nope"),
                              "--out", str(tmp_path / "pairs.jsonl"), "--no-progress"])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert "replay: error: checkpoint" in err and "nope does not exist" in err
    args = parser.parse_args(["replay", "--traces", str(trace), "--local-teacher", str(tmp_path / "nope"),
                              "--teachers", "x.yaml", "--out", str(tmp_path / "pairs.jsonl")])
    assert args.func(args) == 2
    assert "alternatives" in capsys.readouterr().err


@pytest.mark.slow
def test_a_server_that_dies_at_start_is_reported_with_its_log_and_all_are_stopped(tmp_path):
    _serve_available()
    from trainer_client.tiny_qwen import tiny_qwen_dir

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps({"model_type": "no-such-architecture"}))
    local = LocalTeachers([tiny_qwen_dir(), broken], threads=1, startup_timeout_s=300)
    with pytest.raises(LocalTeacherError) as info:
        local.start()
    msg = str(info.value)
    assert "'broken'" in msg and "exited with code" in msg and "last lines of its log" in msg
    assert "no-such-architecture" in msg  # the log tail says why
    assert len(local.servers) == 2
    for s in local.servers:
        assert s.proc.poll() is not None and _group_gone(s.proc.pid)
    assert local.workdir is None and _children_serving() == []


# ------------------------------------------------------------------ pieces
def test_served_copy_adds_only_what_a_checkpoint_lacks(tmp_path):
    from trainer_client.tiny_qwen import tiny_qwen_dir

    full = tiny_qwen_dir()
    assert stage_checkpoint(full, tmp_path / "a") == []
    assert (tmp_path / "a" / "model.safetensors").is_symlink()

    weights_only = tmp_path / "weights"
    weights_only.mkdir()
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        (weights_only / name).symlink_to(full / name)
    added = stage_checkpoint(weights_only, tmp_path / "b")
    assert {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"} <= set(added)
    assert not (tmp_path / "b" / "tokenizer.json").is_symlink()
    with pytest.raises(LocalTeacherError, match="no a tokenizer|no fallback tokenizer"):
        stage_checkpoint(weights_only, tmp_path / "c", tokenizer=None)

    no_template = tmp_path / "no-template"
    no_template.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (no_template / name).symlink_to(full / name)
    (no_template / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "Qwen2Tokenizer"}))
    assert stage_checkpoint(no_template, tmp_path / "d") == ["chat_template.jinja"]

    with pytest.raises(LocalTeacherError, match="no config.json"):
        stage_checkpoint(tmp_path / "b" / "..", tmp_path / "e")


def test_names_commands_and_teacher_defaults(tmp_path):
    assert parse_local_teacher("a=/x/ckpt") == LocalTeacher(checkpoint=Path("/x/ckpt"), name="a")
    assert parse_local_teacher("/x/a=b") == LocalTeacher(checkpoint=Path("/x/a=b"))
    local = LocalTeachers([tmp_path / "run" / "ckpt", tmp_path / "other" / "ckpt", LocalTeacher(checkpoint=tmp_path, name="x y")])
    assert local._names() == ["ckpt", "ckpt-2", "x y"]
    with pytest.raises(LocalTeacherError, match="given twice"):
        LocalTeachers([LocalTeacher(checkpoint=tmp_path, name="a"), LocalTeacher(checkpoint=tmp_path, name="a")])._names()

    from trainer_client.replay.local import LocalServer

    server = LocalServer(name="x y", model="x-y", checkpoint=tmp_path, served_dir=tmp_path / "x-y",
                         log_path=tmp_path / "log", host="127.0.0.1", port=1234)
    vllm = LocalTeachers([tmp_path], serve="vllm")._command(server)
    assert vllm[:4] == ["vllm", "serve", str(tmp_path / "x-y"), "--served-model-name"] and "1234" in vllm
    assert "--tool-call-parser" in vllm and set(SERVE_PRESETS) == {"transformers", "vllm"}
    custom = LocalTeachers([tmp_path], serve=["srv", "--model={model}", "--port={port}"])._command(server)
    assert custom == ["srv", "--model=x-y", "--port=1234"]
    tc = LocalTeachers([tmp_path], LocalServeOptions(max_tokens=64))._teacher_config(server)
    assert (tc.model, tc.base_url, tc.max_tokens, tc.temperature, tc.tool_choice, tc.api_key()) == \
        ("x-y", "http://127.0.0.1:1234/v1", 64, 0.0, None, None)


# ------------------------------------------------------------------ the paid teachers file
_DATED = re.compile(r"#\s*prices checked (\d{4}-\d{2}-\d{2}) against (https://\S+)")


def test_paid_teachers_file_parses_and_every_price_is_dated():
    tf = load_teachers()  # the packaged file
    assert [t.name for t in tf.teachers] == ["claude-opus-4.7", "gpt-5", "deepseek-v4-pro"]
    assert all(t.price_in > 0 and t.price_out > t.price_in and t.api_key_env for t in tf.teachers)
    blocks = re.split(r"\n  - name: ", TEACHERS_FILE.read_text())[1:]
    assert len(blocks) == len(tf.teachers)
    for teacher, block in zip(tf.teachers, blocks):
        assert block.startswith(teacher.name + "\n")
        checks = _DATED.findall(block)
        assert checks, f"teacher {teacher.name}: no '# prices checked YYYY-MM-DD against URL' comment"
        for date, _url in checks:
            assert dt.date(2026, 1, 1) <= dt.date.fromisoformat(date) <= dt.date.today() + dt.timedelta(days=1)


@pytest.mark.slow
def test_a_served_checkpoint_samples_when_asked_for_a_temperature(tmp_path):
    """`transformers serve` alone keeps a checkpoint's greedy default whatever the request's
    temperature (k samples at temperature 1.0 were k copies); our serve wrapper samples then, as
    the OpenAI API means it, and stays greedy at temperature 0. The random tiny Qwen2 spreads its
    probability over the whole vocabulary, so sampled answers differ at once and greedy ones never."""
    _serve_available()
    import httpx

    from trainer_client.tiny_qwen import tiny_qwen_dir

    with LocalTeachers([tiny_qwen_dir()], threads=1, startup_timeout_s=300) as local:
        teacher = local.teachers.teachers[0]

        def answers(temperature: float) -> list[str]:
            body = {"model": teacher.model, "max_tokens": 12, "temperature": temperature,
                    "messages": [{"role": "user", "content": "Fix the bug."}]}
            out = []
            for _ in range(3):
                reply = httpx.post(f"{teacher.base_url}/chat/completions", json=body, timeout=120)
                reply.raise_for_status()
                out.append(reply.json()["choices"][0]["message"].get("content") or "")
            return out

        greedy, sampled = answers(0.0), answers(1.0)
    assert len(set(greedy)) == 1, greedy
    assert len(set(sampled)) == 3, sampled
