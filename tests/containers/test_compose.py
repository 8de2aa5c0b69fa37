"""The containerized deployment, for real: offline images, `compose up` with 2 env replicas,
OpenEnv's validator, full episodes through the trainer's env client over both replicas,
containment probes from inside the deployment, and a teardown that leaves nothing.

Skips without a Docker engine or compose binary, unless CI=true or SWE_REQUIRE_DOCKER=1.
The tests of this module share one deployment and run in file order.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
import yaml
from support.git_repos import git_run

from containers_support import (
    COMPOSE_FILE, ENV_UID, ROOT, TIMINGS, container_ips, free_port_pair, host_port, project_objects, wait_healthy,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(900)]

REPLICAS = 2


# ------------------------------------------------------------------ fixtures
# engine, compose, env_image, task_pack: conftest.py
@pytest.fixture(scope="module")
def deployment(engine, compose, env_image, task_pack):
    """`compose up -d --scale env=2 env` under a unique project name; `down -v` afterwards."""
    pack_dir, _ = task_pack
    project = f"swetest{uuid.uuid4().hex[:8]}"
    base_port = free_port_pair()
    env = {**os.environ, "SWE_TASKS_DIR": str(pack_dir), "SWE_ENV_PORTS": f"{base_port}-{base_port + REPLICAS - 1}",
           "SWE_ENV_UID": str(ENV_UID if os.geteuid() == 0 else os.geteuid()),
           "SWE_ENV_GID": str(ENV_UID if os.geteuid() == 0 else os.getegid()),
           "SWE_ENV_IMAGE": env_image, "SWE_ENV_MAX_SESSIONS": "8", "COMPOSE_PROJECT_NAME": project}
    base = [*compose, "-f", str(COMPOSE_FILE), "-p", project]

    def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([*base, *args], env=env, capture_output=True, text=True, timeout=timeout)

    start = time.monotonic()
    up = run("up", "-d", "--no-build", "--scale", f"env={REPLICAS}", "env")
    try:
        assert up.returncode == 0, f"compose up failed:\n{up.stdout}\n{up.stderr}"
        containers, healthy_s = wait_healthy(engine, project, REPLICAS, timeout_s=180)
        TIMINGS["compose_up_to_healthy_s"] = time.monotonic() - start
        containers.sort(key=lambda c: host_port(c))
        urls = [f"http://127.0.0.1:{host_port(c)}" for c in containers]
        yield {"project": project, "run": run, "containers": containers, "urls": urls, "pack": pack_dir}
    finally:
        run("down", "-v", "--remove-orphans", "--timeout", "10")
        print(f"\n[containers] timings: {json.dumps({k: round(v, 1) for k, v in TIMINGS.items()})}")


def _run_async(coro):
    return asyncio.run(coro)


# ------------------------------------------------------------------ tests
def test_compose_file_configures_env_and_gpu_trainer(compose, tmp_path: Path):
    """The compose file resolves with this compose version; the trainer reserves GPUs."""
    env = {**os.environ, "SWE_TASKS_DIR": str(tmp_path)}
    out = subprocess.run([*compose, "-f", str(COMPOSE_FILE), "--profile", "train", "config"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    services = yaml.safe_load(out.stdout)["services"]
    env_svc, trainer = services["env"], services["trainer"]
    assert "healthcheck" in env_svc and "/health" in " ".join(env_svc["healthcheck"]["test"])
    assert {"seccomp=unconfined", "no-new-privileges:true"} <= set(env_svc["security_opt"])
    assert set(env_svc["cap_add"]) == {"SYS_ADMIN", "SETUID", "SETGID", "SETPCAP"} and env_svc["cap_drop"] == ["ALL"]
    # v1 prints "host:range:8000", v2 a mapping with target 8000
    assert any((p.get("target") if isinstance(p, dict) else int(str(p).rsplit(":", 1)[-1].split("/")[0])) == 8000
               for p in env_svc["ports"]), env_svc["ports"]
    devices = trainer["deploy"]["resources"]["reservations"]["devices"]
    assert any("gpu" in d["capabilities"] for d in devices)
    assert "trainer_client.cli train" in " ".join(trainer["command"])
    assert trainer["profiles"] == ["train"] and "profiles" not in env_svc


def test_env_image_is_slim_nonroot_and_openenv_shaped(engine, env_image):
    attrs = engine.images.get(env_image).attrs["Config"]
    assert attrs["User"] not in ("", "0", "root") and not attrs["User"].startswith("0:")
    assert "/health" in " ".join(attrs["Healthcheck"]["Test"])
    assert "8000/tcp" in attrs["ExposedPorts"]
    out = engine.containers.run(env_image, entrypoint=["sh", "-c"], remove=True, command=[
        "cat /app/openenv.yaml; python3 -c 'import importlib.util as u; print(\"TORCH\", u.find_spec(\"torch\"))'"])
    text = out.decode()
    assert "TORCH None" in text, "torch is in the env image"
    manifest = yaml.safe_load(text.split("TORCH")[0])
    assert manifest["port"] == 8000 and manifest["spec_version"] == 1 and manifest["name"]
    from openenv.validation.parsers.openenv_yaml import OpenEnvYamlParser

    parsed = OpenEnvYamlParser().parse(ROOT / "docker")
    assert parsed.name == manifest["name"]


def test_replicas_are_healthy_and_distinct(deployment):
    urls = deployment["urls"]
    assert len(set(urls)) == REPLICAS
    hostnames = set()
    for url in urls:
        assert httpx.get(f"{url}/health", timeout=10).json() == {"status": "healthy"}
        meta = httpx.get(f"{url}/metadata", timeout=10).json()
        assert meta["tasks"] == 3 and meta["backend"] == "bwrap"
    for c in deployment["containers"]:
        hostnames.add(c.attrs["Config"]["Hostname"])
    assert len(hostnames) == REPLICAS


def test_openenv_validate_passes_against_a_replica(deployment):
    exe = shutil.which("openenv") or str(Path(sys.executable).with_name("openenv"))
    proc = subprocess.run([exe, "validate", "--url", deployment["urls"][0], "--json", "--timeout", "30"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"openenv validate failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"


async def _episodes(urls: list[str], task: dict) -> list[dict]:
    """Two sessions over a ReplicaPool of both replicas: one applies the gold patch, one does not."""
    from env_client import ReplicaPool

    pool = ReplicaPool(urls)
    try:
        (good, obs_g), (bad, obs_b) = await asyncio.gather(
            pool.open_session(instance_id=task["instance_id"]), pool.open_session(instance_id=task["instance_id"]))
        out = []
        created = await good.call_tool("create", {"path": ".gold.patch", "content": task["patch"]})
        assert not created["metadata"].get("error_kind"), created
        applied = await good.call_tool("bash", {"command": "git apply .gold.patch && rm .gold.patch && echo APPLIED"})
        assert "APPLIED" in applied["output"], applied
        for session, first in ((good, obs_g), (bad, obs_b)):
            result = await session.call_tool("submit", {})
            state = await session.state()
            out.append({"url": session.connection.url, "episode_id": first["metadata"]["episode_id"],
                        "result": result, "state": state})
            await pool.release(session)
        return out
    finally:
        await pool.close()


def test_full_episodes_spread_over_both_replicas(deployment, task_pack, engine):
    _, tasks = task_pack
    task = tasks[0]
    good, bad = _run_async(_episodes(deployment["urls"], task))
    assert good["url"] != bad["url"], "the pool placed both sessions on one replica"
    assert good["result"]["done"] and good["result"]["reward"] == 1.0, good["result"]
    assert good["result"]["metadata"]["resolved"] is True
    assert bad["result"]["done"] and bad["result"]["reward"] == 0.0, bad["result"]
    assert good["state"]["step_count"] == 3 and good["state"]["instance_id"] == task["instance_id"]
    # Each episode's trace is on the data volume, in the folder of the replica that ran it, named as
    # compose names the replica (docs/deploy.md; env_server/replica.py)
    by_port = {f"127.0.0.1:{host_port(c)}": c for c in deployment["containers"]}
    for ep in (good, bad):
        container = next(c for hp, c in by_port.items() if hp in ep["url"])
        path = f"/data/{container.name}/traces/{ep['episode_id']}.jsonl"
        code, output = container.exec_run(["sh", "-c", f"wc -l < {path}"])
        assert code == 0 and int(output) >= 2, f"no trace {path} in {container.name}: {output!r}"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _secret_line(patch: str, repo: Path, base_commit: str) -> str:
    """An added line of ``patch`` that occurs nowhere in the base tree (so finding it is a leak)."""
    for line in patch.splitlines():
        text = line[1:].strip()
        if line.startswith("+") and not line.startswith("+++") and len(text) >= 12:
            found = git_run(repo, "-c", f"safe.directory={repo}", "grep", "-qF", "-e", text, base_commit, "--")
            if found.returncode == 1:
                return text
    pytest.fail("no distinctive added line in the patch")


async def _probe(url: str, task: dict, probes: dict[str, str]) -> dict[str, dict]:
    from env_client import ReplicaPool

    pool = ReplicaPool([url])
    try:
        session, _ = await pool.open_session(instance_id=task["instance_id"])
        results = {}
        for name, command in probes.items():
            results[name] = await session.call_tool("bash", {"command": command, "timeout": 30})
        await pool.release(session)
        return results
    finally:
        await pool.close()


def test_containment_from_inside_the_deployment(deployment, task_pack, engine):
    """What an agent's bash can reach in each containerized replica: no network (not even the
    sibling replica), no finders/extractors, none of the task's secrets, nothing of the server."""
    pack_dir, tasks = task_pack
    task = tasks[0]
    repo = pack_dir / task["repo_path"]
    gold = _secret_line(task["patch"], repo, task["base_commit"])
    # synthesized tasks keep their tests visible (test_patch empty); the gold fix is the secret
    hidden_test = _secret_line(task["test_patch"], repo, task["base_commit"]) if task["test_patch"] else gold
    targets = ["1.1.1.1"] + [ip for c in deployment["containers"] for ip in container_ips(c)]
    connect = ("import socket,sys\nfor h in sys.argv[1:]:\n    try:\n"
               "        socket.create_connection((h, 8000), timeout=3); print('REACHED', h)\n"
               "    except OSError as e: print('BLOCKED', h, e.errno)\n")
    probes = {
        "network": f"python3 -c \"$(echo {_b64(connect)} | base64 -d)\" {' '.join(targets)}",
        "tools": "for t in find unzip zipinfo bsdtar 7z busybox; do command -v $t && echo PRESENT $t; done; "
                 "ls /usr/bin/find /bin/find 2>&1; echo done",
        "hidden_tests": f"s=$(echo {_b64(hidden_test)} | base64 -d); grep -rqF -- \"$s\" /workspace /tmp "
                        f"&& echo LEAK || echo CLEAN; git log --all -p | grep -qF -- \"$s\" && echo LEAK_GIT || true",
        "gold_patch": f"s=$(echo {_b64(gold)} | base64 -d); grep -rqF -- \"$s\" /workspace /tmp "
                      f"&& echo LEAK || echo CLEAN",
        "git_history": "git rev-list --all | wc -l; git stash list | wc -l",
        "host_view": f"for p in {pack_dir}/tasks.jsonl /data /app/openenv.yaml /var/run/docker.sock /opt/env-server; "
                     "do [ -e \"$p\" ] && echo VISIBLE $p; done; "
                     "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n' | grep -c 'env-serve[r]'; "
                     "env | grep -c '^ENV_'; id -u; grep CapEff /proc/self/status",
    }
    for url in deployment["urls"]:
        r = _run_async(_probe(url, task, probes))
        net = r["network"]["output"]
        assert "REACHED" not in net and net.count("BLOCKED") == len(targets), net
        assert "PRESENT" not in r["tools"]["output"] and r["tools"]["output"].count("No such file") == 2, r["tools"]
        assert r["hidden_tests"]["output"].split() == ["CLEAN"], r["hidden_tests"]
        assert r["gold_patch"]["output"].split() == ["CLEAN"], r["gold_patch"]
        assert r["git_history"]["output"].split() == ["1", "0"], r["git_history"]
        view = r["host_view"]["output"].split("\n")
        assert "VISIBLE" not in r["host_view"]["output"], view
        counts = [line for line in view if line.strip()]
        assert counts[0] == "0" and counts[1] == "0", f"server processes or env visible: {view}"
        assert counts[2] != "0" and counts[3].split()[-1] == "0000000000000000", view
    # Outside the sandbox, inside the container: every process (this probe aside) is the
    # non-root server uid with no capabilities, an empty bounding set and no_new_privs.
    for c in deployment["containers"]:
        code, out = c.exec_run(["python3", "-c", PROC_SCAN])
        procs = json.loads(out)
        assert code == 0 and any("env-server" in p["cmd"] for p in procs), procs
        for p in procs:
            assert p["Uid"].split()[0] == str(ENV_UID if os.geteuid() == 0 else os.geteuid()), p
            assert {p["CapEff"], p["CapPrm"], p["CapBnd"]} == {"0000000000000000"} and p["NoNewPrivs"] == "1", p


PROC_SCAN = """
import json, os
out = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    if int(pid) == os.getpid():
        continue
    try:
        status = dict(l.split(":", 1) for l in open(f"/proc/{pid}/status").read().splitlines() if ":" in l)
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\\0", b" ").decode()
    except OSError:
        continue
    out.append({"pid": pid, "cmd": cmd, **{k: status[k].strip() for k in ("Uid", "CapEff", "CapPrm", "CapBnd", "NoNewPrivs")}})
print(json.dumps(out))
"""


def test_teardown_leaves_no_container_network_or_volume(deployment, engine):
    project = deployment["project"]
    assert any(project_objects(engine, project).values())  # there was something to remove
    down = deployment["run"]("down", "-v", "--remove-orphans", "--timeout", "10")
    assert down.returncode == 0, down.stderr
    left = project_objects(engine, project)
    assert not any(left.values()), f"compose project {project} leaked: {left}"
    sandboxes = engine.containers.list(all=True, filters={"label": "org.swe-openenv.sandbox=1",
                                                          "name": project})
    assert not sandboxes
