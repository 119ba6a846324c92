"""Tokenizers for prepare: the exact fast path (tiktoken) when it can express a tokenizer.json, else `tokenizers`.

Contract: `Tokenizer.encode_batch(texts)` returns, for every text, exactly the ids that
`tokenizers.Tokenizer.from_file(path).encode(text).ids` returns (added tokens such as `<|endoftext|>`
written literally in a text are matched, as `tokenizers` does). The tiktoken path is used only when the
tokenizer.json has the shape of a cl100k-style byte-level BPE (one Split regex, ByteLevel without its own
regex, no normalizer, merges whose order equals the rank of what they make); anything else falls back to
`tokenizers`. tests/data/test_tokenize.py checks the two paths against each other on varied text.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from olmax.errors import OlmaxError


@lru_cache(maxsize=1)
def byte_decoder() -> dict[str, int]:
    """The inverse of GPT-2's byte → printable-unicode table used by ByteLevel BPE vocabularies."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    table: dict[int, int] = {b: b for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = 256 + extra
            extra += 1
    return {chr(u): b for b, u in table.items()}


def _tiktoken_unsupported_reason(spec: dict) -> str | None:
    """Why this tokenizer.json cannot run on tiktoken exactly, or None when it can."""
    model = spec.get("model") or {}
    if model.get("type") != "BPE" or model.get("dropout") or model.get("byte_fallback"):
        return "model is not a plain BPE"
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        return "BPE uses subword prefixes/suffixes"
    if spec.get("normalizer") is not None:
        return "has a normalizer"
    pre = spec.get("pre_tokenizer") or {}
    parts = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    if len(parts) != 2:
        return "pre-tokenizer is not Split + ByteLevel"
    split, byte_level = parts
    if split.get("type") != "Split" or "Regex" not in (split.get("pattern") or {}):
        return "first pre-tokenizer is not a regex Split"
    if (
        not (split.get("behavior") == "Removed" and split.get("invert") is True)
        and split.get("behavior") != "Isolated"
    ):
        return "Split behaviour does not keep exactly the regex matches"
    if (
        byte_level.get("type") != "ByteLevel"
        or byte_level.get("use_regex")
        or byte_level.get("add_prefix_space")
    ):
        return "second pre-tokenizer is not a plain ByteLevel"
    for tok in spec.get("added_tokens", []):
        if tok.get("lstrip") or tok.get("rstrip") or tok.get("single_word") or tok.get("normalized"):
            return f"added token {tok.get('content')!r} has strip/word/normalize flags"
    return None


def _merges_match_ranks(vocab: dict[str, int], merges: list) -> bool:
    """tiktoken merges by the rank of the result; HF by merge order. Same output iff these orders agree."""
    last = -1
    for merge in merges:
        left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
        rank = vocab.get(left + right)
        if rank is None or rank <= last:
            return False
        last = rank
    return True


@dataclass
class Tokenizer:
    """A tokenizer.json, run by the fastest exact engine available."""

    path: str
    sha256: str
    engine: str  # "tiktoken" or "tokenizers"
    vocab_size: int
    eos_token_id: int
    pad_token_id: int | None
    _impl: object
    _hf: object | None = None

    def encode_batch(self, texts: Sequence[str], num_threads: int = 1) -> list[list[int]]:
        """Token ids of each text (no EOS appended), identical to `tokenizers` for the same file."""
        if self.engine == "tiktoken":
            if num_threads <= 1 or len(texts) < 2:
                return [self._impl.encode(t, allowed_special="all") for t in texts]
            return self._impl.encode_batch(list(texts), num_threads=num_threads, allowed_special="all")
        return [e.ids for e in self._impl.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        if self._hf is None:
            from tokenizers import Tokenizer as HFTokenizer

            self._hf = HFTokenizer.from_file(self.path)
        return self._hf.decode(list(ids), skip_special_tokens=False)


def _special_id(spec: dict, names: Sequence[str]) -> int | None:
    for tok in spec.get("added_tokens", []):
        if tok.get("content") in names:
            return int(tok["id"])
    return None


def load_tokenizer(path: str, engine: str = "auto") -> Tokenizer:
    """Load a tokenizer.json; `engine` is "auto" (tiktoken when exact, else tokenizers), "tiktoken" or "tokenizers"."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
        spec = json.loads(raw)
    except OSError as e:
        raise OlmaxError(f"cannot read tokenizer {path}: {e}") from e
    except json.JSONDecodeError as e:
        raise OlmaxError(f"{path} is not a tokenizer.json (JSON error at byte {e.pos}: {e.msg})") from e
    sha = hashlib.sha256(raw).hexdigest()
    vocab: dict[str, int] = (spec.get("model") or {}).get("vocab") or {}
    added = {t["content"]: int(t["id"]) for t in spec.get("added_tokens", [])}
    vocab_size = max([*vocab.values(), *added.values()], default=-1) + 1
    eos = _special_id(spec, ("<|endoftext|>", "</s>", "<eos>"))
    if eos is None:
        raise OlmaxError(
            f"{path}: no end-of-text token (<|endoftext|>, </s> or <eos>) among its added tokens"
        )
    pad = _special_id(spec, ("<|pad|>", "<pad>"))

    reason = _tiktoken_unsupported_reason(spec)
    if reason is None and not _merges_match_ranks(vocab, spec["model"].get("merges", [])):
        reason = "merge order differs from token ranks"
    if engine == "tiktoken" and reason is not None:
        raise OlmaxError(f"{path} cannot run on tiktoken exactly: {reason}; use --engine tokenizers")
    if engine not in ("auto", "tiktoken", "tokenizers"):
        raise OlmaxError(f"unknown tokenizer engine {engine!r}; choose auto, tiktoken or tokenizers")

    if engine != "tokenizers" and reason is None:
        import tiktoken

        decoder = byte_decoder()
        ranks: dict[bytes, int] = {}
        for token, rank in vocab.items():
            if token in added:
                continue
            try:
                ranks[bytes(decoder[ch] for ch in token)] = rank
            except KeyError:
                reason = f"vocab entry {token!r} is not byte-level"
                break
        if reason is None:
            pattern = spec["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]
            enc = tiktoken.Encoding(
                name=f"olmax-{sha[:12]}",
                pat_str=pattern,
                mergeable_ranks=ranks,
                special_tokens=dict(added),
                explicit_n_vocab=None,
            )
            return Tokenizer(path, sha, "tiktoken", vocab_size, eos, pad, enc)
    from tokenizers import Tokenizer as HFTokenizer

    hf = HFTokenizer.from_file(path)
    return Tokenizer(path, sha, "tokenizers", vocab_size, eos, pad, hf, hf)
