"""The compose section of docs/deploy.md, run as written (issue 37, items 1 and 3).

The lines of its fenced blocks (extracted by tests/docs/test_doc_commands.py's `doc_commands`, which
lists them as run here) run one by one through `bash -c`, from the repository root, with only these
substitutions (SUBSTITUTIONS below): `docker compose` is the compose this machine has (v1 or v2), the
pack is the small real pack, `SWE_ENV_PORTS` is a free range of ten ports (the docs' 8000-8009), the project has its own name (COMPOSE_PROJECT_NAME) so the replica and volume names
`swe-openenv-env-2` / `swe-openenv_traces` are this project's, and the GPU trainer line gets
`--dry-run`. It proves:

- `docker compose port --index=N env 8000` names replica N's port, and the loop prints every replica's
  URL (each answers /health, each is the port the engine gave container number N);
- an episode run on replica 2 leaves its trace under the folder the docs name for replica 2
  (`/data/<project>-env-2/traces/`, v1 `<project>_env_2`), found with the documented `exec` line;
- `docker compose down` keeps the traces (the volume and every replica's folder), as documented.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import socket
import subprocess
import uuid

import httpx
import pytest

from containers_support import ENV_UID, PROJECT_LABEL, ROOT, wait_healthy

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(900)]

COMPOSE_TEST = "tests/containers/test_compose_docs.py"
REPLICAS = 4  # the docs' --scale env=4


def _doc_lines() -> list[tuple[str, str, str]]:
    """(where, table key, line as written) of the docs' commands test_doc_commands.py says run here."""
    spec = importlib.util.spec_from_file_location("doc_commands", ROOT / "tests" / "docs" / "test_doc_commands.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    raw = dict(mod.doc_commands(raw=True))
    mine = {key for key, test in mod.ELSEWHERE.items() if test.startswith(COMPOSE_TEST)}
    return [(where, key, raw[where]) for where, key in mod.doc_commands() if key in mine]


def _free_range(n: int = 10) -> int:
    """A base port b with b..b+n-1 free on 127.0.0.1."""
    for base in range(20000, 60000, 97):
        try:
            for port in range(base, base + n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no free range of ports")


async def _one_episode(url: str) -> str:
    from env_client import ReplicaPool

    pool = ReplicaPool([url])
    try:
        session, obs = await pool.open_session()
        out = await session.call_tool("bash", {"command": "echo DOCS-TRACE"})
        assert "DOCS-TRACE" in out["output"], out
        await pool.release(session)
        return obs["metadata"]["episode_id"]
    finally:
        await pool.close()


def test_the_compose_section_runs_as_written(engine, compose, env_image, task_pack):
    pack_dir, _ = task_pack
    lines = _doc_lines()
    assert [key for _, key, _ in lines if key.startswith("docker compose")], "no compose lines found in the docs"
    project = f"swedocs{uuid.uuid4().hex[:8]}"
    base = _free_range()
    v1 = compose == ["docker-compose"] or compose[0].endswith("docker-compose")
    sep = "_" if v1 else "-"
    name = f"{project}{sep}env{sep}"  # + replica number: what `compose ps` shows

    SUBSTITUTIONS = [
        ("docker compose", " ".join(compose)),
        ("/abs/path/to/pack", str(pack_dir)),
        *[(f"127.0.0.1:800{i}", f"127.0.0.1:{base + i}") for i in range(REPLICAS)],
        ("swe-openenv-env-", name),
        ("swe-openenv_traces", f"{project}_traces"),
        ("swe-openenv-env:latest", env_image),
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("SWE_TASKS_DIR", "ENV_SERVER_TOKEN")}
    env.update(COLUMNS="250",  # compose v1 wraps `ps` columns at the terminal width (80 without one)
               COMPOSE_PROJECT_NAME=project, COMPOSE_FILE=str(ROOT / "compose.yaml"),
               SWE_ENV_PORTS=f"{base}-{base + 9}", SWE_ENV_IMAGE=env_image,
               SWE_ENV_UID=str(ENV_UID if os.geteuid() == 0 else os.geteuid()),
               SWE_ENV_GID=str(ENV_UID if os.geteuid() == 0 else os.getegid()),
               PATH=f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    exports: list[str] = []
    outputs: dict[str, str] = {}
    episode = None

    def run(where: str, key: str, line: str) -> str:
        text = line
        for literal, replacement in SUBSTITUTIONS:
            text = text.replace(literal, replacement)
        if key.startswith("trainer-client train --config trainer_client/configs/gpu_qwen.yaml"):
            text += " --dry-run"  # the GPU config's memory estimate; no GPU here
        if key.startswith("export "):
            exports.append(text)
            return ""
        proc = subprocess.run(["bash", "-c", "; ".join([*exports, text])], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, f"{where}: {text}\nexit {proc.returncode}\n{(proc.stdout + proc.stderr)[-3000:]}"
        return proc.stdout

    try:
        for where, key, line in lines:
            if key == "docker compose exec -T --index=2 env ls /data/swe-openenv-env-2/traces":
                url2 = outputs["docker compose port --index=2"]
                episode = asyncio.run(_one_episode(url2))  # an episode on replica 2, then its trace by name
            out = run(where, key, line)
            outputs[key] = out
            if key == "docker/build-env-image.sh":
                assert out.strip().splitlines()[-1] == env_image
            elif key == "docker compose up -d env":
                wait_healthy(engine, project, 1, timeout_s=180)
            elif key == "docker compose port --index=1 env 8000":
                host, port = out.strip().rsplit(":", 1)  # a port of the range (the engine's choice of which)
                assert host == "127.0.0.1" and base <= int(port) < base + 10, out
            elif key.startswith("curl -s "):  # replica 1's /health, at the port the engine gave it
                assert out.strip() == '{"status":"healthy"}', out
            elif key == "docker compose up -d --scale env=4 env":
                containers, _ = wait_healthy(engine, project, REPLICAS, timeout_s=240)
            elif key.startswith("for i in 1 2 3"):
                urls = out.split()
                assert len(urls) == REPLICAS and len(set(urls)) == REPLICAS, out
                # four ports of the range, the engine's choice (docs/deploy.md, "Ports")
                assert all(base <= int(u.rsplit(":", 1)[1]) < base + 10 for u in urls), urls
                for i, url in enumerate(urls, start=1):
                    assert httpx.get(f"{url}/health", timeout=10, trust_env=False).json() == {"status": "healthy"}
                    number = next(c for c in containers if c.labels["com.docker.compose.container-number"] == str(i))
                    number.reload()
                    assert url == f"http://127.0.0.1:{number.attrs['NetworkSettings']['Ports']['8000/tcp'][0]['HostPort']}"
                outputs["docker compose port --index=2"] = urls[1]
            elif key.startswith("trainer-client train"):
                assert "GRPOConfig ok" in out or "memory estimate" in out, out[-2000:]
            elif key == "docker compose ps":
                for i in range(1, REPLICAS + 1):
                    assert re.search(rf"^{re.escape(name)}{i}\s", out, re.M), out
            elif key.startswith("docker compose exec -T --index=2"):
                assert f"{episode}.jsonl" in out.split(), f"replica 2's trace {episode} not under {name}2:\n{out}"
            elif key == "docker compose down":
                assert not engine.containers.list(all=True, filters={"label": f"{PROJECT_LABEL}={project}"})
                assert engine.volumes.get(f"{project}_traces"), "down removed the traces volume"
            elif key.startswith("docker run --rm -v swe-openenv_traces"):
                assert sorted(out.split()) == [f"{name}{i}" for i in range(1, REPLICAS + 1)], out
        assert episode is not None and "docker compose down" in outputs, sorted(outputs)
        # after down: replica 2's trace, in replica 2's folder of the kept volume
        trace = engine.containers.run(env_image, entrypoint=["cat", f"/data/{name}2/traces/{episode}.jsonl"],
                                      volumes={f"{project}_traces": {"bind": "/data", "mode": "ro"}}, remove=True)
        assert trace.decode().count("\n") >= 1 and episode in trace.decode()
    finally:
        subprocess.run([*compose, "down", "-v", "--remove-orphans", "--timeout", "10"], cwd=ROOT,
                       env={**env, "SWE_TASKS_DIR": str(pack_dir)}, capture_output=True, timeout=300)
        for volume in engine.volumes.list(filters={"name": project}):
            volume.remove(force=True)
