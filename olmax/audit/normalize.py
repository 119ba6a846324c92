"""Word-level normalization for leak probing: the same words whatever the tokenization, case or spacing.

A token stream is turned into a stream of *words*, vectorized from per-token tables built once from
the tokenizer's vocabulary: each token's text is lowercased, its Unicode punctuation, symbols and
spaces (curly quotes, dashes, NBSP) become separators, and it is cut into runs of word bytes
(ASCII letters, digits, and every other byte >= 0x80, so UTF-8 letters stay inside words); a run that
starts a token joins the previous token's last run when no separator byte lies between them, so a
word split over several BPE tokens (" Dar" + "win") is one word. Punctuation and whitespace are
dropped. Special tokens (EOS, PAD, any added token) and ids past the vocabulary become a BOUNDARY
word that no eval n-gram contains, so no match crosses a document. "The  theory,\\nof EVOLUTION"
and "the theory of evolution" give the same four words.

A word is identified by two polynomial hashes of its bytes modulo p = 2^31 - 1, each cut to its low
20 bits (40 bits of word identity; two different words of <= l bytes get equal values with
probability about 2^-40 + l/p per base), and the n-gram hash of hashing.py runs over these values as
if they were token ids: base 1 over the first value, base 2 over the second.
"""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from functools import lru_cache

import numpy as np

from olmax.audit.hashing import BASES, MERSENNE31, fold_mod, powers_mod, reduce_mod

NORMALIZATION = ("word-level, per token where a token holds whole characters: Unicode compatibility forms "
                 "folded (NFKC: ligatures, fullwidth letters), combining accents dropped, lowercased; words "
                 "are maximal runs of ASCII letters, digits and non-ASCII letters, joined across BPE token "
                 "boundaries; punctuation, symbols, curly quotes, dashes and whitespace (ASCII and Unicode, "
                 "line wraps included) dropped, so markup tags leave only their names as extra words, "
                 "which the alignment skips; special tokens (EOS) are document boundaries")
_WORD = re.compile(rb"[a-z0-9\x80-\xff]+")
MAX_WORD_BYTES = 1 << 12  # longer words hash as if cut here (offsets are clipped)
# Word-byte hash bases (distinct from the n-gram bases, same modulus).
WORD_BASES = (1_234_567_891, 1_987_654_321)
BOUNDARY_VALUE = (1 << 20) - 1  # the boundary word's value (a real word takes it w.p. 2^-40)
WORD_MASK = np.uint64((1 << 20) - 1)  # word values keep 20 bits per base: ids <= hashing.MAX_TOKEN
_S32 = np.uint64(32)
_LOW32 = np.uint64(0xFFFFFFFF)
_S56 = np.uint64(56)
_ONES = np.uint64(0x0101010101010101)
# the first i bytes (in memory order) of an 8-byte group, as a mask of its uint64
_FIRST_BYTES = np.asarray([(1 << 8 * i) - 1 if sys.byteorder == "little" else ((1 << 8 * i) - 1) << (64 - 8 * i)
                           for i in range(8)], dtype=np.uint64)
_GROUPED = 1 << 12  # inputs of at least this many tokens find joined tokens and heads' words 8 at a time


def _fold_bytes(raw: bytes) -> bytes:
    """Lowercase a token's bytes; when they are whole UTF-8, also fold compatibility forms (NFKC:
    ligatures such as "ﬁ", fullwidth letters), drop combining accents ("é" and "e" + U+0301 both give
    "e"), lowercase non-ASCII letters and turn Unicode punctuation and spaces (curly quotes, dashes,
    NBSP, ...) into ASCII spaces. A token holding part of a character keeps its bytes
    (ASCII-lowercased): they stay word bytes."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.lower()
    # compatibility forms (ligatures, fullwidth letters, superscripts) to their plain letters, accents off
    text = "".join(ch for ch in unicodedata.normalize("NFKD", text) if unicodedata.category(ch) != "Mn")
    return "".join(" " if unicodedata.category(ch)[0] in "PZS" and ord(ch) > 127 else ch
                   for ch in unicodedata.normalize("NFKC", text).lower()).encode("utf-8")


class WordTables:
    """Per-token run tables: (V + 1) tokens, the last one standing for every id past the vocabulary."""

    def __init__(self, tokenizer_json: str):
        from olmax.data.tokenize import byte_decoder

        with open(tokenizer_json, "rb") as f:
            spec = json.load(f)
        vocab: dict[str, int] = spec["model"]["vocab"]
        added = {int(t["id"]) for t in spec.get("added_tokens", [])}
        size = max([*vocab.values(), *added]) + 2
        decoder = byte_decoder()
        token_bytes: list[bytes | None] = [None] * size  # None: boundary
        for token, i in vocab.items():
            if i in added:
                continue
            try:
                raw = bytes(decoder[ch] for ch in token)
            except KeyError:
                raw = token.encode("utf-8")
            token_bytes[i] = _fold_bytes(raw)
        n_runs = np.zeros(size, dtype=np.int64)
        starts_word = np.zeros(size, dtype=bool)
        ends_word = np.zeros(size, dtype=bool)
        h1, h2, lens = [], [], []
        for i, raw in enumerate(token_bytes):
            if raw is None:
                n_runs[i] = 1
                h1.append(BOUNDARY_VALUE)
                h2.append(BOUNDARY_VALUE)
                lens.append(1)
                continue
            runs = [m.group() for m in _WORD.finditer(raw)]
            n_runs[i] = len(runs)
            if runs:
                starts_word[i] = _WORD.match(raw) is not None
                ends_word[i] = raw[-1:] != b"" and _WORD.fullmatch(raw[-1:]) is not None
            for r in runs:
                for out, base in ((h1, WORD_BASES[0]), (h2, WORD_BASES[1])):
                    out.append(sum(byte * pow(base, j, MERSENNE31) for j, byte in enumerate(r))
                               % MERSENNE31)
                lens.append(len(r))
        self.boundary = np.asarray([b is None for b in token_bytes], dtype=bool)
        self.n_runs = n_runs
        self.run_ptr = np.concatenate([[0], np.cumsum(n_runs)]).astype(np.int64)
        self.run_h = [np.asarray(h1, dtype=np.uint64), np.asarray(h2, dtype=np.uint64)]
        self.run_len = np.asarray(lens, dtype=np.int64)
        self.starts_word = starts_word & ~self.boundary
        self.ends_word = ends_word & ~self.boundary
        self.qpow = [powers_mod(b, MAX_WORD_BYTES) for b in WORD_BASES]
        self.size = size
        # Fast path tables, per token: its (only) run's hash and length (0 for tokens with no run).
        first = np.minimum(self.run_ptr[:-1], max(0, len(lens) - 1))
        has = n_runs > 0
        self.tok_h = [np.where(has, h[first], 0).astype(np.uint64) for h in self.run_h]
        # Both bases' 20-bit word values of a one-token word in one uint64 (one gather per word).
        self.tok_pack = ((self.tok_h[0] & WORD_MASK) << np.uint64(32)) | (self.tok_h[1] & WORD_MASK)
        self.tok_len = np.where(has, self.run_len[first], 0).astype(np.int64)
        # Both bases in one uint64, (base 1 << 32) | base 2: a token's full run hashes, and the powers
        # of the word-byte bases (one gather for both).
        self.tok_hh = (self.tok_h[0] << _S32) | self.tok_h[1]
        self.qq = (self.qpow[0] << _S32) | self.qpow[1]
        self.multi = n_runs > 1
        # One byte per token for the fast path: bit 0 has a run, 1 starts a word, 2 ends a word,
        # 3 holds two or more runs.
        self.flags = (has.astype(np.uint8) | (self.starts_word.astype(np.uint8) << 1) |
                      (self.ends_word.astype(np.uint8) << 2) | (self.multi.astype(np.uint8) << 3))

    def words(self, tokens: np.ndarray, *, joins_first: bool = False,
              final: bool = True) -> tuple[list[np.ndarray], np.ndarray, int]:
        """([word values base 1, base 2], index of each word's first token, tokens consumed).

        With final=False the last word is held back (it may continue in the next chunk): the
        returned `consumed` is the index of the token where it starts, and the caller passes the
        stream again from there. `joins_first` says the first token continues a word (never needed
        when chunks restart at a word start).
        """
        packed, first_tok, consumed = self.packed_words(tokens, joins_first=joins_first, final=final)
        return [packed >> np.uint64(32), packed & WORD_MASK], first_tok, consumed

    def packed_words(self, tokens: np.ndarray, *, joins_first: bool = False,
                     final: bool = True) -> tuple[np.ndarray, np.ndarray, int]:
        """`words` with both values of a word in one uint64, (base 1 << 32) | base 2: the probe's form."""
        # intp ids index fastest; ids past the vocabulary read the last table row (mode="clip")
        t = np.asarray(tokens).astype(np.intp, copy=False)
        if t.size == 0:
            return np.zeros(0, np.uint64), np.zeros(0, np.int64), 0
        f = self.flags.take(t, mode="clip")
        if f.max() < 8:  # no token holds two runs (bit 3)
            return self._words_single(t, f, joins_first, final)
        t = np.minimum(t, self.size - 1)
        values, first_tok, consumed = self._words_general(t, joins_first, final)
        return (values[0] << np.uint64(32)) | values[1], first_tok, consumed

    def _words_general(self, t: np.ndarray, joins_first: bool,
                       final: bool) -> tuple[list[np.ndarray], np.ndarray, int]:
        """`words` for any tokens, including those holding two or more runs (per-run tables)."""
        t = t.astype(np.int64)
        nr = self.n_runs[t]
        # A token's first run joins the previous token's last run when both touch the boundary.
        prev_ends = np.empty(t.size, dtype=bool)
        prev_ends[0] = joins_first
        prev_ends[1:] = self.ends_word[t[:-1]]
        tok_joins = self.starts_word[t] & prev_ends
        total = int(nr.sum())
        tok_of_run = np.repeat(np.arange(t.size), nr)
        within = np.arange(total) - (np.cumsum(nr) - nr)[tok_of_run]
        run_id = self.run_ptr[t][tok_of_run] + within
        joins = (within == 0) & tok_joins[tok_of_run]
        word_starts = np.flatnonzero(~joins)
        consumed = t.size
        if not final and word_starts.size:
            consumed = int(tok_of_run[word_starts[-1]])
            keep_runs = word_starts[-1]
            word_starts = word_starts[:-1]
            run_id, joins, tok_of_run = run_id[:keep_runs], joins[:keep_runs], tok_of_run[:keep_runs]
        first_tok = tok_of_run[word_starts] if word_starts.size else np.zeros(0, np.int64)
        joined = np.flatnonzero(joins)
        values = []
        for b in range(len(BASES)):
            c = self.run_h[b][run_id]
            if joined.size:  # runs continuing a word: shift by the bytes before them in the word
                lens = self.run_len[run_id]
                offset = np.cumsum(lens) - lens
                word_of_run = np.cumsum(~joins) - 1
                rel = np.minimum(offset - offset[word_starts][word_of_run], MAX_WORD_BYTES - 1)
                cj = c[joined] * self.qpow[b][rel[joined]]
                c[joined] = reduce_mod(cj, np.empty_like(cj))
                w = np.add.reduceat(c, word_starts) if word_starts.size else np.zeros(0, np.uint64)
                multi = np.flatnonzero(np.diff(np.append(word_starts, c.size)) > 1)
                wm = w[multi]
                w[multi] = reduce_mod(wm, np.empty_like(wm))
            else:
                w = c[word_starts]
            values.append(w & WORD_MASK)
        return values, first_tok, consumed

    def _words_single(self, t: np.ndarray, f: np.ndarray, joins_first: bool,
                      final: bool) -> tuple[np.ndarray, np.ndarray, int]:
        """`packed_words` when no token holds two runs: per-token tables, and work on joined tokens
        only. `f` is flags[t]. (Array methods rather than np.* wrappers: verification calls this on
        many short regions, where the per-call cost is what counts.)"""
        # joins[i]: token i starts with a word byte and token i-1 ended with one (bit 1 of f[i] and
        # bit 2 of f[i-1]); a word starts at a token with a run that does not join (a token that
        # joins has a run, so "has a run and does not join" is bit 0 of f xor joins).
        n = t.size
        # long inputs: both byte arrays padded to whole 8-byte groups, read 8 tokens at a time below
        big = n >= _GROUPED
        size = -(-n // 8) * 8 if big else n
        jb, sb = np.zeros(size, dtype=np.uint8), np.zeros(size, dtype=np.uint8)
        joins, is_start = jb[:n], sb[:n]
        joins[0] = 4 if joins_first else 0
        joins[1:] = f[:-1]
        joins >>= 1
        joins &= f
        joins >>= 1
        joins &= 1
        np.bitwise_and(f, 1, out=is_start)
        is_start ^= joins
        starts = is_start.view(bool).nonzero()[0]  # each word's first token (bool: nonzero's fast path)
        consumed = n
        if not final and starts.size:
            consumed = int(starts[-1])
            starts = starts[:-1]
        packed = self.tok_pack.take(t.take(starts), mode="clip")
        if not starts.size:
            return packed, starts, consumed
        s0 = int(starts[0]) + 1  # joined tokens before the first start continue a word begun before
        if big:
            jb[:s0] = 0
            jb[consumed:] = 0
            joined = _nonzero_sparse(jb)
        else:
            joined = joins[s0:consumed].view(bool).nonzero()[0]
            joined += s0
        if not joined.size:
            return packed, starts, consumed
        # Multi-token words. Consecutive joined tokens form a run that continues the word whose
        # first token (its head) comes right before the run; a joined token's byte offset in its
        # word is its head's length plus the lengths of the run's tokens before it.
        brk = np.empty(joined.size, dtype=bool)
        brk[0] = True
        np.not_equal(joined[1:], joined[:-1] + 1, out=brk[1:])
        first = brk.nonzero()[0]  # each run's first joined token
        run = np.cumsum(brk)
        run -= 1  # the run of each joined token
        heads = joined[first]
        heads -= 1
        # the word each head begins: the starts before it
        if big:
            word = _count_before(sb, heads)
        else:
            word = np.cumsum(is_start[:int(heads[-1]) + 1], dtype=np.int64).take(heads)
            word -= 1
        tj, th = t.take(joined), t.take(heads)
        lj = self.tok_len.take(tj, mode="clip")
        rel = np.cumsum(lj)
        rel -= lj  # bytes of the joined tokens before each one, over all runs
        d = self.tok_len.take(th, mode="clip")
        d -= rel[first]  # per run: its head's length, less the bytes of the runs before it
        rel += d.take(run)
        np.minimum(rel, MAX_WORD_BYTES - 1, out=rel)
        # run hashes and byte powers of both bases come packed as (base 1 << 32) | base 2 (one
        # gather each) and are worked on as the rows of one (2, n) array
        c = _split(self.tok_hh.take(tj, mode="clip"))
        c *= _split(self.qq.take(rel))  # < 2^62
        fold_mod(c, np.empty_like(c))  # < 2^32: a run's sum stays far below 2^64
        m = np.add.reduceat(c, first, axis=1)
        m += _split(self.tok_hh.take(th, mode="clip"))
        reduce_mod(m, np.empty_like(m))
        m &= WORD_MASK
        hi = m[0]
        hi <<= _S32
        hi |= m[1]
        packed[word] = hi
        return packed, starts, consumed


def _nonzero_sparse(b: np.ndarray) -> np.ndarray:
    """int64: flatnonzero of 0/1 bytes `b` (uint8, size a multiple of 8), few of them set: the 8-byte
    groups that hold one first (numpy's nonzero slows down on sparse input; few groups are empty)."""
    w = b.view(np.uint64)
    g = (w != 0).nonzero()[0]
    i = w.take(g).view(bool).nonzero()[0]  # the groups' bytes, in memory order
    out = g.take(i >> 3)
    out <<= 3
    out += i & 7
    return out


def _count_before(b: np.ndarray, at: np.ndarray) -> np.ndarray:
    """int64: how many of the 0/1 bytes `b` (uint8, size a multiple of 8) before each index `at` are
    set, 8 at a time: times 0x0101...01, an 8-byte group's byte sum (<= 8, no carries) lands in the
    top byte."""
    w = b.view(np.uint64)
    per = w * _ONES
    per >>= _S56
    before = np.cumsum(per)
    before -= per  # set bytes in the groups before each group
    g = at >> 3
    part = w.take(g)
    part &= _FIRST_BYTES.take(at & 7)  # the group's bytes before `at`
    part *= _ONES
    part >>= _S56
    part += before.take(g)
    return part.view(np.int64)


def _split(packed: np.ndarray) -> np.ndarray:
    """uint64 (2, n): the two 32-bit halves of packed values, high half first."""
    out = np.empty((2, packed.size), dtype=np.uint64)
    np.right_shift(packed, _S32, out=out[0])
    np.bitwise_and(packed, _LOW32, out=out[1])
    return out


@lru_cache(maxsize=2)
def word_tables(tokenizer_json: str) -> WordTables:
    """The (cached) word tables of a tokenizer.json."""
    return WordTables(tokenizer_json)
