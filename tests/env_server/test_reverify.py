"""``task-factory reverify``: real episodes over the real server, re-graded in the real sandbox."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import websockets
from env_support import call, requires_sandbox, run, run_server, tool

from env_server.config import ServerConfig
from env_server.episode import EpisodeConfig
from task_factory.cli import build_parser, main
from task_factory.reverify import reverify
from verifier.task import load_tasks


async def _episode(srv, episode_id: str, *steps: dict, submit: bool = True) -> dict:
    """Run one episode over /ws; the last reply's data (the submit's when ``submit``)."""
    async with websockets.connect(srv.ws_url + "/ws") as ws:
        r = await call(ws, "reset", {"index": 0, "episode_id": episode_id})
        for step in steps + ((tool("submit"),) if submit else ()):
            r = await call(ws, "step", step)
            assert r["type"] == "observation", r
        return r["data"]


async def _resolved_episodes(srv, task) -> None:
    # the gold patch goes in as a file the agent then applies and removes: the trace's diffs are
    # "gold.patch only", then the fix, then null on submit (unchanged) -- the graded diff is the fix
    gold = await _episode(srv, "ep-gold", tool("create", path="gold.patch", content=task.patch),
                          tool("bash", command="git apply gold.patch && rm gold.patch"))
    assert gold["reward"] == 1.0, gold
    empty = await _episode(srv, "ep-empty")
    assert empty["reward"] == 0.0, empty
    await _episode(srv, "ep-open", tool("bash", command="echo hi > note.txt"), submit=False)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory, demo_tasks_path: Path) -> Path:
    """A server data dir with real traces: gold, empty and unfinished episodes, and one graded by pass rate."""
    data = tmp_path_factory.mktemp("data")
    tasks = load_tasks(demo_tasks_path)
    with run_server(ServerConfig(tasks_path=demo_tasks_path, data_dir=data), tasks) as srv:
        run(_resolved_episodes(srv, tasks[0]))
    config = ServerConfig(tasks_path=demo_tasks_path, data_dir=data, episode=EpisodeConfig(grade_mode="pass_rate"))
    with run_server(config, tasks) as srv:
        rate = run(_episode(srv, "ep-rate"))
        assert 0.0 < rate["reward"] < 1.0, rate
    return data


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _write(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _copy_traces(data_dir: Path, dest: Path) -> Path:
    return Path(shutil.copytree(data_dir / "traces", dest / "traces"))


@requires_sandbox
def test_real_episodes_regrade_unchanged(data_dir: Path, demo_tasks_path: Path) -> None:
    gold = _records(data_dir / "traces" / "ep-gold.jsonl")
    assert gold[-1]["diff"] is None and "gold.patch" in gold[1]["diff"]  # the trace shape this test relies on
    report = run(reverify(data_dir, demo_tasks_path, concurrency=4))  # the data dir: its traces/ is used
    rows = {r.episode_id: r for r in report.rows}
    assert sorted(rows) == ["ep-empty", "ep-gold", "ep-open", "ep-rate"]
    summary = {k: (r.old_reward, r.new_reward, r.status) for k, r in rows.items()}
    assert summary["ep-gold"] == (1.0, 1.0, "unchanged") and summary["ep-empty"] == (0.0, 0.0, "unchanged")
    rate = rows["ep-rate"]  # graded again by pass rate, not "resolved" (which would give 0.0)
    assert rate.grade_mode == "pass_rate" and 0.0 < rate.new_reward == rate.old_reward < 1.0 and not rate.changed
    assert rows["ep-open"].status == "skipped" and rows["ep-open"].skipped.startswith("unfinished")
    assert rows["ep-open"].new_reward is None and not report.changed
    assert all(r.instance_id == "six__demo-1" and not r.tampered for r in report.rows)
    assert report.table().splitlines()[-1] == (
        "reverify (bwrap): 4 episode(s): 0 changed, 3 unchanged, 1 skipped, 0 not re-graded (error)")


@requires_sandbox
def test_a_fooled_grader_shows_as_a_changed_reward(data_dir: Path, demo_tasks_path: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture) -> None:
    traces = _copy_traces(data_dir, tmp_path)
    for name in ("ep-gold", "ep-rate"):  # fewer gradings: the empty submission and the unfinished episode
        (traces / f"{name}.jsonl").unlink()
    records = _records(traces / "ep-empty.jsonl")
    obs = records[-1]["observation"]
    obs["reward"], obs["metadata"]["resolved"] = 1.0, True  # what a fooled grader had recorded
    _write(traces / "ep-empty.jsonl", records)

    out = tmp_path / "report.json"
    argv = ["reverify", "--traces", str(traces), "--tasks", str(demo_tasks_path), "--json", str(out)]
    assert main(argv + ["--fail-on-change"]) == 1
    table = capsys.readouterr().out
    line = next(line for line in table.splitlines() if line.startswith("ep-empty"))
    assert line.split()[1:5] == ["six__demo-1", "1.00", "0.00", "changed"], table
    assert "1 changed, 0 unchanged, 1 skipped" in table
    rows = {r["episode_id"]: r for r in json.loads(out.read_text())["rows"]}
    empty = rows["ep-empty"]
    assert (empty["changed"], empty["old_reward"], empty["new_reward"], empty["status"]) == (True, 1.0, 0.0, "changed")
    assert rows["ep-open"]["status"] == "skipped" and rows["ep-open"]["changed"] is False
    assert main(argv) == 0  # a change alone is reported, not an error


@requires_sandbox
def test_episodes_that_cannot_be_regraded_get_rows(data_dir: Path, demo_tasks_path: Path, tmp_path: Path) -> None:
    traces = _copy_traces(data_dir, tmp_path)
    gold_text = (traces / "ep-gold.jsonl").read_text()
    for name in ("ep-gold", "ep-empty", "ep-rate"):
        (traces / f"{name}.jsonl").unlink()
    records = _records(traces / "ep-open.jsonl")
    unknown = _records(data_dir / "traces" / "ep-gold.jsonl")
    unknown[0]["instance_id"] = "no-such-task"
    _write(traces / "ep-unknown.jsonl", unknown)
    lines = gold_text.splitlines(keepends=True)  # a crash mid-write of the submit record
    (traces / "ep-torn.jsonl").write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])
    (traces / "ep-garbage.jsonl").write_text("not json\n")
    (traces / "ep-blank.jsonl").write_text("")
    crashed = records + [{**records[-1], "t": 2, "observation": {**records[-1]["observation"], "done": True}}]
    _write(traces / "ep-crashed.jsonl", crashed)  # ended by a sandbox error: done, no reward

    report = run(reverify(traces, demo_tasks_path))
    skipped = {r.episode_id: r.skipped for r in report.rows}
    assert skipped == {
        "ep-blank": "unreadable trace: no reset record",
        "ep-crashed": "ended without a reward (not graded)",
        "ep-garbage": "unreadable trace: no reset record",
        "ep-open": "unfinished (1 step(s), not done)",
        "ep-torn": "unfinished (2 step(s), not done)",
        "ep-unknown": "unknown instance id 'no-such-task'",
    }
    assert all(r.status == "skipped" and r.new_reward is None and not r.changed for r in report.rows)
    assert next(r for r in report.rows if r.episode_id == "ep-unknown").old_reward == 1.0


def test_bad_input_exits_2(tmp_path: Path, demo_tasks_path: Path, capsys: pytest.CaptureFixture) -> None:
    args = build_parser().parse_args(["reverify", "--traces", "d", "--tasks", "t.jsonl"])
    assert (args.backend, args.concurrency, args.json, args.fail_on_change, args.func.__name__) == (
        "bwrap", 2, None, False, "_reverify")
    base = ["reverify", "--tasks", str(demo_tasks_path), "--traces"]
    assert main(base + [str(tmp_path / "missing")]) == 2
    assert "no such traces folder" in capsys.readouterr().err
    (tmp_path / "traces").mkdir()
    assert main(base + [str(tmp_path)]) == 2
    assert "no episode traces (*.jsonl) in " + str(tmp_path / "traces") in capsys.readouterr().err
    (tmp_path / "traces" / "ep.jsonl").write_text("")
    assert main(["reverify", "--traces", str(tmp_path), "--tasks", str(tmp_path / "nope.jsonl")]) == 2
    assert "cannot read task file" in capsys.readouterr().err
    assert main(base + [str(tmp_path), "--json", str(tmp_path / "no" / "r.json")]) == 2
    assert "no such folder for --json" in capsys.readouterr().err
