"""A task image with no Python at all: the runtime runs on the
bundled interpreter (sandbox/runtime_bundle.py); the image's own shell, git and harness do the rest.

The fixture image is the offline Debian base plus git, holding a small shell library whose
tests print TAP (read by swebench's ``parse_log_tap``), with a bug at HEAD.
"""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import tempfile
from pathlib import Path

import pytest
from support.requirements import missing

from sandbox import SandboxConfig, open_sandbox
from verifier import grade_submission
from verifier.task import TaskInstance

LIB = '''upper() { printf '%s\\n' "$1" | tr '[:lower:]' '[:upper:]'; }
repeat() { local out=""; for _ in $(seq 1 "$2"); do out="$out$1"; done; printf '%s\\n' "$out"; }
'''
BUGGY = LIB.replace('seq 1 "$2"', 'seq 2 "$2"')
TESTS = '''#!/bin/bash
. ./lib/strings.sh
n=0
check() { n=$((n+1)); if [ "$2" = "$3" ]; then echo "ok $n - $1"; else echo "not ok $n - $1"; fi; }
check "upper converts" "$(upper abc)" "ABC"
check "repeat twice" "$(repeat ab 2)" "abab"
check "repeat once" "$(repeat x 1)" "x"
'''
DOCKERFILE = '''FROM swe-openenv-base:bookworm
RUN export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; \\
    apt-get install -y -qq --no-install-recommends git >/dev/null; apt-get clean; rm -rf /var/lib/apt/lists/*
COPY testbed /testbed
RUN cd /testbed && git init -q && git add -A && git -c user.name=t -c user.email=t@t commit -qm release \\
    && cp /testbed/.buggy lib/strings.sh && rm .buggy && git -c user.name=t -c user.email=t@t commit -qam base
WORKDIR /testbed
'''


@pytest.fixture(scope="module")
def image(client) -> str:
    try:
        client.api.inspect_image("swe-openenv-base:bookworm")
    except Exception:
        missing("docker", "base image swe-openenv-base:bookworm missing (run docker/build-images.sh)")
    tag = "swe-openenv-test/nopython:" + hashlib.sha256((DOCKERFILE + LIB + TESTS).encode()).hexdigest()[:12]
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode != 0:
        with tempfile.TemporaryDirectory() as ctx:
            root = Path(ctx, "testbed")
            (root / "lib").mkdir(parents=True)
            (root / "tests").mkdir()
            (root / "lib/strings.sh").write_text(LIB)
            (root / ".buggy").write_text(BUGGY)
            (root / "tests/run.sh").write_text(TESTS)
            Path(ctx, "Dockerfile").write_text(DOCKERFILE)
            subprocess.run(["docker", "build", "-q", "-t", tag, ctx], check=True, capture_output=True)
    return tag


@pytest.fixture(scope="module")
def task(image) -> TaskInstance:
    fix = ("diff --git a/lib/strings.sh b/lib/strings.sh\n--- a/lib/strings.sh\n+++ b/lib/strings.sh\n"
           "@@ -1,2 +1,2 @@\n " + LIB.splitlines()[0] + "\n-" + BUGGY.splitlines()[1] + "\n+"
           + LIB.splitlines()[1] + "\n")
    return TaskInstance(instance_id="shell__strings-1", problem_statement="repeat drops one copy", image=image,
                        workdir="/testbed", patch=fix, test_cmd="bash tests/run.sh", log_parser="parse_log_tap",
                        FAIL_TO_PASS=["- repeat twice", "- repeat once"], PASS_TO_PASS=["- upper converts"])


def test_session_runs_on_the_bundled_python_in_an_image_without_one(task):
    async def main():
        sb = await open_sandbox(task.workspace_spec(), SandboxConfig(backend="docker"))
        try:
            assert sb.info.details["runtime_python"] == "bundled" and sb.info.seccomp
            r = await sb.run("command -v python3 python; git log --format=%s; ls")
            assert r.output.split() == ["base", "lib", "tests"], r.output  # no python on the agent's PATH
            await sb.write_file("lib/strings.sh", LIB.encode())
            diff = await sb.diff()
            assert '+repeat() { local out=""; for _ in $(seq 1 "$2")' in diff
            r = await sb.run("bash tests/run.sh")
            assert r.output.count("\nok ") + r.output.startswith("ok ") == 3
        finally:
            await sb.close()

    asyncio.run(main())


def test_harness_grading_in_an_image_without_python(task):
    cfg = SandboxConfig(backend="docker")

    async def main():
        return await grade_submission(task, task.patch, cfg), await grade_submission(task, "", cfg)

    gold, empty = asyncio.run(main())
    assert gold.reward == 1.0 and gold.resolved, gold
    assert empty.reward == 0.0 and empty.fail_to_pass == {"- repeat twice": "failed", "- repeat once": "failed"}
