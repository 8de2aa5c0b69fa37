"""Errors no retry cures stop `trainer-client evaluate` with exit 1 and one line naming the cause
(no traceback), keeping what was finished: an endpoint that refuses the key (401), an env replica
that refuses the token, an env URL where nothing listens."""

from __future__ import annotations

from pathlib import Path

import pytest
import uvicorn
from eval_support import result_lines, trainer_client
from support.servers import start_server_process
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from support.policy_double import PolicyDouble
from support.servers import free_port, serve_in_thread


@pytest.fixture
def refusing_endpoint():
    """An OpenAI-compatible endpoint that answers every request 401 (a wrong API key); (base_url, seen)."""
    app = FastAPI()
    seen: list[str] = []

    @app.get("/health")
    def health() -> dict:
        return {"status": "healthy"}

    @app.api_route("/v1/{path:path}", methods=["GET", "POST"])
    def refuse(path: str) -> JSONResponse:
        seen.append(path)
        return JSONResponse({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}},
                            status_code=401)

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with serve_in_thread(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"), url):
        yield f"{url}/v1", seen


def one_line_error(proc) -> str:
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()  # progress lines (without --quiet), then the error
    errors = [line for line in lines if "error" in line]
    assert len(errors) == 1 and errors[0] == lines[-1], proc.stderr
    assert errors[0].startswith("trainer-client evaluate: error: "), errors[0]
    return errors[0]


def test_endpoint_refusing_the_key_stops_the_run_and_keeps_results(env_url: str, gold_tasks_file: Path, gold_rows,
                                                                    refusing_endpoint, tmp_path: Path):
    base_url, seen = refusing_endpoint
    out = tmp_path / "out"
    common = ["--env-url", env_url, "--tasks", gold_tasks_file, "--model-name", "policy-double", "--out", out,
              "--concurrency", 1, "--quiet"]
    with PolicyDouble(gold_tasks_file, "gold", tmp_path) as double:
        first = trainer_client("evaluate", "--model", double.base_url, *common)
    assert first.returncode == 0, first.stderr[-3000:]
    # as if the first run had been interrupted after one episode
    results = out / "results.jsonl"
    kept = results.read_text(encoding="utf-8").splitlines()[:1]
    results.write_text(kept[0] + "\n", encoding="utf-8")

    proc = trainer_client("evaluate", "--model", base_url, *common)
    err = one_line_error(proc)
    assert "refused the request" in err and "401" in err and base_url in err, err
    assert "rerun the same command" in err
    assert seen == ["chat/completions"], "a refused key is not retried, and the run stops at once"
    assert results.read_text(encoding="utf-8").splitlines() == kept, "the finished episode is kept"
    assert len(gold_rows) > 1 and len(result_lines(out)) == 1


def test_endpoint_refusing_the_model_list_is_one_line(env_url: str, gold_tasks_file: Path, refusing_endpoint,
                                                      tmp_path: Path):
    """Without --model-name the model list is asked first (GET /models): its 401 is the same one-line error."""
    base_url, seen = refusing_endpoint
    proc = trainer_client("evaluate", "--model", base_url, "--env-url", env_url, "--tasks", gold_tasks_file,
                          "--out", tmp_path / "out")
    err = one_line_error(proc)
    assert "refused" in err and "401" in err, err
    assert seen == ["models"]


def test_wrong_env_token_is_refused_clearly(gold_tasks_file: Path, tmp_path: Path):
    server = start_server_process(gold_tasks_file, tmp_path / "data", extra_args=["--auth-token", "the-right-token-123"])
    try:
        with PolicyDouble(gold_tasks_file, "gold", tmp_path) as double:
            proc = trainer_client("evaluate", "--model", double.base_url, "--model-name", "policy-double",
                                  "--env-url", server.url, "--env-token", "a-wrong-token-456", "--tasks",
                                  gold_tasks_file, "--out", tmp_path / "out")
            requests = double.stats()["requests"]
    finally:
        server.stop()
    err = one_line_error(proc)
    assert "token" in err.lower() and server.url.split("//")[1] in err, err
    assert "pass --env-token or set ENV_SERVER_TOKEN" in err and "ClientConfig" not in err, err  # the CLI's words
    assert "a-wrong-token-456" not in proc.stderr + proc.stdout and "the-right-token-123" not in proc.stderr
    assert requests == 0, "no episode starts before the replicas took the token"
    assert result_lines(tmp_path / "out") == []


def test_settings_out_of_range_are_one_line(tmp_path: Path):
    dead = f"http://127.0.0.1:{free_port()}"
    tasks = tmp_path / "t.jsonl"
    tasks.write_text('{"instance_id": "x"}\n')
    for flag, value, field in [("--samples", 0, "samples"), ("--concurrency", 0, "concurrency"),
                               ("--top-p", 2, "top_p"), ("--max-turns", 0, "max_turns")]:
        proc = trainer_client("evaluate", "--model", f"{dead}/v1", "--model-name", "m", "--env-url", dead,
                              "--tasks", tasks, "--out", tmp_path / "out", flag, value)
        err = one_line_error(proc)
        assert "invalid settings" in err and field in err, err


def test_dead_env_url_is_refused_clearly(gold_tasks_file: Path, tmp_path: Path):
    dead = f"http://127.0.0.1:{free_port()}"
    with PolicyDouble(gold_tasks_file, "gold", tmp_path) as double:
        proc = trainer_client("evaluate", "--model", double.base_url, "--model-name", "policy-double",
                              "--env-url", dead, "--tasks", gold_tasks_file, "--out", tmp_path / "out", timeout=120)
        requests = double.stats()["requests"]
    err = one_line_error(proc)
    assert "no live env replica" in err and dead.split("//")[1] in err, err
    assert requests == 0


def test_serving_a_checkpoint_without_the_train_extra_names_it(monkeypatch, capsys, tmp_path: Path):
    """`evaluate --model DIR` serves the checkpoint (torch, transformers): in an install without the
    train extra it ends with the one line naming that extra, before anything runs; an endpoint
    `--model` needs only the client extra."""
    import importlib.util

    from trainer_client import cli

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    (tmp_path / "ckpt").mkdir()
    common = ["--env-url", f"http://127.0.0.1:{free_port()}", "--tasks", str(tmp_path / "t.jsonl"),
              "--out", str(tmp_path / "out")]
    assert cli.main(["evaluate", "--model", str(tmp_path / "ckpt"), *common]) == 1
    assert capsys.readouterr().err == ("trainer-client evaluate --model CHECKPOINT needs the 'train' extra: "
                                       "pip install -e \".[train]\" (missing: torch)\n")
    assert cli.main(["evaluate", f"--model={tmp_path / 'ckpt'}", *common]) == 1
    assert "needs the 'train' extra" in capsys.readouterr().err
    assert cli._missing_extra(["evaluate", "--model", "http://127.0.0.1:1/v1", *common]) is None
    assert not (tmp_path / "out").exists()


def test_a_dead_model_endpoint_is_refused_naming_the_fix(tmp_path: Path):
    """Nothing listens at --model (and no --model-name): one line saying so and what to do, not a hint
    about --model-name, which would not help."""
    dead = f"http://127.0.0.1:{free_port()}"
    tasks = tmp_path / "t.jsonl"
    tasks.write_text('{"instance_id": "x"}\n')
    proc = trainer_client("evaluate", "--model", f"{dead}/v1", "--env-url", dead, "--tasks", tasks,
                          "--out", tmp_path / "out")
    err = one_line_error(proc)
    assert f"no model endpoint answers at {dead}/v1" in err and "start the model server" in err, err
    assert "--model-name" not in err, err
