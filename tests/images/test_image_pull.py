"""Task images arrive by themselves: pulled on demand from a real registry on loopback, once per
image however many resets wait, with coded errors that touch nothing else, prefetched ahead of
serving, and kept under a disk budget that never removes an image in use or one the user put there.

The task is the toolz SWE-bench-layout instance (docker/swebench_layout.py: real code, built
offline, imported with `task-factory import`); each test pushes its own copy of the image with a
new id (registry.push_unique_image) and removes it from the engine, so the session must pull it
and derive its hardened image anew. The env server is the real one (uvicorn on loopback, docker
backend); its sessions run commands in the pulled image.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
from support.layouts import import_rows, layout_module
from registry_support import push_unique_image
from support.servers import call, run_server, tool

from env_server.config import ServerConfig
from sandbox.images import image_store
from verifier.task import TaskInstance, load_tasks

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def layout_task(client, tmp_path_factory) -> TaskInstance:
    """The toolz SWE-bench-layout instance (image built offline or reused), imported as a task."""
    layout = layout_module(client)
    tasks_file = import_rows([layout.build(layout.PROJECTS["toolz"], log=lambda m: None)],
                             tmp_path_factory.mktemp("layout"))
    (task,) = load_tasks(tasks_file)
    return task


def on_image(task: TaskInstance, image: str, name: str) -> TaskInstance:
    return task.model_copy(update={"image": image, "instance_id": name})


@pytest.fixture(autouse=True)
def evict_what_the_test_pulled(tmp_path):
    """After each test: the images its store pulled or derived are removed (the engine's disk)."""
    yield
    from sandbox.models import SandboxConfig

    image_store(SandboxConfig(backend="docker", cache_dir=tmp_path / "cache")).evict_to(0)


def server_config(tmp_path: Path, **sandbox: Any) -> ServerConfig:
    return ServerConfig(tasks_path=tmp_path / "unused.jsonl", data_dir=tmp_path / "data", max_sessions=32,
                        sandbox={"backend": "docker", "cache_dir": str(tmp_path / "cache"), **sandbox})


IMPORT_TOOLZ = "python -c 'import toolz; print(toolz.__name__)'"


async def reset_and_run(ws_url: str, instance_id: str, command: str = IMPORT_TOOLZ):
    """One session: reset on the task, one bash step; (the reset reply, the step reply or None)."""
    async with websockets.connect(ws_url + "/ws", max_size=None) as ws:
        reply = await call(ws, "reset", {"instance_id": instance_id})
        if reply["type"] != "observation":
            return reply, None
        return reply, await call(ws, "step", tool("bash", command=command))


def output(step: dict) -> str:
    return step["data"]["observation"]["output"]


def scraped(url: str) -> dict[str, float]:
    """The server's /metrics, unlabelled series only: {name: value}."""
    lines = httpx.get(url + "/metrics").text.splitlines()
    return {name: float(value) for name, value in (ln.split(" ", 1) for ln in lines if ln and ln[0] != "#"
                                                    and "{" not in ln)}


def manifest_gets(registry, name: str) -> int:
    """How often the registry served the manifest of ``name`` to a GET (its access log): once per pull."""
    pattern = re.compile(rf'http\.request\.method=GET .*http\.request\.uri="?/v2/{re.escape(name)}/manifests/')
    return sum(1 for line in registry.log_tail(10**7).splitlines() if pattern.search(line))


def test_eight_resets_on_a_missing_image_pull_it_once_and_all_work(client, registry, layout_task, tmp_path):
    ref = push_unique_image(client, registry, layout_task.image, "layout/eight")
    task = on_image(layout_task, ref, "eight")
    config = server_config(tmp_path)
    store = image_store(config.sandbox)
    with run_server(config, [task]) as srv:
        before = scraped(srv.url)  # the process's other stores (earlier tests) count too

        async def main():
            return await asyncio.gather(*(reset_and_run(srv.ws_url, "eight") for _ in range(8)))

        results = asyncio.run(main())
        after = scraped(srv.url)
    assert after["envserver_image_pulls_total"] - before["envserver_image_pulls_total"] == 1, (before, after)
    assert after["envserver_image_pull_failures_total"] == before["envserver_image_pull_failures_total"]
    for reply, step in results:
        assert reply["type"] == "observation", reply
        assert step["type"] == "observation" and output(step).strip().endswith("toolz"), step
    assert store.counters["pulls"] == 1, store.counters
    assert store.counters["derived"] == 1, store.counters
    assert manifest_gets(registry, "layout/eight") == 1, registry.log_tail()
    assert client.api.inspect_image(ref)["Id"] == ref.image_id
    records = store.ledger.read()
    assert records[ref].kind == "pulled" and any(r.source == ref and r.kind == "derived" for r in records.values())
    assert store.held() == set()  # every session closed: nothing held


def test_two_images_pull_at_once(client, registry, layout_task, tmp_path):
    refs = [push_unique_image(client, registry, layout_task.image, f"layout/pair{i}", fresh_layer=4 << 20)
            for i in range(2)]
    tasks = [on_image(layout_task, ref, f"pair{i}") for i, ref in enumerate(refs)]
    config = server_config(tmp_path, images={"max_pulls": 2})
    store = image_store(config.sandbox)
    seen_in_flight: list[int] = []
    with run_server(config, tasks) as srv:
        async def main():
            async def watch():
                while True:
                    seen_in_flight.append(store.stats()["pulls_in_flight"])
                    await asyncio.sleep(0.01)
            watcher = asyncio.create_task(watch())
            try:
                return await asyncio.gather(*(reset_and_run(srv.ws_url, f"pair{i}") for i in (0, 1, 0, 1)))
            finally:
                watcher.cancel()

        results = asyncio.run(main())
    assert all(r["type"] == "observation" and s["type"] == "observation" for r, s in results), results
    assert store.counters["pulls"] == 2 and store.counters["pulled_bytes"] >= 2 * (4 << 20), store.counters
    assert max(seen_in_flight) == 2, "the two pulls never ran at the same time"


def test_missing_image_and_unreachable_registry_fail_coded_while_another_session_works(
        client, registry, own_registry, layout_task, tmp_path):
    # the task's image lies in a registry that is gone: a real pushed image, but a one-layer one FROM scratch
    # (a fresh registry holds nothing: the ~300 MB layout image's first push there took ~35 s, and no byte of
    # it is ever fetched, since the reset fails at the pull)
    gone = push_unique_image(client, own_registry, "scratch", "layout/gone", fresh_layer=4096)
    own_registry.stop()  # unreachable from now on
    missing_ref = f"{registry.host}/layout/never-pushed:nope"
    tasks = [on_image(layout_task, layout_task.image, "here"), on_image(layout_task, missing_ref, "missing"),
             on_image(layout_task, gone, "unreachable")]
    with run_server(server_config(tmp_path), tasks) as srv:
        async def main():
            async with websockets.connect(srv.ws_url + "/ws") as ws:
                assert (await call(ws, "reset", {"instance_id": "here"}))["type"] == "observation"
                failed = await asyncio.gather(reset_and_run(srv.ws_url, "missing"),
                                              reset_and_run(srv.ws_url, "unreachable"),
                                              call(ws, "step", tool("bash", command="echo still-here")))
                after = await call(ws, "step", tool("bash", command="echo after"))
                again = await reset_and_run(srv.ws_url, "here", "echo fresh")
                return failed, after, again

        (missing_reply, unreachable_reply, during), after, again = asyncio.run(main())
    for (reply, step), image, reason in ((missing_reply, missing_ref, "manifest unknown"),
                                         (unreachable_reply, gone, "connection refused")):
        assert step is None and reply["type"] == "error", reply
        data = reply["data"]
        assert data["code"] == "IMAGE_UNAVAILABLE" and data["error_source"] == "env", data
        assert data["image"] == image and reason in data["reason"], data
        assert image in data["message"], data
    assert output(during).strip() == "still-here" and output(after).strip() == "after"
    assert again[0]["type"] == "observation" and output(again[1]).strip() == "fresh"


def test_eviction_under_a_small_budget_keeps_images_in_use_and_the_users_own(client, registry, layout_task,
                                                                             tmp_path):
    refs = [push_unique_image(client, registry, layout_task.image, f"layout/evict{i}", fresh_layer=2 << 20)
            for i in range(2)]
    tasks = [on_image(layout_task, ref, f"evict{i}") for i, ref in enumerate(refs)]
    config = server_config(tmp_path, images={"cache_gb": 0.001})  # ~1 MB: below any one image
    store = image_store(config.sandbox)

    def present(image: str) -> bool:
        try:
            client.api.inspect_image(image)
            return True
        except Exception:  # noqa: BLE001 - ImageNotFound
            return False

    with run_server(config, tasks) as srv:
        async def main():
            async with websockets.connect(srv.ws_url + "/ws") as ws:  # a live session on evict0 ...
                assert (await call(ws, "reset", {"instance_id": "evict0"}))["type"] == "observation"
                second = await reset_and_run(srv.ws_url, "evict1")  # ... while evict1 is pulled and used
                assert second[0]["type"] == "observation", second
                removed_live = await asyncio.to_thread(store.evict_to, 1 << 20)
                assert refs[0] not in removed_live and present(refs[0]), "evicted an image a live session runs"
                step = await call(ws, "step", tool("bash", command="echo alive"))
                assert output(step).strip() == "alive"

        asyncio.run(main())
    assert store.held() == set()  # the server closed every session
    removed = store.evict_to(1 << 20)
    records = store.ledger.read()
    assert not present(refs[0]) and not present(refs[1]), (removed, records)
    assert not any(r.source in refs for r in records.values()), "a derived image of an evicted source is left"
    assert present(layout_task.image), "evicted the user's own image"
    assert store.counters["evicted"] >= 4 and store.usage() <= 1 << 20


def test_prefetch_then_resets_pull_nothing(client, registry, layout_task, tmp_path):
    refs = [push_unique_image(client, registry, layout_task.image, f"layout/pre{i}") for i in range(2)]
    tasks = [on_image(layout_task, ref, f"pre{i}") for i, ref in enumerate(refs)]
    tasks_file = tmp_path / "tasks.jsonl"
    tasks_file.write_text("".join(t.model_dump_json(exclude_none=True) + "\n" for t in tasks))
    argv = [sys.executable, "-m", "env_server.cli", "prefetch", "--tasks", str(tasks_file), "--parallel", "2",
            "--set", f"sandbox.cache_dir={tmp_path / 'cache'}"]
    first = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "2 pulled" in first.stdout and "0 failed" in first.stdout, first.stdout
    again = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=ROOT)  # resumable: nothing to do
    assert again.returncode == 0 and "0 pulled" in again.stdout and "2 already present" in again.stdout, again.stdout
    gets = {ref: manifest_gets(registry, f"layout/pre{i}") for i, ref in enumerate(refs)}
    config = server_config(tmp_path)
    store = image_store(config.sandbox)
    with run_server(config, tasks) as srv:
        async def main():
            return await asyncio.gather(*(reset_and_run(srv.ws_url, f"pre{i}") for i in (0, 1)))

        results = asyncio.run(main())
    assert all(r["type"] == "observation" and s["type"] == "observation" for r, s in results), results
    assert store.counters["pulls"] == 0 and store.counters["derived"] == 0, store.counters
    assert {ref: manifest_gets(registry, f"layout/pre{i}") for i, ref in enumerate(refs)} == gets
    listing = subprocess.run([sys.executable, "-m", "env_server.cli", "images", "--json",
                              "--set", f"sandbox.cache_dir={tmp_path / 'cache'}"],
                             capture_output=True, text=True, timeout=60, cwd=ROOT)
    rows = [json.loads(line) for line in listing.stdout.splitlines()]
    assert {r["image"] for r in rows if r["kind"] == "pulled"} == set(refs), listing.stdout
    assert {r["source"] for r in rows if r["kind"] == "derived"} == set(refs), listing.stdout


def test_the_server_prefetches_the_next_tasks_of_its_queue(client, registry, layout_task, tmp_path):
    refs = [push_unique_image(client, registry, layout_task.image, f"layout/ahead{i}") for i in range(2)]
    tasks = [on_image(layout_task, ref, f"ahead{i}") for i, ref in enumerate(refs)]
    config = server_config(tmp_path).model_copy(update={"prefetch_ahead": 2})
    store = image_store(config.sandbox)
    with run_server(config, tasks) as srv:
        deadline = time.monotonic() + 120
        while store.counters["pulls"] + store.counters["pull_failures"] < 2:  # no reset asked for them yet
            assert time.monotonic() < deadline, store.counters
            time.sleep(0.2)
        assert store.counters["pulls"] == 2 and store.counters["pull_failures"] == 0, store.counters

        async def main():
            return await asyncio.gather(*(reset_and_run(srv.ws_url, f"ahead{i}") for i in (0, 1)))

        results = asyncio.run(main())
    assert all(r["type"] == "observation" and s["type"] == "observation" for r, s in results), results
    assert store.counters["pulls"] == 2, store.counters  # the resets pulled nothing more
    assert all(manifest_gets(registry, f"layout/ahead{i}") == 1 for i in range(2)), registry.log_tail()
