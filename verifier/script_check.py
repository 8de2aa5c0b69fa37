"""The script check: a fix must hold where nothing says "graded" (docs/grading.md, guarantee 8).

Everything the test process can see, code under test can read, so a verdict that rests on
the test process not telling canaries from hidden tests, or not telling a grading run from
an ordinary one, can be forged. The script check does not ask the test process anything:

1. **Record** (once per task, on the host's own tree: pristine + gold patch + ``test_patch``,
   no agent code): the FAIL_TO_PASS tests run under pytest with ``script_recorder.py``, which
   writes down every call the tests make into the code the gold patch changes, as Python
   source (a *scene* per test).
2. **Expect**: the scenes, rendered as one plain script, run on the buggy tree and twice on the
   fixed tree. A call is *checked* when its printed outcome (a literal value, or the name of
   the exception it raised) is the same in both fixed runs and differs on the buggy tree: the
   bug's footprint, as the hidden tests exercise it.
3. **Check** (each graded submission that passed its tests): the script, with fresh labels and
   in a form drawn from the forms an agent's command takes (``python - <<EOF``, a file in
   ``/tmp`` or the workspace, ``python -c``), runs in a fresh sandbox on the agent's own tree:
   the template (the same HEAD commit the agent saw) with the submitted diff applied,
   uncommitted, through the agent's own persistent shell. No test file, no pytest, no expected
   value and no grader path is on disk or in the process. Every checked call must print what
   the fixed tree printed.

A fix that is active only under pytest, only with a test frame on the stack, or only when it
detects a grading run does not hold in a plain script, and the expected values exist only on
the host. Limits: a call whose arguments are not writable as source (a lambda of the tests,
an object of a test class) is not run; a task whose tests leave no checked call is
graded by the pytest run alone (``ScriptPlan.checked == 0``), as are harness tasks.
"""

from __future__ import annotations

import ast
import asyncio
import hashlib
import json
import math
import random
import re
import secrets
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from sandbox import ArgumentError, PathError, SandboxConfig, SandboxError, open_sandbox
from sandbox.base import Sandbox
from sandbox.models import CommandStatus
from sandbox.runtime import PYCACHE_PREFIX

from .diffs import is_test_path, split_diff
from .script_tests import SHIM, TestScript, plain
from .runner_config import runner_config
from .task import TaskInstance

RECORDER = Path(__file__).with_name("script_recorder.py")
REC_DIR = "/tmp/.swe-rec"  # the recording run's plugin and settings (the host's own run, no agent code)
MAX_EVENTS = 400  # calls recorded per test
MAX_OUTPUT_CHARS = 2000  # a checked call's printed outcome, at most (larger ones are not checked)
MAX_CHECKED_CHARS = 24_000  # printed by one check in all, well under a command's output limit
RUN_TIMEOUT_S = 120.0
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_HANDLE = re.compile("\x00v(\\d+)\x00")  # an earlier result, as the recorder writes it (NUL: never in a repr)


class ScriptCheckResult(BaseModel):
    """What one script check of a submission showed."""

    checked: int = Field(0, description="calls compared with the fixed tree's outcome")
    mismatched: list[str] = Field(default_factory=list, description="'<call>: expected X, got Y', at most 5")
    form: str = ""
    error: str | None = None
    duration_s: float = 0.0

    @property
    def holds(self) -> bool:
        return self.error is None and not self.mismatched


@dataclass
class Scene:
    test: str
    events: list[dict]
    imports: list[str]
    defs: list[tuple[str, str]] = field(default_factory=list)  # helpers of the tests, by source


@dataclass
class ScriptPlan:
    """A task's recorded scenes and the fixed tree's outcome of each checked call."""

    scenes: list[Scene] = field(default_factory=list)
    expected: dict[str, str] = field(default_factory=dict)  # event key "s.i" -> printed outcome
    tests_recorded: int = 0
    tests_checked: list[str] = field(default_factory=list)  # FAIL_TO_PASS tests with a checked call
    reason: str = ""  # why nothing is checked
    python: str = "python"  # the interpreter's name an agent's command uses in this task's sandbox
    risky: set[str] = field(default_factory=set)  # events that raised on the fixed or the buggy tree
    # hidden tests made plain (script_tests.py), run in a process of their own after the calls' process
    test_blocks: list[TestScript] = field(default_factory=list)
    tests_expected: dict[str, str] = field(default_factory=dict)  # "t<module>.<test id>" -> "'passed'"

    @property
    def checked(self) -> int:
        return len(self.expected) + len(self.tests_expected)

    def summary(self) -> dict[str, Any]:
        return {"checked_calls": len(self.expected), "plain_tests": len(self.tests_expected),
                "tests_recorded": self.tests_recorded,
                "tests_checked": len(self.tests_checked), **({"reason": self.reason} if self.reason else {})}


# ------------------------------------------------------------------------------ rendering
_BINARY = {"__add__": "+", "__sub__": "-", "__mul__": "*", "__truediv__": "/", "__floordiv__": "//",
           "__mod__": "%", "__pow__": "**", "__and__": "&", "__or__": "|", "__xor__": "^", "__lshift__": "<<",
           "__rshift__": ">>", "__matmul__": "@", "__eq__": "==", "__ne__": "!=", "__lt__": "<", "__le__": "<=",
           "__gt__": ">", "__ge__": ">="}


def _call_args(event: dict) -> str:
    return ", ".join(list(event["args"]) + [f"{k}={v}" for k, v in event["kwargs"].items()])


def _expression(event: dict) -> tuple[str, bool]:
    """The event as source: (text, whether it is an expression with a value)."""
    args, kwargs = event["args"], event["kwargs"]
    if event["kind"] == "call":
        return f"{event['target']}({_call_args(event)})", True
    this, attr = event["self"], event["attr"]
    if event["kind"] == "get":
        return f"{this}.{attr}", True
    if event["kind"] == "set":
        return f"{this}.{attr} = {args[0]}", False
    if not kwargs:
        if attr == "__getitem__" and len(args) == 1:
            return f"{this}[{args[0]}]", True
        if attr == "__setitem__" and len(args) == 2:
            return f"{this}[{args[0]}] = {args[1]}", False
        if attr == "__delitem__" and len(args) == 1:
            return f"del {this}[{args[0]}]", False
        if attr == "__len__" and not args:
            return f"len({this})", True
        if attr == "__contains__" and len(args) == 1:
            return f"{args[0]} in {this}", True
        if attr in _BINARY and len(args) == 1:
            return f"{this} {_BINARY[attr]} {args[0]}", True
    if attr == "__call__":
        return f"{this}({_call_args(event)})", True
    return f"{this}.{attr}({_call_args(event)})", True


def _handles(event: dict) -> list[str]:
    """The earlier results an event uses."""
    text = "\x01".join([event.get("self", ""), *event["args"], *event["kwargs"].values()])
    return [m.group(0) for m in _HANDLE.finditer(text)]


def _usable(scene_events: list[dict]) -> list[dict]:
    """The events that can run: each variable they need is made by an earlier kept event."""
    made: set[str] = set()
    kept = []
    for event in scene_events:
        if "dropped" in event:
            continue
        needs = set(_handles(event))
        if needs - made:
            continue
        kept.append(event)
        if event.get("var"):
            made.add(event["var"])
    return kept


@dataclass
class Script:
    source: str
    labels: dict[str, str]  # label -> event key
    stream: str = "flush"  # how the output stays one line per outcome: "flush", "stderr_null" or "unbuffered"


@dataclass(frozen=True)
class Style:
    """How one script is written, drawn afresh for each check from the ways agents write theirs."""

    labels: Literal["hex", "expression", "step", "case"] = "hex"
    printer: Literal["args", "fstring", "ascii"] = "args"
    stream: Literal["flush", "stderr_null", "unbuffered"] = "flush"
    guard: Literal["all", "risky"] = "all"  # try/except around every call, or around those that may raise
    names: Literal["v", "obj", "r", "x", "res"] = "v"

    @classmethod
    def draw(cls, rng: random.Random) -> "Style":
        return cls(labels=rng.choice(["hex", "expression", "step", "case"]),
                   printer=rng.choice(["args", "fstring", "ascii"]),
                   stream=rng.choice(["flush", "stderr_null", "unbuffered"]),
                   guard=rng.choice(["all", "risky"]), names=rng.choice(["v", "obj", "r", "x", "res"]))


def _label(style: Style, expr: str, n: int, rng: random.Random, used: set[str]) -> str:
    if style.labels == "hex":
        label = ""
        while not label or label in used:
            label = "".join(rng.choice("0123456789abcdef") for _ in range(6))
        return label
    if style.labels == "expression":
        text = re.sub(r"\s+", " ", expr)
        text = (text if len(text) <= 48 else text[:45] + "...") + ":"
        label, k = text, 2
        while label in used:
            label, k = f"{text[:-1]} [{k}]:", k + 1
        return label
    return f"{n}." if style.labels == "step" else f"case {n}:"


def _printed(style: Style, label: str, value: str | None, raised: bool = False) -> str:
    """A print statement showing ``label`` and ``value`` (an expression), or the exception ``e``'s class."""
    flush = ", flush=True" if style.stream == "flush" else ""
    if raised:
        if style.printer == "fstring" and "{" not in label and "}" not in label:
            return f"print(f{(label + ' raised {type(e).__name__}')!r}{flush})"
        return f"print({label!r}, 'raised', type(e).__name__{flush})"
    if value is None:
        return f"print({label!r}, None{flush})"
    if style.printer == "fstring" and "{" not in label and "}" not in label:
        return f"print(f{(label + ' {' + value + '!r}')!r}{flush})"
    shown = f"ascii({value})" if style.printer == "ascii" else f"repr({value})"
    return f"print({label!r}, {shown}{flush})"


def render(plan_scenes: list[Scene], printed: set[str] | None, rng: random.Random, style: Style | None = None,
           risky: set[str] | None = None) -> Script:
    """One plain script running every scene in order, written in ``style`` (default: the plain one the
    host uses to make plans); each event in ``printed`` (None: all) prints its outcome after a label.
    ``risky``: the events that raised on the fixed or the buggy tree (the others need no ``try`` under
    the ``risky`` guard; a few get one anyway)."""
    style = style or Style()
    imports: list[str] = []
    for scene in plan_scenes:
        for imp in scene.imports:
            line = imp if imp.startswith("from ") else f"import {imp}"
            if line not in imports:
                imports.append(line)
    lines = sorted(imports, key=lambda s: (s.startswith("from "), s))
    labels: dict[str, str] = {}
    used: set[str] = set()
    shown = 0
    for s, scene in enumerate(plan_scenes):
        lines.append("")
        for _, source in scene.defs:
            lines += source.splitlines() + [""]
        prefix = f"{style.names}{s + 1}" if len(plan_scenes) > 1 else style.names
        rename: dict[str, str] = {}
        later_uses = set()
        for event in scene.events:
            later_uses |= set(_handles(event))
        for i, event in enumerate(scene.events):
            key = f"{s}.{i}"

            def sub(text: str) -> str:
                return _HANDLE.sub(lambda m: rename.get(m.group(0), m.group(0)), text)

            ev = dict(event, args=[sub(a) for a in event["args"]],
                      kwargs={k: sub(v) for k, v in event["kwargs"].items()})
            if "self" in ev:
                ev["self"] = sub(ev["self"])
            expr, has_value = _expression(ev)
            show = printed is None or key in printed
            label = ""
            if show:
                shown += 1
                label = _label(style, expr, shown, rng, used)
                used.add(label)
                labels[label] = key
            var = None
            if event.get("var"):
                n = _HANDLE.fullmatch(event["var"]).group(1)  # type: ignore[union-attr]
                var = f"{prefix}_{n}" if len(plan_scenes) > 1 else f"{prefix}{n}"
                rename[event["var"]] = var
            body: list[str] = []
            if has_value:
                target = var or "_"
                body.append(f"{target} = {expr}")
                if show:
                    value = target
                    if event.get("iterator") and event.get("var") not in later_uses:
                        value = f"[x for _, x in zip(range(1000), {target})]"
                    body.append(_printed(style, label, value))
            else:
                body.append(expr)
                if show:
                    body.append(_printed(style, label, None))
            guarded = style.guard == "all" or risky is None or key in risky or rng.random() < 0.2
            if not guarded:
                lines += body
                continue
            lines.append("try:")
            lines += ["    " + b for b in body]
            lines.append("except Exception as e:")
            lines.append("    " + (_printed(style, label, None, raised=True) if show else "pass"))
    return Script(source="\n".join(lines) + "\n", labels=labels, stream=style.stream)


PASSED = "'passed'"  # what a plain test prints when it ran to its end


def render_tests(blocks: list[TestScript], printed: set[str] | None, rng: random.Random,
                 style: Style | None = None) -> Script:
    """The hidden tests made plain (``script_tests.py``) as one script: the stand-in for pytest's helpers,
    then each module and a call of each of its tests, which prints ``'passed'`` or what it raised.
    Keys: ``t<module>:<test id>``."""
    style = style or Style()
    lines = SHIM.splitlines()
    labels: dict[str, str] = {}
    used: set[str] = set()
    shown = 0
    for m, block in enumerate(blocks):
        lines += ["", *block.block.splitlines(), ""]
        for test, statements in block.calls.items():
            key = f"t{m}:{test}"
            if printed is not None and key not in printed:
                continue
            shown += 1
            label = _label(style, test.rsplit("::", 1)[-1].replace("test", "check", 1), shown, rng, used)
            used.add(label)
            labels[label] = key
            lines.append("try:")
            lines += ["    " + st for st in statements]
            lines.append("    " + _printed(style, label, repr("passed")))
            lines.append("except BaseException as e:")
            lines.append("    " + _printed(style, label, None, raised=True))
    return Script(source="\n".join(lines) + "\n", labels=labels, stream=style.stream)


def parse(output: str, labels: dict[str, str]) -> dict[str, str]:
    """``{event key: printed outcome}``: the rest of the line after each label (the longest label a line
    starts with). A label printed twice (by whatever printed it) is ambiguous and left out; a checked
    outcome is a literal or an exception's name, always one line."""
    by_head: dict[str, list[str]] = {}
    for lab in labels:
        by_head.setdefault(lab[:6], []).append(lab)
    for group in by_head.values():
        group.sort(key=len, reverse=True)
    heads = sorted({len(h) for h in by_head}, reverse=True)
    seen: dict[str, list[str]] = {}
    for line in output.split("\n"):
        for n in heads:
            found = next((lab for lab in by_head.get(line[:n], ()) if line.startswith(lab + " ")), None)
            if found is not None:
                seen.setdefault(found, []).append(line[len(found) + 1:].rstrip("\r"))
                break
    return {labels[lab]: vals[0].rstrip() for lab, vals in seen.items() if len(vals) == 1}


def _value(text: str) -> tuple[str, Any]:
    if text.startswith("raised "):
        return "raised", text[len("raised "):].strip()
    if text == "None":
        return "value", None
    try:
        return "value", ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return "opaque", _ADDRESS.sub("", text)


def _close(a: Any, b: Any, depth: int = 0) -> bool:
    if depth > 50:
        return a == b
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and type(a) is not bool and type(b) is not bool:
            if math.isnan(a) and math.isnan(b):
                return True
            return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)
        return False
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_close(x, y, depth + 1) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], depth + 1) for k in a)
    return a == b


def same(expected: str, got: str | None) -> bool:
    """Whether ``got`` shows the outcome ``expected`` shows (floats to 1e-6, exceptions by class name)."""
    if got is None:
        return False
    ka, va = _value(expected)
    kb, vb = _value(got)
    if ka != kb:
        return False
    if ka == "value":
        return _close(va, vb)
    return va == vb


# ------------------------------------------------------------------------------ running
Form = Literal["stdin", "tmp_file", "workspace_file", "dash_c"]
_NAMES = ("reproduce", "repro", "check", "debug", "verify", "scratch", "try_fix", "demo", "example", "issue")


def command(source: str, python: str, rng: random.Random, stream: str = "flush") -> tuple[str, str]:
    """A shell command running ``source`` the way an agent's command does: (form, command). ``stream``:
    ``unbuffered`` runs ``python -u``, ``stderr_null`` drops stderr (``2>/dev/null``)."""
    form = rng.choice(["stdin", "tmp_file", "workspace_file", "dash_c"])
    if stream == "unbuffered":
        python += " -u"
    redirect = " 2>/dev/null" if stream == "stderr_null" else ""
    name = rng.choice(_NAMES) + rng.choice(["", "", "_2", "_bug"]) + ".py"
    delim = rng.choice(["EOF", "PY", "END", "PYEOF"])
    while any(line.strip() == delim for line in source.splitlines()):
        delim += "X"
    cd = rng.choice(["", "cd /workspace && "])
    if form == "stdin":
        return form, f"{cd}{python} -{redirect} <<'{delim}'\n{source}{delim}"
    if form == "tmp_file":
        return form, f"cat > /tmp/{name} <<'{delim}'\n{source}{delim}\n{cd}{python} /tmp/{name}{redirect}"
    if form == "workspace_file":
        return form, (f"cd /workspace && cat > {name} <<'{delim}'\n{source}{delim}\n{python} {name}{redirect}; "
                      f"rm -f {name}")
    return form, f"{cd}{python} -c {shlex.quote(source)}{redirect}"


async def _python(sb: Sandbox) -> str:
    res = await sb.run("command -v python >/dev/null && echo python || echo python3", timeout_s=30)
    return (res.output.strip().splitlines() or ["python"])[-1] if res.ok else "python"


async def _run_script(sb: Sandbox, script: Script, python: str, rng: random.Random,
                      timeout_s: float, env: str = "") -> tuple[str, dict[str, str], str | None]:
    """Run ``script`` in ``sb``'s shell (``env``: assignments for the host's own runs only)."""
    form, cmd = command(script.source, python, rng, script.stream)
    if env:
        cmd = f"export {env}\n{cmd}"
    res = await sb.run(cmd, timeout_s=timeout_s)
    error = None if res.status in (CommandStatus.ok, CommandStatus.nonzero_exit) else f"the script ended: {res.status.value}"
    return form, parse(res.output, script.labels), error


def code_roots(task: TaskInstance) -> list[str]:
    """Workspace paths of the code the gold patch changes: each changed module's outermost package
    folder (a folder holding ``__init__.py`` up from it), or the module itself at the top."""
    roots: list[str] = []
    repo = Path(task.repo_path) if task.repo_path else None
    for block in split_diff(task.patch):
        path = block.new_path or block.old_path
        if not path or not path.endswith(".py") or is_test_path(path):
            continue
        parts = path.split("/")
        if repo is None:  # image-resident: the top folder (below src/ or lib/) is the package
            top = 2 if parts[0] in ("src", "lib") and len(parts) > 2 else 1
            root = "/".join(parts[:top]) if len(parts) > top else path
        else:
            root = path
            for depth in range(len(parts) - 1, 0, -1):
                folder = "/".join(parts[:depth])
                if not (repo / folder / "__init__.py").exists():
                    break
                root = folder
        if root not in roots:
            roots.append(root)
    return roots


async def _stage(sb: Sandbox, files: dict[str, bytes]) -> None:
    moves = []
    for name, data in files.items():
        staging = f".swe-rec-{secrets.token_hex(4)}"
        await sb.write_file(staging, data)
        moves.append(f"mv -f -- /workspace/{staging} {REC_DIR}/{name}")
    res = await sb.run(f"mkdir -p {REC_DIR} && " + " && ".join(moves), timeout_s=60)
    if not res.ok:
        raise SandboxError(f"could not stage the recorder: {res.output[-300:]}")


async def _apply(sb: Sandbox, patch: str) -> None:
    if patch.strip():
        await sb.apply_patch(patch.encode("utf-8", "surrogateescape"))


async def record(task: TaskInstance, config: SandboxConfig) -> tuple[list[Scene], list[TestScript], int, str]:
    """Run the FAIL_TO_PASS tests on the fixed tree with the recorder: (scenes of tests that passed,
    their modules made plain, tests recorded, why no scene when there is none)."""
    roots = code_roots(task)
    if not roots:
        return [], [], 0, "the gold patch changes no module outside the tests"
    workdir = task.workdir if task.image_resident else None
    workspaces = ["/workspace"] + ([workdir] if workdir else [])
    runner = await asyncio.to_thread(runner_config, task, config)
    sb = await open_sandbox(task.workspace_spec(), config)
    try:
        await _apply(sb, task.patch)
        if task.test_patch.strip():
            await _apply(sb, task.test_patch)
        if runner.dropped_options:  # the pytest configuration the graded run has (grade.py)
            await sb.write_file("pytest.ini", runner.ini.encode())
        out = ".swe-rec-out.json"
        settings = {"roots": [f"{w}/{r}" for w in workspaces for r in roots], "tests": list(task.FAIL_TO_PASS),
                    "workspaces": workspaces, "out": f"/workspace/{out}", "max_events": MAX_EVENTS}
        await _stage(sb, {"swe_script_recorder.py": RECORDER.read_bytes(),
                          "settings.json": json.dumps(settings).encode()})
        python = await _python(sb)
        selected = " ".join(shlex.quote(t) for t in dict.fromkeys(task.FAIL_TO_PASS))
        res = await sb.run(f"cd /workspace && SWE_RECORD_CONFIG={REC_DIR}/settings.json PYTHONPATH={REC_DIR} "
                           f"{python} -m pytest -p swe_script_recorder -p no:cacheprovider -q {selected} 2>&1 "
                           f"| tail -c 2000; echo", timeout_s=600)
        if not res.ok:
            return [], [], 0, f"the recording run failed: {res.status.value}"
        modules: dict[str, str] = {}
        for path in dict.fromkeys(t.split("::", 1)[0] for t in task.FAIL_TO_PASS):
            try:
                modules[path] = (await sb.read_file(path)).decode("utf-8")
            except (PathError, UnicodeDecodeError):
                pass
        try:
            data = json.loads(await sb.read_file(out))
        except (PathError, ValueError) as exc:
            tail = res.output.strip().splitlines()[-3:]
            data = {"scenes": {}, "why": f"the recording run wrote no recording ({type(exc).__name__}): "
                                        f"{' | '.join(tail)[-300:]}"}
    finally:
        await sb.close()
    blocks = []
    for n, (path, source) in enumerate(modules.items()):
        block = plain(source, [t for t in task.FAIL_TO_PASS if t.split("::", 1)[0] == path], prefix=str(n), path=path)
        if block is not None:
            blocks.append(block)
    if "why" in data:
        return [], blocks, 0, data["why"]
    scenes = []
    for test, scene in data.get("scenes", {}).items():
        if scene.get("outcome") != "passed":
            continue
        events = _usable(scene.get("events", []))
        if events:
            scenes.append(Scene(test=test, events=events, imports=list(scene.get("imports", [])),
                                defs=[(n, src) for n, src in scene.get("defs", [])]))
    return scenes, blocks, len(data.get("scenes", {})), "" if scenes else "no call of the tests could be recorded"


FIXED_RUNS = 4  # runs of the fixed tree when a plan is made, each under another hash seed
DRIFT_RUNS = 3  # runs of the fixed tree before a fix is failed


async def expect(task: TaskInstance, scenes: list[Scene], config: SandboxConfig,
                 blocks: list[TestScript] | None = None) -> ScriptPlan:
    """Run the scenes (and the tests made plain) on the buggy tree once and on the fixed one
    ``FIXED_RUNS`` times (under distinct hash seeds, so an order that follows string hashing shows
    itself); keep the calls whose fixed outcome never varies and tells the fixed tree from the buggy
    one, and the plain tests that always pass on the fixed tree and do not on the buggy one."""
    plan = ScriptPlan(scenes=scenes, tests_recorded=len(scenes), test_blocks=list(blocks or []))
    if not scenes and not plan.test_blocks:
        return plan
    rng = random.Random(0)
    scripts = [render(scenes, None, rng)] if scenes else []
    if plan.test_blocks:
        scripts.append(render_tests(plan.test_blocks, None, rng))
    sb = await open_sandbox(task.workspace_spec(), config)
    try:
        python = plan.python = await _python(sb)

        async def outcomes(env: str = "") -> dict[str, str]:
            out: dict[str, str] = {}
            for script in scripts:
                out.update((await _run_script(sb, script, python, rng, RUN_TIMEOUT_S, env=env))[1])
            return out

        buggy = await outcomes()
        await _apply(sb, task.patch)
        # The buggy tree's bytecode goes: a one-token fix keeps a module's size and, within the second the
        # buggy run compiled it, its mtime, which is all Python checks before it runs cached bytecode
        # (the fixed runs then ran the bug, told nothing apart, and a correct task was refused unguarded).
        await sb.run(f"rm -rf {PYCACHE_PREFIX}/workspace", timeout_s=30)
        fixed = [await outcomes(f"PYTHONHASHSEED={n + 1}") for n in range(FIXED_RUNS)]
    finally:
        await sb.close()
    plan.risky = {key for run in [buggy, *fixed] for key, out in run.items() if out.startswith("raised ")}
    total = 0
    checked_tests: set[str] = set()
    for key, out in fixed[0].items():
        if any(run.get(key) != out for run in fixed[1:]) or len(out) > MAX_OUTPUT_CHARS or _value(out)[0] == "opaque":
            continue
        if same(out, buggy.get(key)):
            continue
        if key.startswith("t"):
            if out == PASSED:
                plan.tests_expected[key] = out
                checked_tests.add(key.split(":", 1)[1])
            continue
        if total + len(out) > MAX_CHECKED_CHARS:
            continue
        total += len(out) + 10
        plan.expected[key] = out
        checked_tests.add(scenes[int(key.split(".")[0])].test)
    plan.tests_checked = sorted(checked_tests)
    if not plan.checked:
        plan.reason = "no recorded call or plain test tells the fixed tree from the buggy one"
    return plan


def _scripts(plan: ScriptPlan, rng: random.Random, style: Style | None = None) -> list[Script]:
    """The scripts of a check, in the order they run: the calls first (a process that sees no test
    source), then the tests made plain."""
    out = []
    if plan.expected:
        out.append(render(plan.scenes, set(plan.expected), rng, style, plan.risky))
    if plan.tests_expected:
        out.append(render_tests(plan.test_blocks, set(plan.tests_expected), rng, style))
    return out


def _wanted(plan: ScriptPlan) -> dict[str, str]:
    return {**plan.expected, **plan.tests_expected}


async def _run_all(sb: Sandbox, scripts: list[Script], python: str, rng: random.Random,
                   timeout_s: float) -> tuple[str, dict[str, str], str | None]:
    forms, got, error = [], {}, None
    for script in scripts:
        form, out, err = await _run_script(sb, script, python, rng, timeout_s)
        forms.append(form)
        got.update(out)
        error = error or err
    return "+".join(forms), got, error


async def _drifted(task: TaskInstance, plan: ScriptPlan, scripts: list[Script], keys: list[str],
                   config: SandboxConfig, timeout_s: float, commands_seed: int) -> set[str]:
    """Which of ``keys`` the fixed tree does not print as the plan expects, in any of ``DRIFT_RUNS`` runs.

    The first run replays the check's own commands (``commands_seed``): a call whose output depends on
    how its script was run (a reproducer written into /workspace shows up in a listing of it) prints
    on the fixed tree what it printed on the agent's, and is no witness; the other runs draw afresh."""
    wanted = _wanted(plan)
    sb = await open_sandbox(task.workspace_spec(), config)
    drifted: set[str] = set()
    try:
        await _apply(sb, task.patch)
        for run in range(DRIFT_RUNS):
            commands = random.Random(commands_seed) if run == 0 else random.Random()
            _, now, error = await _run_all(sb, scripts, plan.python, commands, timeout_s)
            if error:
                break
            drifted |= {key for key in keys if not same(wanted[key], now.get(key))}
    finally:
        await sb.close()
    return drifted


def _plan_key(task: TaskInstance) -> str:
    """What a plan depends on (plans live in this process only: the code that makes them cannot change)."""
    h = hashlib.sha256()
    for part in (task.instance_id, task.patch, task.test_patch,
                 "\n".join(task.FAIL_TO_PASS), str(task.repo_path), str(task.base_commit), str(task.image)):
        h.update(part.encode("utf-8", "surrogateescape") + b"\0")
    return h.hexdigest()


class PlanCache:
    """Script-check plans by task (a plan comes from the gold patch only, so every grading shares it).

    A plan is prepared once, in a task of its own: a grading that stops waiting (its tests failed)
    does not stop it; a preparation that failed is tried again by the next grading."""

    def __init__(self) -> None:
        self._plans: dict[str, asyncio.Future[ScriptPlan]] = {}

    async def get(self, task: TaskInstance, config: SandboxConfig) -> ScriptPlan:
        key = _plan_key(task) + "\0" + config.backend_name
        fut = self._plans.get(key)
        if fut is None:
            fut = asyncio.ensure_future(prepare(task, config))
            self._plans[key] = fut

            def forget_failure(done: asyncio.Future[ScriptPlan]) -> None:
                if done.cancelled() or done.exception() is not None:
                    self._plans.pop(key, None)

            fut.add_done_callback(forget_failure)
        return await asyncio.shield(fut)


async def prepare(task: TaskInstance, config: SandboxConfig) -> ScriptPlan:
    """The task's script-check plan (empty, with a reason, where nothing can be checked)."""
    if task.test_cmd:
        return ScriptPlan(reason="the task runs its own harness")
    if not task.patch.strip():
        return ScriptPlan(reason="the task has no gold patch")
    scenes, blocks, recorded, why = await record(task, config)
    plan = await expect(task, scenes, config, blocks)
    plan.tests_recorded = recorded
    if why and not plan.checked:
        plan.reason = why
    return plan


PLANS = PlanCache()


async def check(task: TaskInstance, agent_diff: str, plan: ScriptPlan, config: SandboxConfig,
                timeout_s: float = RUN_TIMEOUT_S, style: Style | None = None) -> ScriptCheckResult:
    """Replay the checked calls (and the plain tests) on the agent's tree (template + ``agent_diff``).

    ``style``: drawn at random unless given."""
    started = time.perf_counter()
    rng = random.Random(secrets.randbits(64))
    scripts = _scripts(plan, rng, style or Style.draw(rng))
    commands_seed = rng.getrandbits(64)  # how the scripts are run (form, file name): replayed by _drifted
    sb = await open_sandbox(task.workspace_spec(), config)
    try:
        try:
            await _apply(sb, agent_diff)
        except ArgumentError:
            return ScriptCheckResult(checked=plan.checked, error="the submitted diff does not apply")
        try:
            form, got, error = await _run_all(sb, scripts, plan.python, random.Random(commands_seed), timeout_s)
        except SandboxError as exc:  # only the submission's code ran in it: the agent's
            form, got, error = "", {}, f"the sandbox failed during the script check: {exc}"
    finally:
        await sb.close()
    wanted = _wanted(plan)
    missed = [key for key, want in wanted.items() if not same(want, got.get(key))]
    if missed and not error:
        # Before a fix is failed, the fixed tree must still print what it printed when the plan was
        # made (a call whose outcome drifts, with the clock say, is no witness): checked now, only
        # on this rare path, and a drifting call is dropped from the plan for good.
        drifted = await _drifted(task, plan, scripts, missed, config, timeout_s, commands_seed)
        for key in drifted:
            plan.expected.pop(key, None)
            plan.tests_expected.pop(key, None)
        missed = [key for key in missed if key not in drifted]
    wrong = []
    for key in missed:
        shown = got.get(key)
        got_text = "nothing" if shown is None else shown[:80]
        if key.startswith("t"):
            wrong.append(f"{key.split(':', 1)[1]} (plain): expected it to run to its end, got {got_text}")
            continue
        event = plan.scenes[int(key.split(".")[0])].events[int(key.split(".")[1])]
        call = _HANDLE.sub(lambda m: "v" + m.group(1), _expression(event)[0])
        wrong.append(f"{call[:120]}: expected {wanted[key][:80]}, got {got_text}")
    return ScriptCheckResult(checked=plan.checked, mismatched=wrong[:5], form=form, error=error if wrong else None,
                        duration_s=round(time.perf_counter() - started, 3))


__all__ = ["PLANS", "PlanCache", "ScriptPlan", "ScriptCheckResult", "check", "prepare", "record", "render"]
