"""`trainer-client tasks split` (train / held-out by repository) and `tasks filter` (by the pass
rate an evaluation measured), run as the command a user types."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from eval_support import trainer_client

from evaluation import EpisodeResult, EvalConfig, finish, split_tasks

REPOS = {"org/alpha": 3, "org/beta": 2, "org/gamma": 4, "org/delta": 1, "org/epsilon": 2}


def _rows() -> list[dict]:
    rows = []
    for repo, n in REPOS.items():
        for k in range(n):
            rows.append({"instance_id": f"{repo.replace('/', '__')}-{k}", "repo": repo, "source": "swe-bench",
                         "problem_statement": f"bug {k} in {repo}: ünïcode \"quoted\"", "FAIL_TO_PASS": [f"t{k}"],
                         "extra_field": {"kept": [1, 2.5, None]}})
    return rows


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _split(tasks: Path, tmp: Path, seed: int, tag: str, share: float = 0.3):
    train, held = tmp / f"train-{tag}.jsonl", tmp / f"held-{tag}.jsonl"
    proc = trainer_client("tasks", "split", "--tasks", tasks, "--held-out", share, "--seed", seed,
                          "--train-out", train, "--held-out-out", held)
    assert proc.returncode == 0, proc.stderr
    return train, held, proc


def test_split_by_repository(tmp_path: Path):
    rows = _rows()
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")

    train, held, proc = _split(tasks, tmp_path, 7, "a")
    train_rows, held_rows = _read(train), _read(held)
    train_repos, held_repos = {r["repo"] for r in train_rows}, {r["repo"] for r in held_rows}
    assert train_repos and held_repos and not train_repos & held_repos, "no repository on both sides"
    assert train_repos | held_repos == set(REPOS)
    key = lambda r: json.dumps(r, sort_keys=True)  # noqa: E731
    assert sorted(map(key, train_rows + held_rows)) == sorted(map(key, rows)), "every record once, every field kept"
    assert all(Counter(r["repo"] for r in held_rows)[repo] == REPOS[repo] for repo in held_repos), "whole repos"
    assert f"held out: {len(held_rows)} tasks from {len(held_repos)} repositories" in proc.stdout

    train2, held2, _ = _split(tasks, tmp_path, 7, "b")
    assert (train2.read_bytes(), held2.read_bytes()) == (train.read_bytes(), held.read_bytes()), "same seed, same split"

    held_sets = set()
    for seed in range(12):  # the library the command runs (a process per seed would be slow)
        r = split_tasks(tasks, 0.3, seed, tmp_path / "t.jsonl", tmp_path / "h.jsonl")
        assert not set(r["train"]["repos"]) & set(r["held_out"]["repos"])
        held_sets.add(frozenset(r["held_out"]["repos"]))
    assert len(held_sets) > 1, "the seed chooses which repositories are held out"


def test_split_refuses_one_repository(tmp_path: Path):
    tasks = tmp_path / "one.jsonl"
    tasks.write_text("".join(json.dumps({"instance_id": f"org__solo-{k}", "repo": "org/solo"}) + "\n"
                             for k in range(4)), encoding="utf-8")
    proc = trainer_client("tasks", "split", "--tasks", tasks, "--train-out", tmp_path / "t.jsonl",
                          "--held-out-out", tmp_path / "h.jsonl")
    assert proc.returncode == 1
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("trainer-client tasks: error:") and "one repository" in err and "org/solo" in err, err
    assert not (tmp_path / "t.jsonl").exists() and not (tmp_path / "h.jsonl").exists()


def _results(iid: str, outcomes: str) -> list[EpisodeResult]:
    """One result per character: r resolved, u unresolved, l lost."""
    status = {"r": "resolved", "u": "unresolved", "l": "lost"}
    return [EpisodeResult(instance_id=iid, sample=s, status=status[c], task_source="swe-bench",
                          reward=None if c == "l" else float(c == "r"), lost_reasons=["env: x"] if c == "l" else [])
            for s, c in enumerate(outcomes)]


def test_filter_by_measured_pass_rate(tmp_path: Path):
    ids = ["some-pass", "none-pass", "all-pass", "all-lost", "not-evaluated", "one-of-three"]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"instance_id": i, "repo": f"org/{i}", "source": "swe-bench"}) + "\n"
                             for i in ids), encoding="utf-8")
    measured = tmp_path / "measured.jsonl"
    measured.write_text("".join(json.dumps({"instance_id": i, "source": "swe-bench"}) + "\n"
                                for i in ids if i != "not-evaluated"))
    out = tmp_path / "eval"
    out.mkdir()
    results = (_results("some-pass", "rurl") + _results("none-pass", "uuuu") + _results("all-pass", "rrlr")
               + _results("all-lost", "llll") + _results("one-of-three", "ruul"))
    (out / "results.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in results))
    finish(EvalConfig(env_urls=["http://127.0.0.1:9"], tasks=str(measured), samples=4, out=str(out), progress=False))
    rates = {iid: t["rate"] for iid, t in json.loads((out / "report.json").read_text())["tasks"].items()}
    assert rates == {"some-pass": 2 / 3, "none-pass": 0.0, "all-pass": 1.0, "all-lost": None, "one-of-three": 1 / 3}

    def run(*extra: str, report: Path = out) -> list[str]:
        dest = tmp_path / "kept.jsonl"
        proc = trainer_client("tasks", "filter", "--tasks", tasks, "--report", report, "--out", dest, *extra)
        assert proc.returncode == 0, proc.stderr
        return [r["instance_id"] for r in _read(dest)]

    assert run("--strict", "--min", "0", "--max", "1") == ["some-pass", "one-of-three"], "only 0 < rate < 1"
    assert run("--strict", "--min", "0", "--max", "1", report=out / "report.json") == ["some-pass", "one-of-three"]
    assert run("--min", "0", "--max", "1") == ["some-pass", "none-pass", "all-pass", "one-of-three"]
    assert run("--min", "0.5") == ["some-pass", "all-pass"]
    assert run("--strict", "--min", "0", "--max", "1", "--keep-unmeasured") == [
        "some-pass", "all-lost", "not-evaluated", "one-of-three"]

    proc = trainer_client("tasks", "filter", "--tasks", tasks, "--report", tmp_path, "--out", tmp_path / "x.jsonl")
    assert proc.returncode == 1 and "not an evaluation report" in proc.stderr and "Traceback" not in proc.stderr


def test_report_groups_by_the_repository_rule_of_split(tmp_path: Path):
    """A task without a `repo` field belongs to its instance id's prefix, in the report's per-repository
    rows as in `tasks split` (one rule: tasksets.repo_of), never to "unknown"."""
    rows = [{"instance_id": "alpha__alpha-1"}, {"instance_id": "alpha__alpha-2"}, {"instance_id": "beta__beta-7"},
            {"instance_id": "delta-3"}, {"instance_id": "x__y-1", "repo": "org/gamma"}]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    split = split_tasks(tasks, 0.4, 0, tmp_path / "t.jsonl", tmp_path / "h.jsonl")
    out = tmp_path / "eval"
    out.mkdir()
    results = [r for row in rows for r in _results(row["instance_id"], "r")]
    (out / "results.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in results))
    finish(EvalConfig(env_urls=["http://127.0.0.1:9"], tasks=str(tasks), out=str(out), progress=False))
    data = json.loads((out / "report.json").read_text())
    repos = set(split["train"]["repos"]) | set(split["held_out"]["repos"])
    assert repos == {"alpha", "beta", "delta", "org/gamma"}
    assert set(data["summary"]["by_repo"]) == repos and data["summary"]["by_repo"]["alpha"]["episodes"] == 2
    assert {iid: t["repo"] for iid, t in data["tasks"].items()} == {
        "alpha__alpha-1": "alpha", "alpha__alpha-2": "alpha", "beta__beta-7": "beta", "delta-3": "delta",
        "x__y-1": "org/gamma"}
