"""Bearer-token auth from every client against a real env server (bwrap, real tasks) on loopback
that requires a token: `trainer-client train`, the /mux client library, `warmstart`, `replay` and
the example agent loop. The right token gets through (the server records the episodes); a
missing or wrong one fails at once with `EnvAuthError`'s one-line message; the token never
shows up in a URL, a log line or an error text."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from env_client import ClientConfig, EnvAuthError, ReplicaPool, mux_url

from support.servers import start_server_process

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SMOKE = str(ROOT / "trainer_client/configs/cpu_smoke.yaml")
TOKEN = "tok-9f2c41d7e8a3b605"
WRONG = "bad-5e1d0c3b7a9f2468"
#: a retry loop would take >= 1 + 2 + 4 s before giving up: a refused token must fail well before
SLOW_RETRIES = ClientConfig(reconnect_attempts=3, reconnect_backoff_s=1.0, connect_timeout_s=5)


@pytest.fixture(scope="module")
def server(small_pack_file, tmp_path_factory):
    """(url, tasks file, instance ids) of an env server started with ENV_SERVER_TOKEN set."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ENV_SERVER_TOKEN", TOKEN)
        proc = start_server_process(small_pack_file, tmp_path_factory.mktemp("auth-data"))
        url = proc.url
    try:
        assert httpx.get(f"{url}/episodes", timeout=10).status_code == 401  # the replica does require it
        ids = [json.loads(l)["instance_id"] for l in small_pack_file.read_text().splitlines() if l.strip()]
        yield url, small_pack_file, ids
    finally:
        proc.stop()


@pytest.fixture(autouse=True)
def _no_token_in_env(monkeypatch):
    monkeypatch.delenv("ENV_SERVER_TOKEN", raising=False)


def episodes(url: str) -> set[str]:
    r = httpx.get(f"{url}/episodes", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    r.raise_for_status()
    return set(r.json()["episodes"])


def assert_refused(text: str, url: str, library: bool = False) -> None:
    """The one-line EnvAuthError message: the replica (no token), what to do (a library caller: the
    client's `token=`; a CLI user: the flag), no secret."""
    assert f"env replica {mux_url(url)} refused the connection" in text, text
    if library:
        assert EnvAuthError.HINT in text and "token=..." in text and "--env-token" not in text, text
    else:
        assert "pass --env-token or set ENV_SERVER_TOKEN" in text and EnvAuthError.HINT not in text, text
    assert TOKEN not in text and WRONG not in text and "Traceback" not in text


def test_the_cli_rewords_the_library_auth_error(monkeypatch, capsys):
    """The library's message speaks of `token=` / ClientConfig; `trainer-client` prints its own flag
    instead, for a refused token raised as such (train, warmstart) or quoted by another error
    (evaluate's EvaluationError)."""
    import trainer_client.cli as cli
    from evaluation import EvaluationError

    url = "http://10.0.0.5:8000"
    exc = EnvAuthError(mux_url(url))
    assert_refused(str(exc), url, library=True)
    assert "$ENV_SERVER_TOKEN" in str(exc) and "ClientConfig(token=...)" in str(exc)
    for error, rc in ((exc, 2), (EvaluationError(str(exc)), 1)):
        def fail(args, error=error):
            raise error
        monkeypatch.setattr(cli, "_run_train", fail)
        assert cli.main(["train", "--config", SMOKE]) == rc
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("trainer-client"), err
        assert_refused(err, url)


# ------------------------------------------------------------------ the /mux client library
def test_client_token_from_url_works_and_wrong_token_raises_typed_error(server, caplog):
    url, _, ids = server
    caplog.set_level(logging.DEBUG, logger="websockets")
    before = episodes(url)

    async def good() -> str:
        pool = ReplicaPool([f"{url}?token={TOKEN}"], SLOW_RETRIES)
        try:
            assert pool.connections[0].url == mux_url(url)  # stripped: sent as the header instead
            session, obs = await pool.open_session(instance_id=ids[0])
            out = await session.call_tool("bash", {"command": "echo authorised"})
            await pool.release(session)
            return out["output"] + obs["metadata"]["episode_id"]
        finally:
            await pool.close()

    assert "authorised" in asyncio.run(good())
    assert len(episodes(url) - before) == 1
    assert "> Authorization: <redacted>" in caplog.text  # websockets' header log ran, without the value

    async def refused(urls: list[str], config: ClientConfig) -> EnvAuthError:
        pool = ReplicaPool(urls, config)
        try:
            t0 = time.monotonic()
            with pytest.raises(EnvAuthError) as info:
                await pool.open_session(instance_id=ids[0])
            assert time.monotonic() - t0 < 3, "a refused token must not go through the reconnect back-off"
            return info.value
        finally:
            await pool.close()

    wrong = SLOW_RETRIES.model_copy(update={"token": WRONG})
    for urls, config in (([url], wrong), ([url], SLOW_RETRIES), ([f"{url}?token={WRONG}"], SLOW_RETRIES)):
        exc = asyncio.run(refused(urls, config))
        assert isinstance(exc, PermissionError) and exc.url == mux_url(url)
        assert_refused(f"{exc} {exc!r}", url, library=True)
    assert TOKEN not in caplog.text and WRONG not in caplog.text
    assert len(episodes(url) - before) == 1


# ------------------------------------------------------------------ trainer-client train
def test_train_with_the_right_token_reaches_the_server(server, tmp_path, capsys, caplog):
    from trainer_client.cli import main

    url, tasks, _ = server
    caplog.set_level(logging.DEBUG, logger="websockets")
    before = episodes(url)
    out = tmp_path / "run"
    rc = main(["train", "--config", SMOKE, "--env-url", url, "--env-token", TOKEN, "--tasks", str(tasks),
               "--output-dir", str(out), "--max-steps", "1", "--set", "grpo.max_completion_length=48",
               "--set", "output.plot=false"])
    assert rc == 0
    steps = [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "reward" in r]
    assert len(steps) == 1 and steps[0]["env/infra_failures"] == 0.0  # every rollout ran on the replica
    assert len(episodes(url) - before) >= 2  # the step's rollouts are episodes of the server
    captured = capsys.readouterr()
    assert TOKEN not in captured.out + captured.err + caplog.text


def test_train_with_a_wrong_token_fails_fast_with_one_line(server, tmp_path, capsys):
    """The flag wins over ENV_SERVER_TOKEN (right here): a wrong --env-token must fail, at once."""
    url, tasks, _ = server
    before = episodes(url)
    argv = ["train", "--config", SMOKE, "--env-url", url, "--tasks", str(tasks), "--output-dir", str(tmp_path / "r")]
    env = {**os.environ, "ENV_SERVER_TOKEN": TOKEN, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "trainer_client.cli", *argv, "--env-token", WRONG],
                          capture_output=True, text=True, timeout=180, env=env, cwd=ROOT)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.startswith("trainer-client: error: ") and proc.stderr.strip().count("\n") == 0  # one line
    assert_refused(proc.stdout + proc.stderr, url)
    assert elapsed < 90 and not (tmp_path / "r" / "metrics.jsonl").exists()

    from trainer_client.cli import main  # no token at all: the same error, in process

    assert main(argv) == 2
    assert_refused(capsys.readouterr().err, url)
    assert episodes(url) == before


# ------------------------------------------------------------------ warmstart, replay, the example
def test_warmstart_sends_the_token(server, tmp_path, capsys, monkeypatch):
    from trainer_client.cli import main

    url, tasks, ids = server
    monkeypatch.setenv("ENV_SERVER_TOKEN", TOKEN)
    before = episodes(url)
    argv = ["warmstart", "--config", SMOKE, "--tasks", str(tasks), "--steps", "1", "--no-lazy",
            "--set", f'data.instance_ids=["{ids[0]}"]']
    # a ?token= on the URL wins for that replica
    assert main([*argv, "--env-url", f"{url}?token={WRONG}", "--out", str(tmp_path / "no")]) == 2
    assert_refused(capsys.readouterr().err, url)
    assert episodes(url) == before

    assert main([*argv, "--env-url", url, "--out", str(tmp_path / "warm")]) == 0  # from ENV_SERVER_TOKEN
    record = json.loads((tmp_path / "warm" / "warmstart.json").read_text())
    assert [(d["name"], d["reward"]) for d in record["demos"]] == [(f"{ids[0]}:gold", 1.0)]
    assert len(episodes(url) - before) == 2  # the probe session and the recorded demonstration
    assert TOKEN not in capsys.readouterr().out


def test_replay_fetches_traces_with_the_token(server, tmp_path, capsys):
    from support.teacher_double import FakeTeacherServer, Reply

    from trainer_client.replay.cli import add_subcommands

    url, _, ids = server

    async def rollout() -> str:
        pool = ReplicaPool([url], ClientConfig(token=TOKEN))
        try:
            session, obs = await pool.open_session(instance_id=ids[0])
            for cmd in ("ls", "cat nope.txt"):
                await session.call_tool("bash", {"command": cmd})
            await pool.release(session)
            return obs["metadata"]["episode_id"]
        finally:
            await pool.close()

    episode = asyncio.run(rollout())
    parser = argparse.ArgumentParser(prog="trainer-client")
    add_subcommands(parser.add_subparsers(dest="command"))
    with FakeTeacherServer(lambda m, b, n: Reply.call("bash", command="pytest -q")) as fake:
        teachers = tmp_path / "teachers.yaml"
        teachers.write_text(json.dumps({"teachers": [
            {"name": n, "model": n, "base_url": fake.base_url, "price_in": 1e-6, "price_out": 2e-6}
            for n in ("t-a", "t-b", "t-c")]}))
        common = ["replay", "--teachers", str(teachers), "--episode", episode, "--no-progress", "--max-usd", "1"]
        args = parser.parse_args([*common, "--env-url", url, "--env-token", WRONG, "--out", str(tmp_path / "x")])
        assert args.func(args) == 2
        err = capsys.readouterr().err
        assert f"env replica {url} refused the connection" in err and "--env-token" in err and WRONG not in err
        assert "pass --env-token or set ENV_SERVER_TOKEN" in err and EnvAuthError.HINT not in err
        assert not fake.requests

        for extra in (["--env-url", url, "--env-token", TOKEN], ["--env-url", f"{url}?token={TOKEN}"]):
            args = parser.parse_args([*common, *extra, "--out", str(tmp_path / "p.jsonl")])
            n = len(fake.requests)
            assert args.func(args) == 0
            assert len(fake.requests) - n == 2 * 3  # the episode's two state(t) records, three teachers each
    assert TOKEN not in capsys.readouterr().out


def test_example_agent_loop_sends_the_token(server):
    url, _, ids = server
    ws = url.replace("http://", "ws://")
    cmd = [sys.executable, str(ROOT / "examples/agent_loop.py"), "--instance", ids[0], "--url"]
    ok = subprocess.run([*cmd, f"{ws}?token={TOKEN}"], capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and "reward:" in ok.stdout, ok.stderr[-2000:]
    bad = subprocess.run([*cmd, ws, "--env-token", WRONG], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "refused the connection" in bad.stderr and "Traceback" not in bad.stderr
    assert WRONG not in bad.stderr and TOKEN not in ok.stdout + ok.stderr
