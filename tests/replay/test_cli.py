"""The `replay` CLI: standalone module and as a trainer-client subcommand."""

import argparse
import json
import subprocess
import sys

import yaml

from trainer_client.pair_records import PairRecord
from trainer_client.replay import load_teachers
from trainer_client.replay.cli import add_subcommands

from support.teacher_double import FakeTeacherServer, Reply
from .replay_support import bash, state, teachers

PAIR_KEYS = {"state_id", "messages", "tools", "chosen", "rejected", "n_teachers_agreeing", "provenance"}


def write_inputs(tmp_path, base_url):
    trace = tmp_path / "trace.jsonl"
    states = [state(t, bash("ls"), error_kind="test_failure" if t == 1 else None) for t in range(3)]
    states.append(state(3, None))
    trace.write_text("".join(s.model_dump_json() + "\n" for s in states), encoding="utf-8")
    cfg = tmp_path / "teachers.yaml"
    tf = teachers(base_url, api_key_env="FAKE_TEACHER_KEY")
    cfg.write_text(yaml.safe_dump(tf.model_dump(mode="json")))
    return trace, cfg


def test_standalone_module_writes_pairs_and_prints_summary(tmp_path):
    with FakeTeacherServer(lambda m, b, n: Reply.call("bash", command="pytest -q")) as fake:
        trace, cfg = write_inputs(tmp_path, fake.base_url)
        out = tmp_path / "out" / "pairs.jsonl"
        proc = subprocess.run(
            [sys.executable, "-m", "trainer_client.replay", "--traces", str(trace), "--teachers", str(cfg),
             "--out", str(out), "--max-usd", "1.0", "--summary-out", str(tmp_path / "s.json"),
             "--calls-out", str(tmp_path / "calls.jsonl")],
            capture_output=True, text=True, timeout=120,
            env={"FAKE_TEACHER_KEY": "sk-cli-secret", "PATH": "", "PYTHONPATH": ""},
        )
        assert proc.returncode == 0, proc.stderr
        assert len(fake.requests) == 9
    lines = out.read_text().splitlines()
    assert len(lines) == 3
    for line in lines:
        row = json.loads(line)
        assert set(row) == PAIR_KEYS
        assert set(row["provenance"]) >= {"episode_id", "t", "teachers", "costs"}
        PairRecord.model_validate(row)
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["pairs_kept"] == 3 and summary["calls"] == 9 and summary["budget_usd"] == 1.0
    assert "cost: $" in proc.stdout and "pairs: 3 mined, 3 kept" in proc.stdout and "p95" in proc.stdout
    assert len((tmp_path / "calls.jsonl").read_text().splitlines()) == 9
    assert "sk-cli-secret" not in proc.stdout + proc.stderr + (tmp_path / "calls.jsonl").read_text()


def test_subcommand_dispatch_with_gating(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_TEACHER_KEY", "k")
    parser = argparse.ArgumentParser(prog="trainer-client")
    add_subcommands(parser.add_subparsers(dest="command", required=True))
    with FakeTeacherServer(lambda m, b, n: Reply.call("bash", command="pytest -q")) as fake:
        trace, cfg = write_inputs(tmp_path, fake.base_url)
        args = parser.parse_args(["replay", "--traces", str(trace), "--teachers", str(cfg),
                                  "--out", str(tmp_path / "p.jsonl"), "--gate", "error_sites", "--no-progress"])
        assert args.func(args) == 0
        assert len(fake.requests) == 3
    out = capsys.readouterr().out
    assert "1 queried, 2 gated out" in out and "gating saved ~$" in out
    assert [json.loads(x)["provenance"]["t"] for x in (tmp_path / "p.jsonl").read_text().splitlines()] == [1]


def test_bad_inputs_exit_2_with_a_message(tmp_path, capsys, monkeypatch):
    parser = argparse.ArgumentParser()
    add_subcommands(parser.add_subparsers(dest="command"))
    monkeypatch.delenv("FAKE_TEACHER_KEY", raising=False)
    trace, cfg = write_inputs(tmp_path, "http://127.0.0.1:9/v1")
    args = parser.parse_args(["replay", "--traces", str(trace), "--teachers", str(cfg), "--out", str(tmp_path / "p")])
    assert args.func(args) == 2
    assert "FAKE_TEACHER_KEY is not set" in capsys.readouterr().err
    (tmp_path / "bad.jsonl").write_text('{"t": 1}\n')
    args = parser.parse_args(["replay", "--traces", str(tmp_path / "bad.jsonl"), "--teachers", str(cfg),
                              "--out", str(tmp_path / "p")])
    assert args.func(args) == 2
    assert "bad.jsonl:1: not a state(t) record" in capsys.readouterr().err
    (tmp_path / "raw.jsonl").write_text('{"kind": "reset", "episode_id": "e", "tools": []}\n')
    args = parser.parse_args(["replay", "--traces", str(tmp_path / "raw.jsonl"), "--teachers", str(cfg),
                              "--out", str(tmp_path / "p")])
    assert args.func(args) == 2
    assert "raw env-server episode log" in capsys.readouterr().err


def test_packaged_defaults_name_the_three_design_teachers():
    tf = load_teachers()
    assert [t.model for t in tf.teachers] == ["anthropic/claude-opus-4.7", "openai/gpt-5", "deepseek/deepseek-v4-pro"]
    assert all(t.api_key_env == "OPENROUTER_API_KEY" and t.price_in > 0 for t in tf.teachers)
