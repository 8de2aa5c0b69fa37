"""Task model and loader: formats, relative paths, and clear errors naming instance + field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verifier.task import TaskFileError, load_tasks


def record(**over):
    base = {"instance_id": "a__b-1", "problem_statement": "it breaks", "repo_path": "repo",
            "FAIL_TO_PASS": '["t.py::test_x"]', "PASS_TO_PASS": ["t.py::test_y"]}
    base.update(over)
    return base


@pytest.fixture
def tdir(tmp_path: Path) -> Path:
    (tmp_path / "repo").mkdir()
    (tmp_path / "env").mkdir()
    return tmp_path


def test_jsonl_with_json_string_lists_and_relative_paths(tdir):
    (tdir / "t.jsonl").write_text(json.dumps(record(python_env="env")) + "\n\n" + json.dumps(record(instance_id="c")))
    tasks = load_tasks(tdir / "t.jsonl")
    assert [t.instance_id for t in tasks] == ["a__b-1", "c"]
    assert tasks[0].FAIL_TO_PASS == ["t.py::test_x"] and tasks[0].PASS_TO_PASS == ["t.py::test_y"]
    assert tasks[0].repo_path == (tdir / "repo").resolve() and tasks[0].python_env == (tdir / "env").resolve()
    assert tasks[0].tests == ["t.py::test_x", "t.py::test_y"]


def test_json_array_and_single_object(tdir):
    (tdir / "a.json").write_text(json.dumps([record()]))
    (tdir / "b.json").write_text(json.dumps(record()))
    assert load_tasks(tdir / "a.json")[0].instance_id == load_tasks(tdir / "b.json")[0].instance_id == "a__b-1"


@pytest.mark.parametrize("content, expected", [
    (json.dumps(record(FAIL_TO_PASS="[not json")), "instance 'a__b-1': field 'FAIL_TO_PASS'"),
    (json.dumps(record(problem_statement=None)), "instance 'a__b-1': field 'problem_statement'"),
    (json.dumps(record(repo_path="missing")), "instance 'a__b-1': field 'repo_path': not a directory"),
    (json.dumps(record(python_env="nope")), "field 'python_env': not a directory"),
    (json.dumps({k: v for k, v in record().items() if k != "instance_id"}), "<no instance_id>"),
    (json.dumps(record()) + "\n" + json.dumps(record()), "field 'instance_id': duplicate"),
    ('{"instance_id": "x",\n', "t.jsonl:1: invalid JSON"),
    ("[1]", "must be a JSON object"),
    ("", "no tasks"),
])
def test_bad_task_files_name_instance_and_field(tdir, content, expected):
    path = tdir / "t.jsonl"
    path.write_text(content)
    with pytest.raises(TaskFileError) as info:
        load_tasks(path)
    assert expected in str(info.value)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(TaskFileError, match="cannot read task file"):
        load_tasks(tmp_path / "absent.jsonl")


def test_image_resident_tasks_need_the_docker_backend(tmp_path):
    from env_server.app import create_app
    from env_server.config import ServerConfig
    from sandbox import SandboxConfig
    from verifier.task import TaskFileError, TaskInstance, check_backend

    resident = TaskInstance(instance_id="django__django-1", problem_statement="p", image="img:1",
                            FAIL_TO_PASS=["a"], workdir="/testbed")
    check_backend([resident], "docker")
    with pytest.raises(TaskFileError, match="django__django-1.*docker backend"):
        check_backend([resident], "bwrap")
    with pytest.raises(TaskFileError, match="docker backend"):
        create_app(ServerConfig(data_dir=tmp_path, sandbox=SandboxConfig(backend="bwrap")), [resident])
    with pytest.raises(ValueError, match="repo_path and workdir"):
        TaskInstance(instance_id="x", problem_statement="p", image="i", repo_path=tmp_path, workdir="/testbed")
    with pytest.raises(ValueError, match="test_cmd and log_parser"):
        TaskInstance(instance_id="x", problem_statement="p", image="i", test_cmd="make test")
