"""Local teachers: checkpoints of our own behind OpenAI-compatible servers on loopback.

Runs without API keys (the demo, CI) replay to N local models instead of paid APIs: for
every checkpoint this module starts one server process (by default `transformers serve`,
pinned to that one model, on the CPU), waits until it answers `/health`, and returns a
`TeachersFile` (price 0, no API key) that `TeacherClient` / `replay()` call over real HTTP,
exactly like a remote provider (no code path of their own, so the demo tests the real one). Stopping kills each server's process group.

    with LocalTeachers(["runs/warm-a", "runs/warm-b"]) as local:
        result = await replay(states, local.teachers)

or `trainer-client replay --local-teacher runs/warm-a --local-teacher runs/warm-b ...`.

Served copy. A server does not read the checkpoint directory itself but a "served copy"
in a private work directory: symlinks to every file of the checkpoint, plus the tokenizer
files it lacks. Warm-start/SFT checkpoints may hold only the weights (their run config
names the tokenizer `qwen-offline`); for those the copy gets the trainer's offline Qwen2
tokenizer (`trainer_client.tokenizer`), or only its chat template when the checkpoint has
a tokenizer but no template. The copy's directory name is the model name the server
accepts (transformers serve pins the server to it; vLLM is told `--served-model-name`).

Servers (`serve=`):
- "transformers" (default, CPU): `transformers serve <model> --device cpu`, run through
  `python -m trainer_client.replay.local serve ...`, which is the transformers CLI with three
  fixes (`serve_main`): a temperature above 0 samples (transformers serve alone keeps the
  checkpoint's greedy default, so k samples were k copies), it drops null-valued fields of request messages (the env server's
  state(t) messages carry `"tool_calls": null`, valid OpenAI, which transformers serve 5.x
  turns into a 500, `'NoneType' object is not iterable`, and which would also drop the
  message's content), and it returns an answer whose `<tool_call>` region is not valid JSON
  (a weak model's malformed or truncated call) as plain content instead of a 500. Behaviour of transformers serve that matters here (5.23, read from its source):
  it parses Qwen `<tool_call>` output into OpenAI `tool_calls`; `max_tokens` becomes
  `max_new_tokens`; `temperature: 0` means greedy (local teachers send 0); `tool_choice` is ignored (logged, not
  rejected), so local teachers do not send it; it generates one request at a time.
- "vllm" (GPU): `vllm serve <served copy> --served-model-name <model>` with Qwen/Hermes
  tool-call parsing (`--enable-auto-tool-choice --tool-call-parser hermes`). Not run here.
- a list of strings: any command template; the placeholders {python} {checkpoint} (the
  served copy, absolute) {model} {host} {port} {device} are filled in. It runs with the work
  directory as its cwd and must answer GET `health_path` with 200 once it can serve.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field

from env_client.processes import (StartupError, free_port, log_tail, probe_health, start_process,
                                  stop_process_groups)

from .config import ReplayConfigError, RetryConfig, TeacherConfig, TeachersFile

__all__ = [
    "LocalServeOptions",
    "LocalServer",
    "LocalTeacher",
    "LocalTeacherError",
    "LocalTeachers",
    "SERVE_PRESETS",
    "local_teachers",
    "parse_local_teacher",
    "stage_checkpoint",
]

OFFLINE_TOKENIZER = "qwen-offline"
"""The trainer's tokenizer name (trainer_client/config.py): the offline Qwen2 tokenizer."""

SERVE_PRESETS: dict[str, list[str]] = {
    "transformers": ["{python}", "-m", "trainer_client.replay.local", "serve", "{model}",
                     "--host", "{host}", "--port", "{port}", "--device", "{device}", "--log-level", "info"],
    "vllm": ["vllm", "serve", "{checkpoint}", "--served-model-name", "{model}", "--host", "{host}",
             "--port", "{port}", "--enable-auto-tool-choice", "--tool-call-parser", "hermes"],
}

# A checkpoint has a tokenizer when it holds one of these files.
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer.tiktoken", "qwen.tiktoken")
_PORT_IN_USE = re.compile(r"address already in use|errno 98", re.I)


class LocalTeacherError(ReplayConfigError):
    """A local teacher could not be prepared or did not come up (the message holds its log tail)."""


class LocalTeacher(BaseModel):
    """One local teacher: a checkpoint directory, and the name its pairs and calls carry."""

    model_config = ConfigDict(extra="forbid")

    checkpoint: Path
    name: str | None = None
    """Default: the checkpoint directory's name (made unique)."""


class LocalServeOptions(BaseModel):
    """How the local servers run, and the TeacherConfig fields of the teachers they back."""

    model_config = ConfigDict(extra="forbid")

    serve: Literal["transformers", "vllm"] | list[str] = "transformers"
    """A preset of SERVE_PRESETS or a command template (see the module docstring)."""
    device: str = "cpu"
    host: str = "127.0.0.1"
    threads: int | None = Field(default=None, ge=1)
    """OMP/MKL/torch threads per server process (None: the library default)."""
    tokenizer: str | None = OFFLINE_TOKENIZER
    """Tokenizer files for checkpoints without one: 'qwen-offline', a tokenizer directory, or
    None (such a checkpoint is then an error)."""
    startup_timeout_s: float = Field(default=600.0, gt=0)
    startup_progress_s: float = Field(default=20.0, ge=0)
    """While servers start (loading torch and the model: tens of seconds, minutes on a busy machine): a
    `[serve]` line on stderr as they start and every this many seconds until they answer (0: none)."""
    stop_timeout_s: float = Field(default=15.0, ge=0)
    health_path: str = "/health"
    port_retries: int = Field(default=3, ge=0)
    """Restarts on another port when the picked one was taken meanwhile."""
    log_dir: Path | None = None
    """Where the servers' logs go (kept); None: the private work directory (removed on stop)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment for the server processes."""
    # the teachers (TeacherConfig fields)
    max_tokens: int = Field(default=256, ge=1)
    temperature: float | None = 0.0
    """0: greedy decoding (deterministic teachers); None: the checkpoint's generation config."""
    tool_choice: str | None = None
    """Not sent by default: transformers serve ignores it."""
    timeout: float = Field(default=300.0, gt=0)
    max_concurrency: int = Field(default=1, ge=1)
    retry: RetryConfig = Field(default_factory=lambda: RetryConfig(max_retries=1, backoff_base_s=0.5))


@dataclass
class LocalServer:
    """One running (or failed) server process."""

    name: str
    model: str
    checkpoint: Path
    served_dir: Path
    log_path: Path
    host: str
    port: int = 0
    command: list[str] = field(default_factory=list)
    proc: subprocess.Popen | None = None
    started_at: float = 0.0
    startup_s: float | None = None
    """Seconds from process start to a healthy /health (None until healthy)."""
    added_files: list[str] = field(default_factory=list)
    """Tokenizer files the served copy got on top of the checkpoint's."""
    attempts: int = 0
    stopped: bool = False

    @property
    def origin(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"


# ------------------------------------------------------------------------------- helpers
def _safe_name(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")
    return name or "teacher"


def parse_local_teacher(value: str) -> LocalTeacher:
    """A `--local-teacher` value: `CHECKPOINT` or `NAME=CHECKPOINT`."""
    name, sep, path = value.partition("=")
    if sep and name and "/" not in name and not Path(value).exists():
        return LocalTeacher(checkpoint=Path(path), name=name)
    return LocalTeacher(checkpoint=Path(value))


def _has_chat_template(ckpt: Path) -> bool:
    if (ckpt / "chat_template.jinja").exists() or (ckpt / "chat_template.json").exists():
        return True
    if (ckpt / "additional_chat_templates").is_dir():
        return True
    cfg = ckpt / "tokenizer_config.json"
    if cfg.exists():
        import json

        try:
            return bool(json.loads(cfg.read_text(encoding="utf-8")).get("chat_template"))
        except (ValueError, OSError):
            return False
    return False


def _tokenizer_source(tokenizer: str | None) -> Path | None:
    if tokenizer is None:
        return None
    if tokenizer == OFFLINE_TOKENIZER:
        from trainer_client.tokenizer import qwen_tokenizer_dir

        return qwen_tokenizer_dir()
    path = Path(tokenizer)
    if not path.is_dir():
        raise LocalTeacherError(f"tokenizer {tokenizer!r} is neither {OFFLINE_TOKENIZER!r} nor a directory")
    return path


def stage_checkpoint(checkpoint: str | Path, dest: str | Path, tokenizer: str | None = OFFLINE_TOKENIZER) -> list[str]:
    """Make `dest` a served copy of `checkpoint`: a symlink per entry of the checkpoint, plus
    the tokenizer files (all of them, or only the chat template) that it lacks, copied from
    `tokenizer` ('qwen-offline' or a directory). Returns the names of the added files."""
    ckpt, dest = Path(checkpoint).resolve(), Path(dest)
    if not ckpt.exists():
        raise LocalTeacherError(f"checkpoint {checkpoint} does not exist")
    if not ckpt.is_dir() or not (ckpt / "config.json").is_file():
        raise LocalTeacherError(f"checkpoint {checkpoint} is not a model directory (no config.json)")
    dest.mkdir(parents=True, exist_ok=False)
    for entry in ckpt.iterdir():
        (dest / entry.name).symlink_to(entry)
    has_tokenizer = any((ckpt / f).exists() for f in _TOKENIZER_FILES)
    if has_tokenizer and _has_chat_template(ckpt):
        return []
    source = _tokenizer_source(tokenizer)
    if source is None:
        what = "a chat template" if has_tokenizer else "a tokenizer"
        raise LocalTeacherError(f"checkpoint {checkpoint} has no {what} and no fallback tokenizer was given")
    if has_tokenizer:
        names = [n for n in ("chat_template.jinja",) if (source / n).exists()]
        if not names:
            raise LocalTeacherError(f"checkpoint {checkpoint} has no chat template, nor has tokenizer {source}")
    else:
        names = sorted(p.name for p in source.iterdir() if p.is_file() and p.name != "BUILD_VERSION")
    for name in names:
        target = dest / name
        if target.is_symlink() or target.exists():
            target.unlink()
        shutil.copyfile(source / name, target)
    return names


# ------------------------------------------------------------------------------- the servers
class LocalTeachers:
    """Start one server per checkpoint; `teachers` is their TeachersFile. A context manager:

        with LocalTeachers(["ckpt-a", LocalTeacher(checkpoint="ckpt-b", name="b")]) as local:
            local.teachers      # TeachersFile: price 0, api_key_env None, loopback base_url
            local.servers       # LocalServer per teacher: port, startup_s, log_path, proc

    `start()` raises LocalTeacherError (a ReplayConfigError) when a checkpoint is unusable or a
    server exits / stays unhealthy; then every server already started has been stopped.
    """

    def __init__(self, checkpoints: Sequence[str | os.PathLike | LocalTeacher],
                 options: LocalServeOptions | None = None, **overrides) -> None:
        if not checkpoints:
            raise LocalTeacherError("no local teacher checkpoints given")
        opts = options or LocalServeOptions()
        self.options = LocalServeOptions.model_validate({**opts.model_dump(), **overrides}) if overrides else opts
        self.specs = [c if isinstance(c, LocalTeacher) else LocalTeacher(checkpoint=Path(c)) for c in checkpoints]
        self.servers: list[LocalServer] = []
        self.workdir: Path | None = None
        self._teachers: TeachersFile | None = None

    # -- lifecycle
    def __enter__(self) -> LocalTeachers:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def teachers(self) -> TeachersFile:
        if self._teachers is None:
            raise RuntimeError("LocalTeachers: not started")
        return self._teachers

    def start(self) -> TeachersFile:
        """Prepare the served copies, start every server, wait until all are healthy."""
        if self._teachers is not None:
            return self._teachers
        names = self._names()  # checks the specs before anything is created
        self.workdir = Path(tempfile.mkdtemp(prefix="local-teachers-"))
        atexit.register(self.stop)
        try:
            log_dir = self.options.log_dir or self.workdir / "logs"
            log_dir.mkdir(parents=True, exist_ok=True)
            for spec, name in zip(self.specs, names):
                model = _safe_name(name)
                served = self.workdir / model
                added = stage_checkpoint(spec.checkpoint, served, self.options.tokenizer)
                self.servers.append(LocalServer(
                    name=name, model=model, checkpoint=Path(spec.checkpoint), served_dir=served,
                    log_path=log_dir / f"{model}.log", host=self.options.host, added_files=added))
            for server in self.servers:
                self._launch(server)
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        self._teachers = TeachersFile(teachers=[self._teacher_config(s) for s in self.servers],
                                      retry=self.options.retry)
        return self._teachers

    def stop(self) -> None:
        """Stop every server (env_client.processes.stop_process_groups): SIGTERM to each process
        group, SIGKILL to what is left of them (children such as vLLM's engine) once every leader
        is gone or after stop_timeout_s. Leaders are reaped last, so their pids (the group ids)
        cannot be reused meanwhile."""
        atexit.unregister(self.stop)
        live = [s for s in self.servers if s.proc is not None and not s.stopped]
        stop_process_groups([s.proc for s in live], self.options.stop_timeout_s)
        for s in live:
            s.stopped = True
        self._teachers = None
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    # -- internals
    def _names(self) -> list[str]:
        names, seen = [], set()
        for spec in self.specs:
            base = spec.name or _safe_name(Path(spec.checkpoint).resolve().name)
            name, k = base, 2
            while name in seen or _safe_name(name) in {_safe_name(n) for n in seen}:
                if spec.name:
                    raise LocalTeacherError(f"local teacher name {spec.name!r} is given twice")
                name, k = f"{base}-{k}", k + 1
            seen.add(name)
            names.append(name)
        return names

    def _command(self, server: LocalServer) -> list[str]:
        template = self.options.serve
        if isinstance(template, str):
            template = SERVE_PRESETS[template]
        values = {"python": sys.executable, "checkpoint": str(server.served_dir), "model": server.model,
                  "host": server.host, "port": str(server.port), "device": self.options.device}
        try:
            return [part.format(**values) for part in template]
        except (KeyError, IndexError, ValueError) as exc:
            raise LocalTeacherError(f"bad serve command template {template}: {exc!r}") from exc

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1",
                    "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"})
        if self.options.threads is not None:
            for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
                env[var] = str(self.options.threads)
        # `python -m trainer_client.replay.local` must import this very package
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        env.update(self.options.env)
        return env

    def _launch(self, server: LocalServer) -> None:
        server.port = free_port(server.host)
        server.command = self._command(server)
        server.attempts += 1
        server.started_at = time.monotonic()
        try:
            server.proc = start_process(server.command, server.log_path, env=self._env(), cwd=self.workdir,
                                        header=f"$ {' '.join(server.command)}\n")
        except OSError as exc:
            raise LocalTeacherError(f"local teacher {server.name!r}: cannot run {server.command[0]!r}: {exc}") from exc

    def _failure(self, server: LocalServer, why: str) -> LocalTeacherError:
        where = f" (log: {server.log_path})" if self.options.log_dir else ""
        return LocalTeacherError(
            f"local teacher {server.name!r} ({server.checkpoint}) {why}{where}\n"
            f"command: {' '.join(server.command)}\n--- last lines of its log ---\n"
            f"{log_tail(server.log_path) or '(empty log)'}")

    def _wait_healthy(self) -> None:
        pending = list(self.servers)
        started = time.monotonic()
        deadline = started + self.options.startup_timeout_s
        every = self.options.startup_progress_s
        next_line = started + every
        kind = self.options.serve if isinstance(self.options.serve, str) else "custom command"
        if every > 0 and pending:
            print(f"[serve] starting {', '.join(s.name for s in pending)} ({kind}; logs in "
                  f"{pending[0].log_path.parent})", file=sys.stderr, flush=True)
        with httpx.Client(timeout=2.0, trust_env=False) as http:
            while pending:
                for server in list(pending):
                    try:  # one readiness check each: a server that exited is reaped and raises
                        ok = probe_health(http, server.origin, server.proc, self.options.health_path)
                    except StartupError as exc:
                        if _PORT_IN_USE.search(log_tail(server.log_path, 5)) and \
                                server.attempts <= self.options.port_retries:
                            self._launch(server)  # the port was taken after we picked it
                            continue
                        why = f"exited with code {exc.returncode} before it was healthy"
                        raise self._failure(server, why) from None
                    if ok:
                        server.startup_s = time.monotonic() - server.started_at
                        pending.remove(server)
                if pending:
                    now = time.monotonic()
                    if now > deadline:
                        raise self._failure(pending[0], f"was not healthy after {self.options.startup_timeout_s:g} s")
                    if every > 0 and now >= next_line:
                        next_line = now + every
                        print(f"[serve] starting {', '.join(s.name for s in pending)} ({kind}): {now - started:.0f} s, "
                              f"not answering {self.options.health_path} yet", file=sys.stderr, flush=True)
                    time.sleep(0.2)

    def _teacher_config(self, server: LocalServer) -> TeacherConfig:
        o = self.options
        return TeacherConfig(
            name=server.name, model=server.model, base_url=server.base_url, api_key_env=None,
            price_in=0.0, price_out=0.0, max_concurrency=o.max_concurrency, timeout=o.timeout,
            max_tokens=o.max_tokens, temperature=o.temperature, tool_choice=o.tool_choice)


@contextlib.contextmanager
def local_teachers(checkpoints: Sequence[str | os.PathLike | LocalTeacher],
                   options: LocalServeOptions | None = None, **overrides) -> Iterator[TeachersFile]:
    """`with local_teachers([...]) as teachers:` -> the TeachersFile; the servers stop on exit."""
    with LocalTeachers(checkpoints, options, **overrides) as local:
        yield local.teachers


# ------------------------------------------------------------------------------- the server entry
def _drop_nulls(message):
    return {k: v for k, v in message.items() if v is not None} if isinstance(message, dict) else message


def serve_main(argv: list[str]) -> None:
    """`transformers serve ARGV` with three fixes for chat completions (nothing else changes):
    null-valued message fields are dropped from requests; an answer whose `<tool_call>`
    region is not valid JSON comes back as plain text content (HTTP 200, no tool_calls)
    instead of an HTTP 500, so a teacher's malformed call is its answer, not a server fault;
    and a request with a temperature above 0 is sampled, as the OpenAI API means it
    (`transformers serve` keeps the checkpoint's `do_sample`, false unless its generation
    config says otherwise, so k samples at temperature 1.0 were k copies of the greedy answer)."""
    from transformers.cli.serving import chat_completion
    from transformers.cli.transformers import app

    original_handle = chat_completion.ChatCompletionHandler.handle_request
    original_parse = chat_completion.parse_assistant_message
    original_config = chat_completion.ChatCompletionHandler._build_generation_config

    def build_generation_config(self, body: dict, model_generation_config, use_cb: bool = False):
        config = original_config(self, body, model_generation_config, use_cb=use_cb)
        temperature = body.get("temperature")
        if temperature is not None and float(temperature) > 0 and body.get("generation_config") is None:
            config.do_sample = True
        return config

    async def handle_request(self, body: dict, request_id: str):
        if isinstance(body.get("messages"), list):
            body["messages"] = [_drop_nulls(m) for m in body["messages"]]
        return await original_handle(self, body, request_id)

    def parse_assistant_message(processor, model, generated_ids, input_ids, cleaned_content: str = "", tools=None):
        try:
            return original_parse(processor, model, generated_ids, input_ids, cleaned_content=cleaned_content,
                                  tools=tools)
        except ValueError:  # e.g. "json parser could not parse region as JSON"
            return cleaned_content, None, None

    chat_completion.ChatCompletionHandler.handle_request = handle_request
    chat_completion.ChatCompletionHandler._build_generation_config = build_generation_config
    chat_completion.parse_assistant_message = parse_assistant_message
    app(args=["serve", *argv], prog_name="transformers")


if __name__ == "__main__":
    if sys.argv[1:2] != ["serve"]:
        sys.exit("usage: python -m trainer_client.replay.local serve MODEL [transformers serve options]")
    serve_main(sys.argv[2:])
