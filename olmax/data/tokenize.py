"""Tokenizers for prepare: a tokenizer.json run by the fastest engine that gives exactly `tokenizers`' ids.

Contract: `Tokenizer.encode_batch(texts)` and `Tokenizer.encode_flat(texts)` return, for every text, exactly
the ids that `tokenizers.Tokenizer.from_file(path).encode(text, add_special_tokens=False).ids` returns (added
tokens such as `<|endoftext|>` written literally in a text are matched, as `tokenizers` does). A text holding
a lone surrogate (not valid Unicode) is refused with OlmaxError by every engine.

Engines, fastest first (tokens per CPU-second on real text: bench/peers/prepare.py, docs/tokenizers.md):
  gigatoken   byte-level and SentencePiece BPE in Rust; loads any tokenizer.json it supports
  tiktoken    only a cl100k-style byte-level BPE (one Split regex, ByteLevel without its own regex, no
              normalizer, merges whose order equals the rank of what they make)
  tokenizers  the reference itself
Exactness is checked, not assumed: at load every candidate encodes the probe set (tokenize_probe.py, a few
milliseconds) and is used only when all its ids equal `tokenizers`'. `auto` takes the first candidate that
loads and passes; a forced engine that cannot load or disagrees is an error. `Tokenizer.engine_reason` says
which engine runs and why (prepare prints it and writes it into manifest.json).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import metadata

import numpy as np
import orjson

from olmax.data.tokenize_probe import probe_texts
from olmax.errors import OlmaxError

ENGINES = ("gigatoken", "tiktoken", "tokenizers")  # auto's order: fastest first


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


class _HFEngine:
    """`tokenizers` itself (the reference)."""

    name = "tokenizers"

    def __init__(self, hf) -> None:
        self.hf = hf

    def encode(self, texts: list[str], threads: int = 1) -> list[list[int]]:
        return [e.ids for e in self.hf.encode_batch(texts, add_special_tokens=False)]


class _TiktokenEngine:
    name = "tiktoken"

    def __init__(self, enc) -> None:
        self.enc = enc

    def encode(self, texts: list[str], threads: int = 1) -> list[list[int]]:
        if threads <= 1 or len(texts) < 2:
            return [self.enc.encode(t, allowed_special="all") for t in texts]
        return self.enc.encode_batch(texts, num_threads=threads, allowed_special="all")


class _GigatokenEngine:
    name = "gigatoken"

    def __init__(self, tok) -> None:
        self.tok = tok

    def encode(self, texts: list[str], threads: int = 1) -> list[list[int]]:
        return self.tok.encode_batch_list(texts, parallel=threads > 1)  # >1: its own pool

    def encode_flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        # one call on this thread (prepare runs its own workers); the awkward array's buffers, no copy
        return _flat_layout(self.tok.encode_batch(texts, parallel=False).layout)

    def encode_utf8(self, utf8: bytes, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # the texts as an awkward array of strings over the buffer itself: no Python object per text
        import awkward as ak

        chars = ak.contents.NumpyArray(np.frombuffer(utf8, dtype=np.uint8), parameters={"__array__": "char"})
        strings = ak.contents.ListOffsetArray(
            ak.index.Index64(np.asarray(offsets, dtype=np.int64)), chars, parameters={"__array__": "string"}
        )
        return _flat_layout(self.tok.encode_batch(ak.Array(strings), parallel=False).layout)


def _flat_layout(layout) -> tuple[np.ndarray, np.ndarray]:
    """gigatoken's output (an awkward list array of ids) as (ids, offsets from 0), without a copy."""
    offsets = np.asarray(layout.offsets.data, dtype=np.int64)
    ids = np.asarray(layout.content.data)[offsets[0] : offsets[-1]]
    return ids.astype(np.uint32, copy=False), offsets - offsets[0]


def _flat(seqs: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in seqs], out=offsets[1:])
    ids = np.fromiter((i for s in seqs for i in s), dtype=np.uint32, count=int(offsets[-1]))
    return ids, offsets


def _check_text(texts: Sequence[str]) -> list[str]:
    """The texts as a list; a lone surrogate (which no engine can encode the same way) is an error."""
    for n, t in enumerate(texts):
        if not t.isascii():
            try:
                t.encode("utf-8")
            except UnicodeEncodeError as e:
                raise OlmaxError(
                    f"text {n} of the batch holds a lone surrogate at character {e.start} (not valid "
                    "Unicode); no tokenizer engine encodes it"
                ) from None
    return list(texts)


@dataclass
class Tokenizer:
    """A tokenizer.json, run by the fastest exact engine available."""

    path: str
    sha256: str
    engine: str  # one of ENGINES
    vocab_size: int
    eos_token_id: int
    pad_token_id: int | None
    _impl: object
    _hf: object | None = None
    engine_reason: str = ""
    engine_version: str = field(default="")
    # the EOS token's text when the engine, given a text with it written after, gives the text's ids and
    # EOS (`_eos_text`); prepare then writes it after each text instead of inserting EOS among the ids
    eos_text: str | None = None

    def encode_batch(self, texts: Sequence[str], num_threads: int = 1) -> list[list[int]]:
        """Token ids of each text (no EOS appended), identical to `tokenizers` for the same file."""
        return self._impl.encode(_check_text(texts), num_threads)

    def encode_flat(self, texts: Sequence[str], utf8_checked: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Every text's ids concatenated (uint32) and the offsets where each starts (len(texts) + 1
        values), on the calling thread: what prepare's workers write. `utf8_checked`: the caller has
        encoded every text to UTF-8 already (no lone surrogate), so it is not checked again."""
        texts = list(texts) if utf8_checked else _check_text(texts)
        if hasattr(self._impl, "encode_flat"):
            return self._impl.encode_flat(texts)
        return _flat(self._impl.encode(texts))

    def encode_utf8(self, utf8: bytes, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`encode_flat` of texts given as valid UTF-8 back to back, text i at `utf8[offsets[i]:offsets[i +
        1]]`: the same ids. gigatoken reads the buffer itself; another engine gets each text as a str."""
        if hasattr(self._impl, "encode_utf8"):
            return self._impl.encode_utf8(utf8, offsets)
        bounds = np.asarray(offsets).tolist()
        view = memoryview(utf8)
        texts = [str(view[a:b], "utf-8") for a, b in zip(bounds[:-1], bounds[1:])]
        return self.encode_flat(texts, utf8_checked=True)

    def decode(self, ids: Sequence[int]) -> str:
        return self._hf.decode(list(ids), skip_special_tokens=False)


def _special_id(spec: dict, names: Sequence[str]) -> int | None:
    for tok in spec.get("added_tokens", []):
        if tok.get("content") in names:
            return int(tok["id"])
    return None


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "?"


def _build(name: str, path: str, spec: dict, sha: str, hf) -> object:
    """The engine `name` for this tokenizer.json; raises _Unfit (why not) when it cannot run it."""
    if name == "tokenizers":
        return _HFEngine(hf)
    if name == "tiktoken":
        return _TiktokenEngine(_tiktoken_encoding(spec, sha))
    try:
        import gigatoken
    except ImportError:
        raise _Unfit("not installed") from None
    try:
        return _GigatokenEngine(gigatoken.Tokenizer(path))
    except Exception as e:  # noqa: BLE001 - any refusal to load means: not this engine
        first = (str(e).splitlines() or [""])[0][:120]
        raise _Unfit(f"cannot load this tokenizer.json ({type(e).__name__}: {first})") from None


class _Unfit(Exception):
    """Why an engine cannot run a tokenizer exactly."""


def _tiktoken_encoding(spec: dict, sha: str):
    reason = _tiktoken_unsupported_reason(spec)
    vocab: dict[str, int] = spec["model"]["vocab"] if reason is None else {}
    if reason is None and not _merges_match_ranks(vocab, spec["model"].get("merges", [])):
        reason = "merge order differs from token ranks"
    if reason is not None:
        raise _Unfit(reason)
    import tiktoken

    added = {t["content"]: int(t["id"]) for t in spec.get("added_tokens", [])}
    decoder = byte_decoder()
    ranks: dict[bytes, int] = {}
    for token, rank in vocab.items():
        if token in added:
            continue
        try:
            ranks[bytes(decoder[ch] for ch in token)] = rank
        except KeyError:
            raise _Unfit(f"vocab entry {token!r} is not byte-level") from None
    return tiktoken.Encoding(
        name=f"olmax-{sha[:12]}",
        pat_str=spec["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"],
        mergeable_ranks=ranks,
        special_tokens=added,
        explicit_n_vocab=None,
    )


def _probe(engine, probe: list[str], want: list[list[int]]) -> str | None:
    """Where `engine` first disagrees with `tokenizers` on the probe set, or None when it never does."""
    try:
        got = engine.encode(probe)
    except Exception as e:  # noqa: BLE001 - an engine that fails on a probe text is not exact
        return f"fails on the probe set ({type(e).__name__}: {(str(e).splitlines() or [''])[0][:120]})"
    for n, (g, w) in enumerate(zip(got, want)):
        if list(g) != w:
            return f"differs from tokenizers on probe text {n} ({probe[n][:40]!r})"
    return None


def _eos_text(spec: dict, eos: int, hf, engine, probe: list[str], want: list[list[int]]) -> str | None:
    """The EOS token's text when writing it after any text gives that text's ids and then EOS: an added
    special token matched as written (not normalized, no stripping or word rule around it) that no other
    added token can overlap from the text's side, with the reference and the engine both giving the probe
    texts' ids and EOS for each probe text with it written after. None otherwise."""
    added = spec.get("added_tokens", [])
    tok = next((t for t in added if int(t["id"]) == eos), None)
    if tok is None or not tok.get("special"):
        return None
    if any(tok.get(k) for k in ("normalized", "lstrip", "rstrip", "single_word")):
        return None
    text = tok["content"]
    for other in (t["content"] for t in added if t["content"] != text):
        # a match begun in the text could run into the EOS text: a suffix of `other` that starts it
        if text in other[1:] or any(other.endswith(text[:k]) for k in range(1, len(text))):
            return None
    with_eos = [p + text for p in probe]
    ref = [e.ids for e in hf.encode_batch(with_eos, add_special_tokens=False)]
    if any(r != w + [eos] for r, w in zip(ref, want)):
        return None
    try:
        got = engine.encode(with_eos)
    except Exception:  # noqa: BLE001 - an engine that fails here is not asked to
        return None
    return text if all(list(g) == r for g, r in zip(got, ref)) else None


def load_tokenizer(path: str, engine: str = "auto") -> Tokenizer:
    """Load a tokenizer.json; `engine` is "auto" (the first of ENGINES that is exact for it) or one of
    ENGINES (an error when that one is not exact for this file)."""
    if engine != "auto" and engine not in ENGINES:
        raise OlmaxError(f"unknown tokenizer engine {engine!r}; choose auto, {', '.join(ENGINES)}")
    try:
        with open(path, "rb") as f:
            raw = f.read()
        spec = orjson.loads(raw)  # 5 MB for dolma2: a tenth of a second with json
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
    from tokenizers import Tokenizer as HFTokenizer

    try:
        hf = HFTokenizer.from_file(path)
    except Exception as e:  # noqa: BLE001 - the reference cannot read it: not a usable tokenizer.json
        raise OlmaxError(f"{path}: `tokenizers` cannot load it ({e}); pass a valid tokenizer.json") from None
    probe = probe_texts(list(added))
    want = [e.ids for e in hf.encode_batch(probe, add_special_tokens=False)]
    skipped: list[str] = []
    for name in ENGINES if engine == "auto" else (engine,):
        try:
            impl = _build(name, path, spec, sha, hf)
        except _Unfit as e:
            skipped.append(f"{name}: {e}")
            continue
        wrong = None if name == "tokenizers" else _probe(impl, probe, want)
        if wrong is not None:
            skipped.append(f"{name}: {wrong}")
            continue
        version = _version(name)
        how = "forced by --engine" if engine != "auto" else "the fastest exact engine installed"
        reason = f"{name} {version}, {how}: " + (
            "the reference itself"
            if name == "tokenizers"
            else f"equal to tokenizers {_version('tokenizers')} on all {len(probe)} probe texts "
            f"({sum(map(len, want)):,} tokens)"
        )
        if skipped:
            reason += "; not used: " + "; ".join(skipped)
        eos_text = _eos_text(spec, eos, hf, impl, probe, want)
        return Tokenizer(path, sha, name, vocab_size, eos, pad, impl, hf, reason, version, eos_text)
    raise OlmaxError(
        f"{path} cannot run exactly on engine {engine!r}: {skipped[0].split(': ', 1)[1]}; use --engine auto"
    )
