import pytest

from trainer_client.pair_records import ToolCall
from trainer_client.replay import canonical_key


def key(tool, **args):
    return canonical_key(ToolCall(tool_name=tool, arguments=args))


@pytest.mark.parametrize("a, b", [
    ("ls   -la  src", "ls -la src"),
    ("  cd src &&pytest -q  ", "cd src && pytest -q"),
    ("python -m pytest tests/test_a.py;", "python -m pytest tests/test_a.py"),
    ("echo 'a b'", 'echo "a b"'),
    ("grep -n x a.py\n\n  sed -n 1,5p a.py", "grep -n x a.py\nsed -n 1,5p a.py"),
    ("echo \"unbalanced   x", "echo \"unbalanced x"),
])
def test_equivalent_commands_compare_equal(a, b):
    assert key("bash", command=a) == key("bash", command=b)


@pytest.mark.parametrize("a, b", [
    ("echo 'a b'", "echo a b"),
    ("ls src", "ls tests"),
    ("cd x\npytest", "cd x pytest"),
])
def test_different_commands_stay_different(a, b):
    assert key("bash", command=a) != key("bash", command=b)


@pytest.mark.parametrize("path", ["src/calc.py", "./src/calc.py", "/workspace/src/calc.py",
                                  "src//lib/../calc.py", " src/calc.py "])
def test_paths_normalize(path):
    assert key("view", path=path) == key("view", path="src/calc.py")


def test_key_order_none_values_and_int_floats_do_not_matter():
    a = ToolCall(tool_name="view", arguments={"path": "a.py", "view_range": [1, 20], "x": None})
    b = ToolCall(tool_name="View", arguments={"view_range": [1.0, 20.0], "path": "a.py"})
    assert canonical_key(a) == canonical_key(b)


def test_text_arguments_keep_inner_whitespace_and_tool_name_matters():
    assert key("str_replace", path="a", old_str="x  = 1", new_str="x = 2") != \
        key("str_replace", path="a", old_str="x = 1", new_str="x = 2")
    assert key("view", path="a.py") != key("bash", path="a.py")
    assert key("view", path="/etc/passwd") != key("view", path="etc/passwd")
