"""Word normalization: its invariances, and the compiled word pass against a plain-Python reading of the
rule (each token's folded bytes, words as runs of word bytes joined across tokens, a one-letter token
glued to a number as the variable byte, hashed byte by byte)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from olmax.assets import tokenizer_path
from olmax.audit.leaks.normalize import BOUNDARY_VALUE, MAX_WORD_BYTES, WORD_BASES, word_tables
from olmax.hashing import MERSENNE31

WORD_BYTE = re.compile(rb"[a-z0-9\x80-\xff]")


def _tables():
    return word_tables(str(tokenizer_path("dolma2", quiet=True)))


def _token_bytes() -> dict[int, bytes]:
    """Each ordinary token's folded bytes (special tokens and ids past the vocabulary are absent)."""
    from olmax.audit.leaks.normalize import _fold_bytes
    from olmax.data.tokenize import byte_decoder

    spec = json.loads(open(str(tokenizer_path("dolma2", quiet=True)), "rb").read())
    special = {int(t["id"]) for t in spec.get("added_tokens", [])}
    dec = byte_decoder()
    out = {}
    for tok, i in spec["model"]["vocab"].items():
        if i not in special:
            try:
                out[i] = _fold_bytes(bytes(dec[c] for c in tok))
            except KeyError:
                out[i] = _fold_bytes(tok.encode("utf-8"))
    return out


def _value(pieces: list[bytes]) -> int:
    """A word's packed value from its pieces (one per token): each piece's bytes hashed at its offset in
    the word, offsets clipped at MAX_WORD_BYTES - 1."""
    vals = []
    for base in WORD_BASES:
        h, offset = 0, 0
        for piece in pieces:
            ph = sum(b * pow(base, j, MERSENNE31) for j, b in enumerate(piece)) % MERSENNE31
            h = (h + ph * pow(base, min(offset, MAX_WORD_BYTES - 1), MERSENNE31)) % MERSENNE31
            offset += len(piece)
        vals.append(h & ((1 << 20) - 1))
    return (vals[0] << 32) | vals[1]


def reference(token_bytes: dict[int, bytes], ids: list[int], joins_first: bool, final: bool):
    """(packed values, first token of each word, consumed), read off the rule one token at a time."""
    words: list[tuple[int, list[bytes] | None]] = []  # (first token, pieces or None for a boundary)
    # pieces of the word the next token may continue; with joins_first, one begun before this input
    # (continued, never reported)
    open_word: list[bytes] | None = [] if joins_first else None
    for i, t in enumerate(ids):
        raw = token_bytes.get(t)
        if raw is None:  # a special token or an id past the vocabulary: a boundary word of its own
            words.append((i, None))
            open_word = None
            continue
        runs = [(m.start(), m.group()) for m in re.finditer(rb"[a-z0-9\x80-\xff]+", raw)]
        if not runs:
            open_word = None
            continue
        for r, (at, run) in enumerate(runs):
            if r == 0 and at == 0 and open_word is not None:
                glued = raw == run and len(run) == 1 and run.isalpha() and open_word
                # a one-letter token after digits only: a variable, whatever its letter ("3x" = "3y")
                open_word.append(b"#" if glued and all(p.isdigit() for p in open_word) else run)
            else:
                open_word = [run]
                words.append((i, open_word))
        if not WORD_BYTE.fullmatch(raw[-1:]):
            open_word = None
    consumed = len(ids)
    if not final and words:
        consumed = words[-1][0]
        words = words[:-1]
    boundary = (BOUNDARY_VALUE << 32) | BOUNDARY_VALUE
    return [boundary if p is None else _value(p) for _, p in words], [i for i, _ in words], consumed


def _inputs(tokenizer, rng):
    """Real code and prose tokens, the same with ids past the vocabulary, special tokens and the
    tokens that hold two words ("½" reads "1 2") mixed in, and random ids."""
    from olmax.testing.prepare_testdata import pydoc_texts, stdlib_texts

    texts = [t[:3000] for _, t in stdlib_texts(6)] + [t[:3000] for _, t in pydoc_texts()[:4]]
    texts.append(
        "Caf\u00e9 na\u00efve \ufb01ne \uff21\uff22 \u00bd\u00bc cup \u201cquoted\u201d \u2014 x.y_z 1\u00be"
    )
    out = [np.asarray(ids, dtype=np.int64) for ids in tokenizer.encode_batch(texts)]
    multi = [27154, 42973, 68496]
    for base in out[:6]:
        x = base.copy()
        at = rng.integers(0, x.size, size=x.size // 8 + 1)
        x[at] = rng.choice(multi + [100257, 100_300, 10**7, 2**40, -1, 5], size=at.size)
        out.append(x)
    out.append(rng.integers(0, 100_400, size=3000))
    out.append(np.asarray(multi * 400, dtype=np.int64))  # more words than tokens
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_word_pass_equals_a_plain_reading_of_the_rule(tokenizer, seed):
    tables = _tables()
    token_bytes = _token_bytes()
    rng = np.random.default_rng(seed)
    for ids in _inputs(tokenizer, rng):
        for lo in (0, int(rng.integers(1, max(2, ids.size // 2)))):
            x = ids[lo:]
            for dtype in (np.int64, np.uint32):
                for joins_first in (False, True):
                    for final in (True, False):
                        xx = x.astype(
                            dtype
                        )  # (as uint32, -1 and 2^40 wrap: the reference reads the same ids)
                        got = tables.packed_words(xx, joins_first=joins_first, final=final)
                        want = reference(token_bytes, xx.tolist(), joins_first, final)
                        assert got[0].tolist() == want[0]
                        assert got[1].tolist() == want[1]
                        assert got[2] == want[2]


def test_a_long_word_hashes_as_if_cut_at_the_clip(tokenizer):
    tables = _tables()
    token_bytes = _token_bytes()
    ids = np.asarray(tokenizer.encode_batch(["x" + "ab" * 3000])[0], dtype=np.int64)
    got = tables.packed_words(ids)[0]
    assert got.size == 1 and got.tolist() == reference(token_bytes, ids.tolist(), False, True)[0]


def test_chunks_restarting_at_word_starts_give_the_whole_stream(tokenizer):
    from olmax.testing.prepare_testdata import stdlib_texts

    tables = _tables()
    ids = np.asarray(
        tokenizer.encode_batch([" ".join(t[:4000] for _, t in stdlib_texts(3))])[0],
        dtype=np.int64,
    )
    whole = tables.packed_words(ids)[0].tolist()
    got, a = [], 0
    while a < ids.size:
        b = min(ids.size, a + 97)
        vals, _, consumed = tables.packed_words(ids[a:b], final=b == ids.size)
        got += vals.tolist()
        a += consumed if consumed else b - a
    assert got == whole


def test_words_ignore_case_spacing_punctuation_and_bpe_splits(tokenizer):

    tables = _tables()

    def words(text):
        ids = np.asarray(tokenizer.encode_batch([text])[0], dtype=np.int64)
        return [v.tolist() for v in tables.words(ids)[0]]

    base = words("the theory of evolution by darwin")
    assert len(base[0]) == 6
    assert words("The  Theory,\nof EVOLUTION by   DARWIN.") == base
    assert words("THE THEORY OF EVOLUTION BY DARWIN") == base
    assert words("\u201cThe theory\u201d\u00a0of evolution \u2014 by Darwin") == base
    assert len(words("the théorie")[0]) == 2 and words("THE THÉORIE") == words("the théorie")
    assert words("the theory of evolution by darwins") != base
    # a document boundary (EOS) is a word no text produces
    eos = tables.words(np.asarray([100257], dtype=np.int64))[0]
    assert eos[0].tolist() not in [[v] for v in base[0]]
    # chunked with held-back last words == whole
    ids = np.asarray(tokenizer.encode_batch(["alpha beta gamma, delta epsilon"])[0], dtype=np.int64)
    whole = tables.words(ids)[0][0].tolist()
    vals, _, consumed = tables.words(ids[:5], final=False)
    rest = tables.words(ids[consumed:])[0][0].tolist()
    assert vals[0].tolist() + rest == whole


def test_a_letter_glued_to_a_number_is_a_variable_whatever_its_name(tokenizer):
    tables = _tables()

    def words(text):
        ids = np.asarray(tokenizer.encode_batch([text])[0], dtype=np.int64)
        return tables.packed_words(ids)[0].tolist()

    base = words("solve 14x - 3 = 52 and 2n + 1")
    assert len(base) == 7
    assert words("solve 14m - 3 = 52 and 2k + 1") == base  # renamed: the same words
    assert words("solve 14X - 3 = 52 and 2N + 1") == base
    assert words("solve 15x - 3 = 52 and 2n + 1") != base  # another number is another word
    assert words("solve 14xy - 3 = 52 and 2n + 1") != base  # two letters: a word, not a variable
    assert words("solve x - 3") != words("solve m - 3")  # a letter alone stays itself
    assert words("abc 3 x") == words("ABC 3 x")
