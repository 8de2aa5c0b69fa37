"""Every command a user types from README.md and docs/*.md, accounted for, and the ones that can run
here RUN, as written, on a fresh "clone" (docs/frameworks/ has its own tests).

`doc_commands()` extracts the command lines of the fenced shell blocks (```bash/sh/shell/console, and
in unlabelled blocks the lines that start with a program); each must be in exactly one table:

- RUN: run here by `test_documented_commands_run_as_written`, in the order of the docs, in a fresh
  folder laid out like a checkout (`.venv`, `trainer_client/`, `tests/` linked from this one), through
  `bash -c`, with only the substitutions of SUBSTITUTIONS (ports, input files) and SMALLEST (the
  smallest settings of a long command). `env-server serve` lines start a server that stays up (on a
  free port standing for 8000) until the next one; its ready line and `/health` are checked.
- ELSEWHERE: run as written by another test, named with it (the compose section:
  tests/containers/test_compose_docs.py).
- NOT_RUN: with the reason (GPU, a paid API, a remote host, the package index, minutes of training,
  a synopsis or an elided `...` line).

A command added to the docs and in no table fails the test, and so does a table entry the docs no
longer hold: nothing is skipped silently.

Inputs a fresh clone would have made by commands that are NOT run (`task-factory mine` needs the
package index and minutes): `data/tasks` is tests/support/taskpacks.py's small pack (three real
synthetic-mutation tasks, what `task-factory build` makes), `data/synth` its idna task.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from support.doc_blocks import shell_lines

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]  # docs/frameworks/: tests/frameworks
# first word of a command line in an unlabelled block (the others are diagrams and prose)
PROGRAMS = re.compile(r"(\.venv/bin/)?(task-factory|env-server|trainer-client|python3?|pip|make|docker|"
                      r"docker-compose|curl|vllm|export|docker/[\w.-]+\.sh)$")


def strip_comment(text: str) -> str:
    """``text`` without its shell comment (a `#` after a blank, outside quotes)."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i].rstrip()
    return text.rstrip()


def doc_commands(raw: bool = False) -> list[tuple[str, str]]:
    """(where, command) of every command line of the docs' fenced blocks, in order: continuation lines
    joined, comments dropped, then `shlex.join`ed (the key of the tables below; ``raw``: the line as a
    shell reads it, the comment dropped). In a block with `$ ` prompts only the prompted lines are
    commands."""
    out = []
    for path in DOCS:
        for start, lang, text in shell_lines(path):
            try:
                argv = shlex.split(text, comments=True)
            except ValueError:
                argv = text.split()
            if not argv:
                continue
            first = next((a for a in argv if not re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", a)), "")
            if lang == "" and not PROGRAMS.fullmatch(first):
                continue
            out.append((f"{path.relative_to(ROOT)}:{start}", strip_comment(text) if raw else shlex.join(argv)))
    return out


# ---------------------------------------------------------------- the tables
EVAL = "tests/support/policy_double.py"

RUN = [
    ".venv/bin/task-factory import verified.parquet --out data/swebench",
    ".venv/bin/task-factory validate data/tasks/tasks.jsonl",
    ".venv/bin/task-factory validate data/synth/tasks.jsonl --statements",
    ".venv/bin/task-factory monitor data/tasks/tasks.jsonl data/synth/tasks.jsonl --check-defaults",
    ".venv/bin/env-server serve --tasks data/tasks/tasks.jsonl --port 8000 --backend bwrap",
    ".venv/bin/trainer-client train --config trainer_client/configs/cpu_smoke.yaml --env-url http://127.0.0.1:8000 "
    "--tasks data/tasks/tasks.jsonl --set model.name_or_path=runs/warm",
    ".venv/bin/trainer-client tasks split --tasks data/tasks/tasks.jsonl --held-out 0.2 --train-out data/train.jsonl "
    "--held-out-out data/held_out.jsonl",
    ".venv/bin/trainer-client evaluate --model http://127.0.0.1:8001/v1 --env-url http://127.0.0.1:8000 "
    "--tasks data/held_out.jsonl --samples 4 --out runs/eval-before",
    "task-factory import swe-bench-verified.parquet --format auto --out tasks/",
    "env-server images",
    "export 'ENV_SERVER_TOKEN=$(cat' 'token.txt)'",
    "env-server serve --tasks '$TASKS' --tokens tokens.yaml",
    "env-server serve --tasks '$TASKS' --client-token team-a=... --operator-token ops=...",
    ".venv/bin/trainer-client tasks split --tasks data/tasks/tasks.jsonl --held-out 0.2 --seed 0 "
    "--train-out data/train.jsonl --held-out-out data/held_out.jsonl",
    ".venv/bin/env-server serve --tasks data/tasks/tasks.jsonl --port 8000 --backend bwrap '&'",
    "vllm serve Qwen/Qwen2.5-Coder-7B-Instruct --port 8001 --enable-auto-tool-choice --tool-call-parser hermes '&'",
    ".venv/bin/trainer-client evaluate --model http://127.0.0.1:8001/v1 --env-url http://127.0.0.1:8000 "
    "--tasks data/held_out.jsonl --samples 4 --concurrency 8 --out runs/eval-base",
]

# Literal text of a RUN command -> what runs instead, applied in this order ({port}: the current env
# server's free port, {model}: the model double's, {fixtures}: tests/datasets/fixtures).
SUBSTITUTIONS = [
    ("127.0.0.1:8000", "127.0.0.1:{port}"),
    ("--port 8000", "--port {port}"),
    ("127.0.0.1:8001/v1", "127.0.0.1:{model}/v1"),
    ("import verified.parquet", "import {fixtures}/swebench_4x.jsonl"),          # rows, as JSONL (pyarrow optional)
    ("import swe-bench-verified.parquet", "import {fixtures}/swebench_5x.json"),  # the same, as JSON
    ("$TASKS", "data/tasks/tasks.jsonl"),
    ("team-a=...", "team-a=docs-client-token"),
    ("ops=...", "ops=docs-operator-token"),
]
# The smallest settings of a long command, or a port: appended to it (train: validate the config, print it and the
# memory estimate, exit; the training itself: tests/trainer/test_e2e_server.py, `make demo`).
SMALLEST = {
    ".venv/bin/trainer-client train --config trainer_client/configs/cpu_smoke.yaml --env-url http://127.0.0.1:8000 "
    "--tasks data/tasks/tasks.jsonl --set model.name_or_path=runs/warm": " --dry-run",
    # no --port: the default 8000, which another program of this machine may hold
    "env-server serve --tasks '$TASKS' --tokens tokens.yaml": " --port {port}",
    "env-server serve --tasks '$TASKS' --client-token team-a=... --operator-token ops=...": " --port {port}",
}
# A model server of the docs -> the OpenAI-compatible double that runs in its place (gold mode: it applies
# each task's gold patch, then submits), on a free port standing for 8001.
MODEL_DOUBLES = {
    "vllm serve Qwen/Qwen2.5-Coder-7B-Instruct --port 8001 --enable-auto-tool-choice --tool-call-parser hermes '&'":
        f"{EVAL} --mode gold (vLLM needs a GPU and the 7B weights)",
}
# Inputs the docs expect in place, which the test writes (the docs show them as YAML / a file).
FILES = {
    "token.txt": "docs-operator-token\n",
    "tokens.yaml": "clients:\n  team-a: docs-client-token\noperators:\n  ops: docs-operator-token\n",
}
# What a run's output must show, beyond exit 0.
EXPECT = {
    ".venv/bin/task-factory validate data/tasks/tasks.jsonl": "validate (bwrap): 3 passed, 0 failed",
    ".venv/bin/task-factory validate data/synth/tasks.jsonl --statements": "validate (bwrap): 1 passed, 0 failed",
    ".venv/bin/task-factory import verified.parquet --out data/swebench": "3 imported, 0 rejected",
    ".venv/bin/trainer-client evaluate --model http://127.0.0.1:8001/v1 --env-url http://127.0.0.1:8000 "
    "--tasks data/held_out.jsonl --samples 4 --out runs/eval-before": "resolved 4/4",
    ".venv/bin/trainer-client evaluate --model http://127.0.0.1:8001/v1 --env-url http://127.0.0.1:8000 "
    "--tasks data/held_out.jsonl --samples 4 --concurrency 8 --out runs/eval-base": "resolved 4/4",
}

COMPOSE_TEST = "tests/containers/test_compose_docs.py"
ELSEWHERE = {
    "make demo": "tests/trainer/test_e2e_server.py and the demo's own run (minutes of CPU training)",
    "make test": "the test suite itself",
    "pip install -e '.[client]'": "tests/docs/test_install_lines.py::test_the_client_line_as_written_and_what_runs_"
                                "after_it (a fresh venv)",
    "docker/setup-engine.sh": COMPOSE_TEST,
    "docker/build-env-image.sh": COMPOSE_TEST + " (and the env_image fixture of tests/containers)",
    "docker/build-trainer-image.sh": "tests/containers/test_trainer_image.py",
    "docker run --rm --network '<project>_default' -e ENV_SERVER_TOKEN -v '$PACK:$PACK:ro' swe-openenv-trainer:cpu "
    "trainer-client train --config configs/cpu_smoke.yaml --env-url http://env:8000 --tasks '$PACK/tasks.jsonl' "
    "--max-steps 1 --output-dir /tmp/run": "tests/containers/test_trainer_image.py (on the compose network)",
    "export SWE_TASKS_DIR=/abs/path/to/pack": COMPOSE_TEST,
    "docker compose up -d env": COMPOSE_TEST,
    "curl -s 'http://$(docker' compose port --index=1 env '8000)/health'": COMPOSE_TEST,
    "docker compose port --index=1 env 8000": COMPOSE_TEST,
    "for i in 1 2 3 '4;' do echo 'http://$(docker' compose port '--index=$i' env '8000);' done": COMPOSE_TEST,
    "docker compose up -d --scale env=4 env": COMPOSE_TEST,
    "export 'URLS=$(for' i in 1 2 3 '4;' do echo --env-url 'http://$(docker' compose port '--index=$i' env '8000);' "
    "'done)'": COMPOSE_TEST,
    "trainer-client train --config trainer_client/configs/gpu_qwen.yaml --tasks '$SWE_TASKS_DIR/tasks.jsonl' "
    "'$URLS'": COMPOSE_TEST + " (with --dry-run: the GPU config's memory estimate, no GPU here)",
    "docker compose ps": COMPOSE_TEST,
    "docker compose exec -T --index=2 env ls /data/swe-openenv-env-2/traces": COMPOSE_TEST,
    "docker compose down": COMPOSE_TEST,
    "docker run --rm -v swe-openenv_traces:/data --entrypoint ls swe-openenv-env:latest /data": COMPOSE_TEST,
}

GPU = "a GPU trainer (tests/trainer/test_memory_estimate.py checks its --dry-run)"
INDEX = "the package index and minutes (tests/support/taskpacks.py runs the same builders into .cache/taskpack)"
ELIDED = "an elided line (`...` stands for the options of the line above it)"


def elided(command: str) -> bool:
    """A line with an argument `...` (or `--option ...`): a sketch, never run; NOT_RUN by this rule."""
    return "..." in shlex.split(command) or bool(re.search(r"=\.\.\.( |$)", command)) and "team-a=..." not in command
NOT_RUN = {
    ".venv/bin/task-factory mine --out data/tasks": INDEX,
    ".venv/bin/task-factory build --out data/synth": INDEX,
    ".venv/bin/trainer-client warmstart --config trainer_client/configs/cpu_smoke.yaml --env-url "
    "http://127.0.0.1:8000 --tasks data/tasks/tasks.jsonl --out runs/warm":
        "minutes of CPU training (tests/trainer/test_warmstart.py runs warmstart)",
    ".venv/bin/trainer-client replay --env-url http://127.0.0.1:8000 --episode EPISODE_ID --teachers "
    "trainer_client/replay/teachers.default.yaml --out pairs.jsonl --max-usd 5": "paid teacher APIs over the network",
    ".venv/bin/trainer-client ablate --config trainer_client/configs/cpu_smoke.yaml --env-url http://127.0.0.1:8000 "
    "--tasks data/tasks/tasks.jsonl --arms grpo,grpo+hints,grpo+pairs,all --seeds 0,1,2 --max-steps 50 --out "
    "runs/ablation --set 'replay.local_models=[\"ckpt-a\",\"ckpt-b\"]'":
        "hours of CPU training (12 runs; tests/trainer/test_ablate.py runs ablate)",
    "trainer-client ablate --config trainer_client/configs/cpu_smoke.yaml --env-url http://127.0.0.1:8000 --tasks "
    "tasks.jsonl --arms grpo,grpo+hints --seeds 0,1 --max-steps 2 --out runs/ablation-smoke":
        "four CPU training runs, minutes (tests/trainer/test_ablate.py runs ablate)",
    "trainer-client ablate --config trainer_client/configs/gpu_qwen.yaml --env-url http://env-a:8000 --env-url "
    "http://env-b:8000 --tasks tasks.jsonl --seeds 0,1,2 --max-steps 200 --max-usd 20 --out runs/ablation --set "
    "replay.teachers=teachers.yaml": GPU + "; remote hosts",
    "pip install pyarrow": "the package index",
    "python bench/bench_client.py '[--steps' '2000]' '[--sessions' '64]' '[--session-steps' '50]' '[--repeat' '5]'":
        "a synopsis (brackets: optional) of a benchmark",
    "env-server prefetch --tasks tasks/tasks.jsonl --image-cache-gb 400": "SWE-bench images from a registry",
    "task-factory validate tasks/tasks.jsonl --backend docker": "SWE-bench images from a registry",
    "env-server serve --tasks tasks/tasks.jsonl --backend docker --image-cache-gb 400 --prefetch-ahead 8":
        "SWE-bench images from a registry",
    "task-factory import FILE... --out DIR '[--format' 'auto|swebench|swe-gym|swe-smith|r2e-gym|swe-rebench]'":
        "a synopsis",
    "python docker/swebench_layout.py .cache/layout": "Docker and ~3 min (tests/datasets runs the layout images)",
    "task-factory import .cache/layout/dataset.jsonl --out .cache/layout/tasks": "needs the layout build above",
    "task-factory validate .cache/layout/tasks/tasks.jsonl --backend docker": "needs the layout build above",
    "env-server prefetch --tasks tasks/tasks.jsonl --parallel 4 --image-cache-gb 400":
        "SWE-bench images from a registry",
    "env-server serve --tasks tasks/tasks.jsonl --backend docker --image-cache-gb 400 --prefetch-ahead 16 "
    "--warm-pool 32 --max-sessions 64": "SWE-bench images from a registry",
    "trainer-client train --config trainer_client/configs/gpu_qwen.yaml --tasks '$TASKS' --env-url "
    "http://10.0.0.5:8000 --env-url http://10.0.0.6:8000 --env-token '$ENV_SERVER_TOKEN'": GPU + "; remote hosts",
    "'SWE_ENV_URLS=http://127.0.0.1:8000 http://127.0.0.1:8001' SWE_TRAINER_PROCESSES=4 docker compose --profile "
    "train up trainer": "the GPU trainer image (not built here: CUDA and a registry)",
    ".venv/bin/trainer-client tasks filter --tasks data/train.jsonl --report runs/difficulty --min 0 --max 1 "
    "--strict --out data/train.informative.jsonl": "needs the elided evaluate above (tests/evaluation covers filter)",
    ".venv/bin/trainer-client evaluate --model .cache/demo-warmstart/378e8d804c9c --env-url http://127.0.0.1:PORT "
    "--tasks .cache/demo-tasks-v3/tasks.jsonl --samples 2 --concurrency 4 --config "
    "trainer_client/configs/cpu_smoke.yaml --out .cache/demo-warmstart/378e8d804c9c/eval-demo-v2 --quiet":
        "a transcript of `make demo` (its outputs)",
    ".venv/bin/trainer-client evaluate --model runs/demo/train/final --env-url http://127.0.0.1:PORT --tasks "
    ".cache/demo-tasks-v3/tasks.jsonl --samples 2 --concurrency 4 --config trainer_client/configs/cpu_smoke.yaml "
    "--out runs/demo/eval-after --quiet --fresh": "a transcript of `make demo` (its outputs)",
    "task-factory mine --out .cache/packs/mined": INDEX,
    "task-factory build --out .cache/packs/synth": INDEX,
    "task-factory monitor .cache/packs/mined/tasks.jsonl .cache/packs/synth/tasks.jsonl "
    ".cache/demo-tasks-v3/tasks.jsonl .cache/taskpack/pack-n3-s0/tasks.jsonl .cache/taskpack/mined-six/tasks.jsonl "
    "'~/.cache/swe-openenv/demo-tasks/six-demo-v2/tasks.jsonl' --rows 'tests/datasets/fixtures/*.json*' "
    "--release-pairs": "needs the mined and built packs above (the package index, minutes)",
    ".venv/bin/trainer-client replay --env-url http://127.0.0.1:8000 --episode EPISODE_ID '[--teachers' FILE '|' "
    "--local-teacher CKPT '...]' --out pairs.jsonl '[--gate' 'all|error_sites|entropy|error_sites_or_entropy]' "
    "'[--min-agree' '2]' '[--max-usd' 'X]' '[--calls-out' 'calls.jsonl]' '[--summary-out' 'summary.json]'":
        "a synopsis",
    ".venv/bin/trainer-client replay --env-url http://127.0.0.1:8000 --episode EPISODE_ID --local-teacher "
    "early=runs/warm-a --local-teacher late=runs/warm-b --local-threads 1 --out pairs.jsonl":
        "needs two trained checkpoints (tests/replay runs local teachers)",
    "task-factory mine --out data/mined": INDEX,
    "task-factory mine --out data/mined --packages six,idna": INDEX,
    "task-factory mine --out data/mined --packages cachetools --discover 10": INDEX,
    "task-factory validate data/mined/tasks.jsonl": "needs the mined pack above",
}


# ---------------------------------------------------------------- the checks
def test_every_documented_command_is_run_or_listed_with_its_reason():
    found = doc_commands()
    assert len(found) >= 60, len(found)
    tables = {"RUN": set(RUN), "ELSEWHERE": set(ELSEWHERE), "NOT_RUN": set(NOT_RUN)}
    both = [(a, b, c) for a in tables for b in tables if a < b for c in tables[a] & tables[b]]
    assert not both, f"in two tables: {both}"
    listed = set().union(*tables.values())
    unlisted = [f"{where}: {cmd!r}" for where, cmd in found if cmd not in listed and not elided(cmd)]
    assert not unlisted, "documented commands in no table (run them in RUN or give the reason):\n" + "\n".join(unlisted)
    stale = sorted(listed - {cmd for _, cmd in found})
    assert not stale, f"table entries the docs no longer hold: {stale}"
    assert set(SMALLEST) <= set(RUN) and set(EXPECT) <= set(RUN) and set(MODEL_DOUBLES) <= set(RUN)
    assert all(ELSEWHERE.values()) and all(NOT_RUN.values())
    assert not any(elided(c) for c in RUN) and not any(elided(c) for c in NOT_RUN)
    print("\n".join(["", "not run (elided):", *(f"  {w}: {c}" for w, c in found if elided(c))]))


def test_the_extraction_finds_commands_and_skips_prose(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text("```\ntask -> sandbox\nenv-server serve --tasks t.jsonl   # note\n```\n\n"
                    "```bash\nFOO=1 docker compose \\\n   up -d env\n```\n\n"
                    "```console\n$ curl -s x\n{\"status\":\"healthy\"}\n```\n\n```yaml\nkey: make\n```\n")
    monkeypatch.setattr(sys.modules[__name__], "DOCS", [page])
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert [c for _, c in doc_commands()] == ["env-server serve --tasks t.jsonl", "FOO=1 docker compose up -d env",
                                              "curl -s x"]


def _clone(tmp: Path) -> Path:
    """A folder laid out like a fresh checkout for the docs' relative paths (links to this one's parts),
    with the inputs the NOT_RUN builders would have made (see the module's docstring)."""
    from support.taskpacks import build_small_pack

    pack = build_small_pack(3).parent
    clone = tmp / "clone"
    clone.mkdir()
    for part in (".venv", "trainer_client", "tests", "bench", "docker"):
        (clone / part).symlink_to(ROOT / part)
    (clone / "data").mkdir()
    (clone / "data" / "tasks").symlink_to(pack)
    synth = clone / "data" / "synth"
    synth.mkdir()
    for part in ("repos", "envs"):
        (synth / part).symlink_to(pack / part)
    idna = [line for line in (pack / "tasks.jsonl").read_text().splitlines() if '"idna__' in line]
    assert len(idna) == 1, "the small pack has one idna task"
    (synth / "tasks.jsonl").write_text(idna[0] + "\n")
    for name, text in FILES.items():
        (clone / name).write_text(text)
    return clone


class Servers:
    """The env server the docs' current `serve` line started, and the model double."""

    def __init__(self, clone: Path, env: dict[str, str]) -> None:
        self.clone, self.env = clone, env
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self.model = None

    def serve(self, command: str, line: str, log: Path, check: list[str]) -> None:
        from env_client.processes import free_port, start_process, stop_process_group, wait_healthy

        if self.proc is not None:
            stop_process_group(self.proc, 10.0)
        self.port = free_port()
        text = substitute(command, line, self).removesuffix("&")  # started in the background here
        self.proc = start_process(["bash", "-c", "exec " + text], log, cwd=self.clone, env=self.env)
        wait_healthy(f"http://127.0.0.1:{self.port}", self.proc, 60, name=command, log_path=log)
        deadline = time.monotonic() + 10
        while "env-server ready:" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        ready = [line for line in log.read_text().splitlines() if line.startswith("env-server ready:")]
        assert ready and ready[0].startswith(f"env-server ready: http://127.0.0.1:{self.port} (/ws /mux /mcp /health)"), \
            log.read_text()[-2000:]
        assert httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=10).json() == {"status": "healthy"}
        check.append(ready[0])

    def double(self, tasks: Path, log_dir: Path) -> None:
        from support.policy_double import PolicyDouble

        if self.model is None:
            self.model = PolicyDouble(tasks, "gold", log_dir)
            self.model.__enter__()

    def close(self) -> None:
        from env_client.processes import stop_process_group

        if self.proc is not None:
            stop_process_group(self.proc, 10.0)
        if self.model is not None:
            self.model.__exit__()


def substitute(command: str, line: str, servers: Servers) -> str:
    """The documented ``line`` (whose table key is ``command``) as this test runs it."""
    values = {"port": servers.port, "model": servers.model.port if servers.model else None,
              "fixtures": ROOT / "tests" / "datasets" / "fixtures"}
    text = line + SMALLEST.get(command, "").format(**values)
    for literal, replacement in SUBSTITUTIONS:
        text = text.replace(literal, replacement.format(**values))
    return text


def test_documented_commands_run_as_written(tmp_path):
    clone = _clone(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME", "ENV_SERVER_TOKEN")}
    env["PATH"] = f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"  # the venv activated
    servers = Servers(clone, env)
    ran, ready_lines, times = [], [], {}
    seen = set()
    try:
        raw = dict(doc_commands(raw=True))
        for where, command in doc_commands():
            if command not in RUN or command in seen:
                continue
            seen.add(command)
            start = time.monotonic()
            log = tmp_path / f"cmd{len(ran)}.log"
            if command in MODEL_DOUBLES or "127.0.0.1:8001/v1" in command:  # README's evaluate names no server
                servers.double(clone / "data" / "tasks" / "tasks.jsonl", tmp_path)
            if command in MODEL_DOUBLES:
                pass
            elif re.search(r"env-server serve\b", command):
                servers.serve(command, raw[where], log, ready_lines)
            else:
                text = substitute(command, raw[where], servers)
                if command.startswith("export "):  # a shell builtin: its effect, in the same shell
                    text += " && test -n \"$ENV_SERVER_TOKEN\" && echo exported"
                proc = subprocess.run(["bash", "-c", text], cwd=clone, env=env, capture_output=True, text=True,
                                      timeout=300)
                output = proc.stdout + proc.stderr
                assert proc.returncode == 0, f"{where}: {text}\nexit {proc.returncode}\n{output[-3000:]}"
                assert EXPECT.get(command, "") in output, f"{where}: {text}: no {EXPECT[command]!r} in\n{output[-3000:]}"
            ran.append(command)
            times[where] = round(time.monotonic() - start, 1)
    finally:
        servers.close()
    print(f"\n[doc commands] {len(ran)} run: {times}")
    assert set(ran) == set(RUN), set(RUN) - set(ran)
    # the auth lines started servers that require their tokens (the yaml's and the flags')
    assert any("auth on" in line for line in ready_lines), ready_lines
    assert (clone / "runs" / "eval-base" / "report.md").is_file()
    assert (clone / "data" / "swebench" / "tasks.jsonl").is_file()


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(var, raising=False)
