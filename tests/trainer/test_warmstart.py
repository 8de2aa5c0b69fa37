"""trainer_client.warmstart: gold-patch edits, demonstrations recorded through the real env
server (rewarded by its hidden tests), and the SFT'd model the demo's GRPO run starts from."""

from __future__ import annotations

import json

import pytest

from trainer_client.warmstart import Turn, edits_from_patch

PATCH = """diff --git a/pkg/mod.py b/pkg/mod.py
index 1111111..2222222 100644
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -1,7 +1,7 @@
 def a(x):
     return x
 
 def b(x):
-    return x
+    return -x
 
 def c():
@@ -20,3 +20,4 @@ def z():
     pass
 
 END = 1
+EXTRA = 2
diff --git a/other.py b/other.py
--- a/other.py
+++ b/other.py
@@ -1,1 +1,1 @@
-flag = True
+flag = False
"""

FILES = {
    "pkg/mod.py": "def a(x):\n    return x\n\ndef b(x):\n    return x\n\ndef c():\n" + "\n" * 12 + "def z():\n    pass\n\nEND = 1\n",
    "other.py": "flag = True\n",
}


def _count(path: str, text: str) -> int:
    return FILES[path].count(text)


def test_edits_widen_the_changed_lines_until_they_are_unique_in_the_file():
    turns = edits_from_patch(PATCH, _count)
    assert [t.tool for t in turns] == ["str_replace"] * 3
    first, insertion, other = (t.arguments for t in turns)
    # "    return x" occurs twice: one line of context each side makes it unique
    assert first == {"path": "pkg/mod.py", "old": "def b(x):\n    return x\n", "new": "def b(x):\n    return -x\n"}
    assert _count("pkg/mod.py", first["old"]) == 1
    # a pure insertion has no removed line: it is anchored on its context
    assert insertion["old"] == "END = 1" and insertion["new"] == "END = 1\nEXTRA = 2"
    assert other == {"path": "other.py", "old": "flag = True", "new": "flag = False"}
    applied = FILES["pkg/mod.py"].replace(first["old"], first["new"]).replace(insertion["old"], insertion["new"])
    assert "return -x" in applied and applied.endswith("END = 1\nEXTRA = 2\n")


def test_edits_refuse_patches_they_cannot_express():
    with pytest.raises(ValueError, match="no file"):
        edits_from_patch("", _count)
    with pytest.raises(ValueError, match="unique anchor"):
        edits_from_patch(PATCH, lambda path, text: 2)  # never unique
    deleted = "diff --git a/x.py b/x.py\ndeleted file mode 100644\n--- a/x.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x = 1\n"
    with pytest.raises(ValueError, match="deleted file"):
        edits_from_patch(deleted, _count)


def test_turn_text_is_a_qwen_tool_call():
    assert Turn("submit").message_text() == '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'
    assert Turn(text="Done.").message_text() == "Done."


@pytest.mark.slow
def test_warmstart_records_rewarded_demos_and_saves_a_model(real_env_url, small_pack_file, tmp_path):
    """Through the real env server: every gold demonstration is rewarded 1.0 by the hidden tests,
    every lazy one 0.0; the SFT'd model is saved with its record."""
    from pathlib import Path

    from transformers import AutoModelForCausalLM

    import trainer_client
    from trainer_client.config import load_config
    from trainer_client.warmstart import warmstart

    cfg = load_config(Path(trainer_client.__file__).parent / "configs" / "cpu_smoke.yaml",
                      [f'env.urls=["{real_env_url}"]', f"data.tasks={small_pack_file}"])
    lines: list[str] = []
    out = warmstart(cfg, tmp_path / "warm", steps=3, lr=1e-3, log=lines.append)
    record = json.loads((out / "warmstart.json").read_text())
    ids = cfg.instance_ids()
    rewards = {d["name"]: d["reward"] for d in record["demos"]}
    assert rewards == {**{f"{i}:gold": 1.0 for i in ids}, **{f"{i}:lazy": 0.0 for i in ids}}, lines
    assert all(d["completion_tokens"] > 0 for d in record["demos"])
    assert any(line.startswith("[sft 3/3]") for line in lines)
    model = AutoModelForCausalLM.from_pretrained(str(out))
    assert model.config.model_type == "qwen2"
