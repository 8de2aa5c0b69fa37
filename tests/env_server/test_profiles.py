"""Tool profiles through the real server, sandbox and grader (issue 34, item 1): the ``bash-only``
profile is mini-swe-agent's protocol (one ``bash`` tool, a fresh subshell per command at /workspace,
submission by the sentinel line, the printed patch graded), picked per episode at reset; an unknown
profile is refused at reset; markers, state(t) and fork work as under the default profile."""

from __future__ import annotations

import httpx
import websockets
from env_support import call, requires_sandbox, run, tool

from contract import SUBMIT_SENTINEL, format_tool_output, get_profile
from env_server.episode import EpisodeConfig

pytestmark = requires_sandbox


def _gold_heredoc(patch: str) -> str:
    assert "PATCH_END" not in patch
    return f"cat > /tmp/gold.patch <<'PATCH_END'\n{patch}PATCH_END\n"


def test_bash_only_gold_through_the_sentinel_scores_one_and_empty_zero(make_server, demo_task):
    async def main(srv):
        async with websockets.connect(srv.ws_url + "/ws") as ws:
            r = await call(ws, "reset", {"instance_id": demo_task.instance_id, "profile": "bash-only",
                                         "episode_id": "bo-gold"})
            obs = r["data"]["observation"]
            assert [t["name"] for t in obs["tools"]] == ["bash"]
            assert list(obs["tools"][0]["inputSchema"]["properties"]) == ["command"]
            # nothing persists between commands: each runs in a fresh subshell at /workspace
            r = await call(ws, "step", tool("bash", command="cd /tmp && export KEPT=1 && pwd"))
            assert r["data"]["observation"]["output"].strip() == "/tmp"
            r = await call(ws, "step", tool("bash", command='pwd; echo "kept=${KEPT:-no}"; echo "pager=$PAGER"'))
            assert r["data"]["observation"]["output"].split() == ["/workspace", "kept=no", "pager=cat"]
            assert r["data"]["metadata"]["returncode"] == 0
            # another profile's tool is the agent's error (a marker), and the episode goes on
            r = await call(ws, "step", tool("view", path="six.py"))
            assert r["data"]["metadata"]["error_kind"] == "unknown_tool" and r["data"]["done"] is False
            assert r["data"]["metadata"]["error_source"] == "agent"
            # a nonzero exit: its return code, and the marker the default profile gives it
            r = await call(ws, "step", tool("bash", command="echo out; exit 3"))
            assert r["data"]["metadata"]["returncode"] == 3 and r["data"]["metadata"]["error_kind"] == "nonzero_exit"
            assert format_tool_output(r["data"]["observation"] | {"metadata": r["data"]["metadata"]},
                                      style="returncode") == "<returncode>3</returncode>\n<output>\nout\n</output>"
            # the sentinel line with a failing exit status does not submit (mini-swe-agent's rule)
            r = await call(ws, "step", tool("bash", command=f"echo {SUBMIT_SENTINEL}; false"))
            assert r["data"]["done"] is False
            # the fix, its patch printed after the sentinel: graded by the hidden tests
            r = await call(ws, "step", tool("bash", command=_gold_heredoc(demo_task.patch)
                                            + "git apply /tmp/gold.patch && git diff > /tmp/patch.txt"))
            assert r["data"]["metadata"]["returncode"] == 0, r
            r = await call(ws, "step", tool("bash", command=f"echo {SUBMIT_SENTINEL} && cat /tmp/patch.txt"))
            d = r["data"]
            assert d["done"] is True and d["reward"] == 1.0, d
            assert d["metadata"]["resolved"] is True
            # state(t) renders under the profile: its instructions, its one tool
            r = await call(ws, "state", {"t": 2})
            assert r["data"]["messages"][0]["content"] == get_profile("bash-only").instructions
        async with httpx.AsyncClient(base_url=srv.url, timeout=120) as http:
            lines = (await http.get("/episodes/bo-gold/trace")).text.splitlines()
            import json
            records = [json.loads(line) for line in lines]
            assert records[0]["profile"] == "bash-only"
            assert "six.py" in records[-1]["submission"]  # the graded patch is kept with its step
        async with websockets.connect(srv.ws_url + "/ws") as ws:
            # the sentinel with nothing after it: an empty submission
            await call(ws, "reset", {"instance_id": demo_task.instance_id, "profile": "bash-only"})
            r = await call(ws, "step", tool("bash", command=f"echo {SUBMIT_SENTINEL}"))
            assert r["data"]["done"] is True and r["data"]["reward"] == 0.0, r
            # a fix left in the workspace but not printed after the sentinel is not the submission
            await call(ws, "reset", {"instance_id": demo_task.instance_id, "profile": "bash-only"})
            r = await call(ws, "step", tool("bash", command=_gold_heredoc(demo_task.patch)
                                            + "git apply /tmp/gold.patch"))
            r = await call(ws, "step", tool("bash", command=f"echo {SUBMIT_SENTINEL} && echo not-a-patch"))
            assert r["data"]["done"] is True and r["data"]["reward"] == 0.0, r
            # a patch over the 64 KiB an observation keeps is still the whole submission (a correct fix
            # with a big patch is not cut into a zero), while any other command's output is cut as usual
            await call(ws, "reset", {"instance_id": demo_task.instance_id, "profile": "bash-only"})
            r = await call(ws, "step", tool("bash", command="head -c 200000 /dev/zero | tr '\\0' x"))
            out = r["data"]["observation"]["output"]
            assert "output truncated" in out and len(out.encode()) < 70 * 1024
            r = await call(ws, "step", tool("bash", command=_gold_heredoc(demo_task.patch)
                                            + "git apply /tmp/gold.patch && for i in $(seq 3000); do "
                                            "echo \"note $i: a long line of prose, kept in the patch\"; done > NOTES.txt"
                                            " && git add -N NOTES.txt && git diff > /tmp/patch.txt && wc -c < /tmp/patch.txt"))
            assert int(r["data"]["observation"]["output"].split()[-1]) > 100_000, r
            r = await call(ws, "step", tool("bash", command=f"echo {SUBMIT_SENTINEL} && cat /tmp/patch.txt"))
            assert r["data"]["done"] is True and r["data"]["reward"] == 1.0, r["data"]["metadata"]
            # the default profile in the same server: unchanged
            r = await call(ws, "reset", {"instance_id": demo_task.instance_id})
            assert {t["name"] for t in r["data"]["observation"]["tools"]} == set(get_profile(None).names)
    with make_server() as srv:
        run(main(srv))


def test_an_unknown_profile_is_refused_at_reset_with_the_served_ones(make_server, demo_task):
    async def main(srv):
        async with websockets.connect(srv.ws_url + "/ws") as ws:
            r = await call(ws, "reset", {"instance_id": demo_task.instance_id, "profile": "bash_only"})
            assert r["type"] == "error" and r["data"]["code"] == "UNKNOWN_PROFILE", r
            assert "did you mean 'bash-only'" in r["data"]["message"]
            assert r["data"]["profiles"] == ["default", "bash-only"]
            # the session survives the refusal
            r = await call(ws, "reset", {"instance_id": demo_task.instance_id})
            assert r["type"] == "observation"
        async with httpx.AsyncClient(base_url=srv.url, timeout=60) as http:
            meta = (await http.get("/metadata")).json()
            assert meta["profiles"]["bash-only"]["tools"] == ["bash"] and meta["default_profile"] == "default"
            listed = (await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                                                    "params": {"profile": "bash-only"}})).json()
            assert [t["name"] for t in listed["result"]["tools"]] == ["bash"]
    with make_server() as srv:
        run(main(srv))


def test_bash_only_budget_end_is_a_zero_and_a_fork_keeps_the_profile(make_server, demo_task):
    """mini-swe-agent's step limit ends an episode without a submission: 0, the agent's. A fork of a
    bash-only episode serves bash-only (asking for another profile is refused)."""
    async def main(srv):
        async with websockets.connect(srv.ws_url + "/ws") as ws:
            await call(ws, "reset", {"instance_id": demo_task.instance_id, "profile": "bash-only",
                                     "episode_id": "bo-budget"})
            await call(ws, "step", tool("bash", command=_gold_heredoc(demo_task.patch) + "git apply /tmp/gold.patch"))
            r = await call(ws, "step", tool("bash", command="true"))
            r = await call(ws, "step", tool("bash", command="true"))
            d = r["data"]
            assert d["done"] is True and d["reward"] == 0.0 and d["metadata"]["grade_error_source"] == "agent", d
            assert "nothing was submitted" in d["observation"]["output"]
            r = await call(ws, "reset", {"fork_of": "bo-budget", "t": 1, "profile": "default"})
            assert r["type"] == "error" and r["data"]["code"] == "VALIDATION_ERROR"
            r = await call(ws, "reset", {"fork_of": "bo-budget", "t": 1})
            assert [t["name"] for t in r["data"]["observation"]["tools"]] == ["bash"]
            r = await call(ws, "step", tool("bash", command="git diff --stat"))
            assert "six.py" in r["data"]["observation"]["output"]  # the fork has the original's workspace
            r = await call(ws, "step", tool("bash", command=f"echo {SUBMIT_SENTINEL} && git diff"))
            assert r["data"]["done"] is True and r["data"]["reward"] == 1.0, r
    with make_server(episode=EpisodeConfig(max_steps=3)) as srv:
        run(main(srv))


def test_bash_only_timeout_reads_as_mini_swe_agent_reports_it(make_server, demo_task):
    """A command past its limit: return code -1 and the exception line, the partial output, and none of
    the server's own wrapper in it."""
    from sandbox.models import Limits, SandboxConfig

    async def main(srv):
        async with websockets.connect(srv.ws_url + "/ws") as ws:
            await call(ws, "reset", {"instance_id": demo_task.instance_id, "profile": "bash-only"})
            r = await call(ws, "step", tool("bash", command="echo started; sleep 30"))
            meta, out = r["data"]["metadata"], r["data"]["observation"]["output"]
            assert meta["returncode"] == -1 and meta["error_kind"] == "timeout", r
            assert meta["exception_info"].endswith("timed out after 2 seconds")
            assert "started" in out and "exec env" not in out and "PAGER" not in out, out
            rendered = format_tool_output(r["data"]["observation"] | {"metadata": meta}, style="returncode")
            assert rendered.startswith("<exception>An error occurred while executing the command: ")
            assert "<returncode>-1</returncode>" in rendered
            r = await call(ws, "step", tool("bash", command="echo alive"))  # the next command runs as usual
            assert r["data"]["observation"]["output"] == "alive\n" and r["data"]["metadata"]["returncode"] == 0
    with make_server(sandbox=SandboxConfig(limits=Limits(max_command_timeout_s=2))) as srv:
        run(main(srv))
