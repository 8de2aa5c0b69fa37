"""docs/client.md's examples run: every `python` block, each on its own, against real servers
on loopback (the doc's placeholder URLs are replaced by theirs), and the page names every
public name of env_client."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import env_client

DOC = Path(__file__).resolve().parents[2] / "docs" / "client.md"
TOKEN = "s3cret-token"  # the doc's auth server's token
PLAIN, SECOND, AUTH = "http://127.0.0.1:8000", "http://127.0.0.1:8002", "http://127.0.0.1:8001"


def blocks() -> list[tuple[int, str]]:
    """(line, code) of every ```python block."""
    text = DOC.read_text(encoding="utf-8")
    return [(text[: m.start()].count("\n") + 2, m.group(1))
            for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M)]


@pytest.fixture(scope="module")
def servers(make_server):
    with make_server() as plain, make_server() as second, make_server(auth_token=TOKEN) as auth:
        yield {PLAIN: plain.url, SECOND: second.url, AUTH: auth.url}


@pytest.mark.parametrize("line,code", blocks(), ids=[f"line{line}" for line, _ in blocks()])
def test_example_runs(line, code, servers, tmp_path, monkeypatch, capsys):
    for placeholder, url in servers.items():
        code = code.replace(placeholder, url)
    monkeypatch.chdir(tmp_path)  # examples write their files here
    monkeypatch.delenv("ENV_SERVER_TOKEN", raising=False)
    exec(compile(code, f"{DOC}:{line}", "exec"), {"__name__": "__main__"})  # noqa: S102 - the doc's own code
    assert TOKEN not in capsys.readouterr().out


def test_the_page_covers_the_api():
    text = DOC.read_text(encoding="utf-8")
    assert len(blocks()) >= 12
    unnamed = [name for name in env_client.__all__ if f"`{name}" not in text and f" {name}(" not in text
               and f"import {name}" not in text and f", {name}" not in text]
    assert not unnamed, f"docs/client.md does not mention {unnamed}"
    for topic in ("EnvClient(", "ReplicaPool(", "WsSession(", "transport=\"ws\"", "AsyncHttpClient(",
                  ".trace(", ".state(episode_id, 1)", "session.state(t=1)", "EnvAuthError", "export()",
                  "write_parquet(", "begin_turn("):
        assert topic in text, topic
