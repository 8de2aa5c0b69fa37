"""Every install and quick-start line of README.md and docs/ (docs/frameworks/ has its own tests)
works as written on a fresh checkout.

- Each `pip install` line (in a fenced block or an inline span) installs from the checkout or the
  repository's URL, never `swe-openenv` from a package index (it is not on one), and names only
  extras pyproject.toml defines; each `make` line names a target of the Makefile; each
  `env-server` / `trainer-client` / `task-factory` line names a command that exists and only
  options that command takes (its own argparse parser, built here).
- The `[client]` line of docs/client.md, run as written (`bash -c LINE` with a fresh venv first on
  PATH, from the repository root), gives an environment where `import env_client` and the
  client-only commands work, and where every command of another extra ends with one line naming
  that extra (contract/extras.py) instead of a traceback.

The venv is cached under the gitignored `.cache/docs-client-venv/<hash>`, keyed by pyproject.toml,
the line itself and the Python version (an editable install: source changes need no rebuild);
~10 s to build, ~3 s to use. A venv that cannot be built fails the test under CI
(`missing("client-venv", ...)`) and skips it elsewhere, like tests/client/test_client_only_install.py.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from support.requirements import missing
from support.doc_blocks import shell_lines
from support.venvs import cached_venv

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md") if "frameworks" not in p.parts)]
PROGRAMS = ("pip", "pip3", "make", "env-server", "trainer-client", "task-factory")
EXTRAS = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
CLIENT_LINE = 'pip install -e ".[client]"'


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{line}"


def fenced_commands(path: Path) -> list[tuple[str, list[str]]]:
    """(where, argv) of every command line of a fenced block that runs one of PROGRAMS (after
    `VAR=value` prefixes, a `.venv/bin/` or a `$ ` prompt); continuation lines joined, comments
    dropped. In a block with `$ ` prompts only the prompted lines are commands (the rest is output)."""
    out: list[tuple[str, list[str]]] = []
    for start, _, text in shell_lines(path):
        try:
            argv = shlex.split(text, comments=True)
        except ValueError:
            continue
        while argv and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", argv[0]):
            argv = argv[1:]
        if argv and argv[0].removeprefix(".venv/bin/") in PROGRAMS:
            argv[0] = argv[0].removeprefix(".venv/bin/")
            out.append((_where(path, start), argv))
        elif argv[:3] in (["python", "-m", "pip"], ["python3", "-m", "pip"]):
            out.append((_where(path, start), ["pip", *argv[3:]]))
        elif argv[:2] == ["uv", "pip"]:
            out.append((_where(path, start), argv[1:]))
    return out


def inline_commands(path: Path) -> list[tuple[str, list[str]]]:
    """(where, argv) of every inline code span outside fenced blocks that holds `pip install` or
    starts with one of our programs and names a command (`trainer-client evaluate --model DIR`)."""
    text = path.read_text(encoding="utf-8")
    prose = re.sub(r"^\s*```.*?^\s*```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S | re.M)
    out = []
    for m in re.finditer(r"`([^`]+)`", prose):
        try:
            argv = shlex.split(" ".join(m.group(1).split()))
        except ValueError:
            continue
        where = _where(path, prose[: m.start()].count("\n") + 1)
        if "install" in argv and argv.index("install") > 0 and argv[argv.index("install") - 1] in ("pip", "pip3"):
            out.append((where, argv[argv.index("install") - 1:]))
        elif len(argv) > 1 and argv[0].removeprefix(".venv/bin/") in PROGRAMS[2:]:
            out.append((where, [argv[0].removeprefix(".venv/bin/"), *argv[1:]]))
    return out


def all_commands() -> list[tuple[str, list[str]]]:
    """Every command of the docs, one per argv (`make setup && make test` is two)."""
    out = []
    for where, argv in (c for path in DOCS for c in (*fenced_commands(path), *inline_commands(path))):
        part: list[str] = []
        for arg in [*argv, "&&"]:
            if arg in ("&&", "||", ";", "|", "&"):
                if part and part[0].removeprefix(".venv/bin/") in PROGRAMS:
                    out.append((where, [part[0].removeprefix(".venv/bin/"), *part[1:]]))
                part = []
            else:
                part.append(arg)
    return out


def pip_problems(argv: list[str]) -> list[str]:
    """What is wrong with one `pip install ...` command line: an index install of this project, or an
    extra pyproject.toml does not define."""
    if argv[1:2] != ["install"]:
        return []
    problems = []
    for arg in argv[2:]:
        if arg.startswith("-"):
            continue
        name, sep, url = arg.partition("@")
        req = re.fullmatch(r"\s*([A-Za-z0-9_.\-/]*)\s*(?:\[([^\]]*)\])?\s*", name)
        if req is None:
            continue
        project, extras = req.group(1), [e.strip() for e in (req.group(2) or "").split(",") if e.strip()]
        ours = project.lower().replace("_", "-") == "swe-openenv"
        from_checkout = project in (".", "..") or project.startswith(("./", "../", "/"))
        if ours and not (sep and url.strip()):
            problems.append(f"{arg!r} installs swe-openenv from a package index (it is on none): install "
                            f"from the checkout (pip install -e \".[EXTRA]\") or the repository's URL")
        if ours or from_checkout:
            problems += [f"{arg!r}: no extra {e!r} in pyproject.toml (it has {sorted(EXTRAS)})"
                         for e in extras if e not in EXTRAS]
    return problems


def _parsers() -> dict[str, argparse.ArgumentParser]:
    from env_server.cli import build_parser as env_server
    from task_factory.cli import build_parser as task_factory
    from trainer_client.cli import build_parser as trainer_client

    return {"env-server": env_server(), "task-factory": task_factory(), "trainer-client": trainer_client()}


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def cli_problems(argv: list[str], parsers: dict[str, argparse.ArgumentParser]) -> list[str]:
    """A command of one of our programs that does not exist, or an option it does not take."""
    parser, path = parsers[argv[0]], [argv[0]]
    for arg in argv[1:]:
        subs = _subparsers(parser)
        if arg.startswith("-") or not subs:
            break
        if arg not in subs:
            return [f"{' '.join(path)} has no command {arg!r} (it has {sorted(subs)})"]
        parser, path = subs[arg], [*path, arg]
    if _subparsers(parser):  # `trainer-client tasks`: prose naming a command group
        return []
    options = {s for action in parser._actions for s in action.option_strings}
    flags = {a.strip("[]").split("=")[0] for a in argv[len(path):] if a.lstrip("[").startswith("--")}
    return [f"{' '.join(path)} takes no option {f}" for f in sorted(flags - options)]


def test_install_and_command_lines_of_the_docs_are_valid():
    commands = all_commands()
    programs = {argv[0] for _, argv in commands}
    assert {"pip", "make", "env-server", "trainer-client", "task-factory"} <= programs, programs
    assert len(commands) >= 40, len(commands)
    targets = set(re.findall(r"^([A-Za-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))
    parsers = _parsers()
    problems = []
    for where, argv in commands:
        if argv[0] in ("pip", "pip3"):
            found = pip_problems(argv)
        elif argv[0] == "make":
            found = [f"no make target {t!r}" for t in argv[1:] if not t.startswith("-") and "=" not in t
                     and t not in targets]
        else:
            found = cli_problems(argv, parsers)
        problems += [f"{where}: {p}  [{shlex.join(argv)}]" for p in found]
    assert not problems, "\n".join(problems)
    client_lines = {where.split(":")[0] for where, argv in commands if argv == shlex.split(CLIENT_LINE)}
    assert {"README.md", "docs/client.md"} <= client_lines, client_lines  # the line the venv test runs


def test_the_checks_catch_what_they_are_for(tmp_path):
    page = tmp_path / "page.md"
    page.write_text('Install (`pip install\n"swe-openenv[client]"`), then `make demo && make test`:\n\n'
                    '```bash\nFOO=1 .venv/bin/env-server serve \\\n    --tasks t.jsonl   # a comment\n```\n\n'
                    '```console\n$ trainer-client evaluate --help\ntrainer-client evaluate: output\n```\n')
    assert [argv for _, argv in fenced_commands(page)] == [["env-server", "serve", "--tasks", "t.jsonl"],
                                                            ["trainer-client", "evaluate", "--help"]]
    assert [argv for _, argv in inline_commands(page)] == [["pip", "install", "swe-openenv[client]"],
                                                            ["make", "demo", "&&", "make", "test"]]
    assert pip_problems(shlex.split('pip install "swe-openenv[client]"'))
    assert pip_problems(shlex.split("pip install swe_openenv"))
    assert pip_problems(shlex.split('pip install -e ".[client,nosuch]"'))
    assert not pip_problems(shlex.split('pip install -e ".[client,train]"'))
    assert not pip_problems(shlex.split('pip install "swe-openenv[client] @ git+https://example.org/swe-openenv"'))
    assert not pip_problems(shlex.split("pip install pyarrow"))
    parsers = _parsers()
    assert cli_problems(["env-server", "serve", "--nosuch", "1"], parsers)
    assert cli_problems(["trainer-client", "tasks", "nosuch"], parsers)
    assert not cli_problems(["trainer-client", "tasks", "split", "--tasks", "t", "--held-out", "0.2"], parsers)


# ---- the [client] line, run as written ----

def _run(argv: list[str] | str, venv: Path, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`argv` (a string: through bash) with `venv` activated, as a user's shell would run it."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(venv),
               PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONNOUSERSITE="1")
    cmd = ["bash", "-c", argv] if isinstance(argv, str) else argv
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)


def docs_client_venv() -> Path:
    """`.cache/docs-client-venv/<hash>`: a fresh venv in which the docs' `[client]` line ran, from the root."""
    key = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + CLIENT_LINE.encode() + sys.version.encode())
    venv = ROOT / ".cache" / "docs-client-venv" / key.hexdigest()[:16]

    def install(python: Path) -> None:
        try:
            proc = _run(CLIENT_LINE, venv, ROOT, timeout=480)
        except subprocess.TimeoutExpired as exc:
            missing("client-venv", f"{CLIENT_LINE}: {exc}")
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr)[-2000:]
            missing("client-venv", f"{CLIENT_LINE} exited {proc.returncode}:\n{tail}")

    cached_venv(venv, part="client-venv", ready=".installed", stamp=CLIENT_LINE, install=install, prune_others=True)
    return venv


# (command, exit status, what stderr is: None for anything, else its one line's required parts)
CLIENT_ONLY = [
    ("python -c 'import env_client, contract; print(env_client.__file__)'", 0, None),
    ("trainer-client --help", 0, None),
    ("trainer-client evaluate --help", 0, None),
    ("trainer-client tasks split --help", 0, None),
    ("task-factory --help", 0, None),
    ("env-server --help", 1, ("env-server needs the 'env' extra: ", 'pip install -e ".[env]"', "uvicorn")),
    ("env-server serve --tasks t.jsonl --port 8000", 1, ("env-server needs the 'env' extra", "fastapi")),
    ("trainer-client train --config c.yaml --env-url http://127.0.0.1:8000", 1,
     ("trainer-client train needs the 'train' extra: ", 'pip install -e ".[train]"', "torch")),
    ("trainer-client warmstart --help", 1, ("trainer-client warmstart needs the 'train' extra", "torch")),
    ("trainer-client evaluate --model . --env-url http://127.0.0.1:8000 --tasks t.jsonl --out o", 1,
     ("trainer-client evaluate --model CHECKPOINT needs the 'train' extra: ", 'pip install -e ".[train]"', "torch")),
    ("trainer-client replay --env-url http://127.0.0.1:8000 --episode e --teachers t.yaml --out p.jsonl", 1,
     ("trainer-client replay needs the 'train' extra", "(missing: tqdm)")),
    ("task-factory validate tasks.jsonl --backend docker", 1,
     ("task-factory validate --backend docker needs the 'env' extra: ", 'pip install -e ".[env]"',
      "(missing: docker)")),
]


@pytest.mark.slow
def test_the_client_line_as_written_and_what_runs_after_it(tmp_path):
    venv = docs_client_venv()
    failures, outputs = [], []
    for command, status, parts in CLIENT_ONLY:  # from a folder outside the checkout
        proc = _run(command, venv, tmp_path)
        err = proc.stderr.strip()
        one_line = parts is None or (len(err.splitlines()) == 1 and all(p in err for p in parts))
        if proc.returncode != status or not one_line:
            failures.append(f"{command}: exit {proc.returncode} (want {status})\n{(proc.stdout + err)[-1500:]}")
        outputs.append(proc.stdout.strip())
    assert not failures, "\n\n".join(failures)
    assert outputs[0] == str(ROOT / "env_client" / "__init__.py"), outputs[0]  # this checkout, installed editable


def test_each_extra_named_by_a_command_has_the_modules_it_checks():
    """contract.extras's key modules come from distributions the extra of that name requires (which
    installed distribution provides a module: read from the distributions' own file lists)."""
    from importlib.metadata import packages_distributions

    from contract.extras import EXTRA_MODULES

    def norm(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    dists = packages_distributions()
    wrong = []
    for extra, modules in EXTRA_MODULES.items():
        names = {norm(re.match(r"[A-Za-z0-9_.\-]+", req).group(0)) for req in declared[extra]}
        wrong += [f"{extra}: {m} (from {dists.get(m)})" for m in modules
                  if not names & {norm(d) for d in dists.get(m, [])}]
    assert not wrong, wrong


def test_env_server_names_its_extra_before_building_its_parser(monkeypatch, capsys):
    """The check comes first: even a valid command line ends with the extra's line (exit 1)."""
    import importlib.util

    from env_server import cli

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "uvicorn" else real(name, *a))
    assert cli.main(["serve", "--tasks", "t.jsonl"]) == 1
    want = "env-server needs the 'env' extra: pip install -e \".[env]\" (missing: uvicorn)\n"
    assert capsys.readouterr().err == want
