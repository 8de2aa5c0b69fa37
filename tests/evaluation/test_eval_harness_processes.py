"""`evaluate --harness mini-swe-agent` runs its episodes in long-lived harness processes (evaluation/harness.py).

The adapter's ``--serve`` loop runs for real (this venv has no mini-swe-agent, so each instance ends
``NotStarted``, which is all the loop needs). The harness's process handling runs against a double of
mini-swe-agent's python (``_DOUBLE``, named as one: a script that answers requests by instance id), so
that a process dying, hanging or answering garbage mid-run can be made to happen on cue; the real
mini-swe-agent is driven end to end in tests/frameworks/test_minisweagent.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evaluation import harness as harness_module
from evaluation.agent import AgentLimits, LostEpisode, TaskRef
from evaluation.endpoint import EndpointConfig
from evaluation.harness import MiniSweAgentHarness

ROOT = Path(__file__).resolve().parents[2]

# The double: `argv[0] -m env_client.adapters.minisweagent --serve ...` answered per instance id.
_DOUBLE = r'''
import json, os, sys, time
assert sys.argv[1:4] == ["-m", "env_client.adapters.minisweagent", "--serve"], sys.argv
log = open(os.environ["DOUBLE_LOG"], "a")
log.write(f"start {os.getpid()}\n"); log.flush()
served = 0
for line in sys.stdin:
    req = json.loads(line)
    served += 1
    iid = req["instance_id"]
    if iid == "die":
        print("the double dies here", file=sys.stderr, flush=True)
        sys.exit(3)
    if iid == "hang":
        time.sleep(3600)
    if iid == "garbage":
        print("not an outcome", flush=True)
        continue
    if iid.startswith("loud"):  # a flood on stderr, no line end, then the outcome
        sys.stderr.write("x" * 300_000)
        sys.stderr.flush()
    if iid == "huge":
        print(json.dumps({"exit_status": "Submitted", "submission": "x" * 4096}), flush=True)
        continue
    print(json.dumps({"exit_status": "Submitted", "submission": "", "reward": 1.0, "resolved": True,
                      "api_calls": 1, "steps": 1, "process": {"pid": os.getpid(), "instance": served}}), flush=True)
log.write(f"exit {os.getpid()}\n"); log.flush()
'''


@pytest.fixture
def double(tmp_path, monkeypatch):
    script = tmp_path / "double.py"
    script.write_text(_DOUBLE)
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    python.chmod(0o755)
    log = tmp_path / "double.log"
    log.touch()
    monkeypatch.setenv("DOUBLE_LOG", str(log))
    monkeypatch.setattr(harness_module, "GRACE_S", 0.0)
    monkeypatch.setattr(harness_module, "OUTCOME_LIMIT", 1024)  # the "huge" answer is over it
    endpoint = EndpointConfig(base_url="http://127.0.0.1:9/v1", model="policy-double")
    harness = MiniSweAgentHarness(str(python), endpoint, ["http://127.0.0.1:9"], tmp_path / "out")
    return harness, log


def _events(log: Path) -> list[str]:
    return log.read_text().split("\n")[:-1]


async def _episode(harness: MiniSweAgentHarness, instance_id: str, max_episode_s: float = 60.0):
    result, record = await harness.run_episode(None, TaskRef(instance_id=instance_id), 0,
                                               AgentLimits(max_episode_s=max_episode_s))
    return result


def test_one_process_runs_the_episodes_one_after_another(double):
    harness, log = double

    async def main():
        # loud: its stderr must be read all along, or the double blocks on a full pipe (then it is lost)
        results = [await _episode(harness, name, max_episode_s=10) for name in ("ok-0", "loud-1", "ok-2")]
        assert len(harness._idle) == 1 and harness.started == 1
        await harness.aclose()
        return results

    results = asyncio.run(main())
    assert [r.status for r in results] == ["resolved"] * 3
    events = _events(log)
    assert len(events) == 2 and events[0].startswith("start ") and events[1] == "exit " + events[0].split()[1]
    assert not harness._idle


def test_concurrent_episodes_get_a_process_each_and_share_them_afterwards(double):
    harness, log = double

    async def main():
        first = await asyncio.gather(*(_episode(harness, f"ok-{i}") for i in range(2)))
        second = await asyncio.gather(*(_episode(harness, f"ok-{i}") for i in range(2, 4)))
        await harness.aclose()
        return first + second

    assert [r.status for r in asyncio.run(main())] == ["resolved"] * 4
    assert harness.started == 2
    assert sorted(e.split()[0] for e in _events(log)) == ["exit", "exit", "start", "start"]


@pytest.mark.parametrize("how, reason", [
    ("die", "mini-swe-agent exited 3 without a result: the double dies here"),
    ("garbage", "mini-swe-agent answered a line that is not a result (killed): not an outcome"),
    ("hang", "mini-swe-agent: no result within 2 s (killed)"),
    ("huge", "mini-swe-agent's result line is over 1024 bytes (killed)"),
])
def test_a_process_that_fails_an_episode_loses_it_and_is_replaced(double, how, reason):
    """The episode is lost (retried by evaluate, never scored); the process is gone, its group killed;
    the next episode runs in a new one."""
    harness, log = double

    async def main():
        before = await _episode(harness, "ok-0")
        with pytest.raises(LostEpisode) as lost:
            await _episode(harness, how, max_episode_s=2.0)
        after = await _episode(harness, "ok-1")
        await harness.aclose()
        return before, str(lost.value.reason), after

    before, why, after = asyncio.run(main())
    assert why.startswith(reason), why
    assert before.status == after.status == "resolved" and harness.started == 2
    starts = [e.split()[1] for e in _events(log) if e.startswith("start ")]
    assert len(starts) == 2
    for pid in starts:  # no process is left behind
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def test_a_process_is_replaced_after_its_share_of_episodes(double, monkeypatch):
    harness, log = double
    monkeypatch.setattr(harness_module, "EPISODES_PER_PROCESS", 2)

    async def main():
        for i in range(5):
            await _episode(harness, f"ok-{i}")
        await harness.aclose()

    asyncio.run(main())
    events = _events(log)
    assert harness.started == 3 and [e.split()[0] for e in events].count("exit") == 3, events


def test_the_adapter_serves_request_lines_until_stdin_ends():
    """The real ``--serve`` loop (no mini-swe-agent here: an instance ends NotStarted, naming the install
    line): one outcome line per request, in order, each with the process's count; a bad line is answered,
    not fatal; what an instance prints (through Python or straight to fd 1) goes to stderr, never into
    the outcome channel."""
    requests = [json.dumps({"instance_id": "a", "output": "/nonexistent/a.json"}), "not json", "",
                json.dumps({"instance_id": "noisy"})]
    code = ("import os, sys\n"
            "import env_client.adapters.minisweagent as m\n"
            "real = m.run_instance\n"
            "def run_instance(urls, instance_id, **kw):\n"
            "    if instance_id != 'noisy':\n"
            "        return real(urls, instance_id, **kw)\n"
            "    print('a library prints this', flush=True)\n"
            "    os.write(1, b'and this at the fd level\\n')\n"
            "    return {'exit_status': 'Submitted', 'instance_id': instance_id}\n"
            "m.run_instance = run_instance\n"
            "print('a print before the loop', flush=True)\n"
            "sys.exit(m.main(['--serve', '--env-url', 'http://127.0.0.1:9']))\n")
    proc = subprocess.run([sys.executable, "-c", code], input="\n".join(requests) + "\n", capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env={k: v for k, v in os.environ.items()
                                                                 if k != "PYTHONPATH"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "a print before the loop"  # before --serve took stdout over
    outcomes = [json.loads(line) for line in lines[1:]]
    assert [o["exit_status"] for o in outcomes] == ["NotStarted", "NotStarted", "Submitted"]
    assert [o["process"]["instance"] for o in outcomes] == [1, 2, 3]
    assert len({o["process"]["pid"] for o in outcomes}) == 1
    assert outcomes[0]["error_type"] == "MissingDependencyError" and 'pip install -e ".[client,minisweagent]"' \
        in outcomes[0]["error"] and outcomes[1]["error_type"] == "BadRequest"
    assert "a library prints this" in proc.stderr and "and this at the fd level" in proc.stderr
    both = subprocess.run([sys.executable, "-m", "env_client.adapters.minisweagent", "--serve", "--env-url",
                           "http://127.0.0.1:9", "--instance-id", "a"], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, stdin=subprocess.DEVNULL)
    assert both.returncode == 2 and "--serve takes --instance-id from each request line" in both.stderr, both.stderr
