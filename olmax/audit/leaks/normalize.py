"""Word-level normalization for leak probing: the same words whatever the tokenization, case or spacing.

A token stream is turned into a stream of *words* by one compiled pass (numba) over per-token tables
built once from the tokenizer's vocabulary: each token's text is lowercased, its Unicode punctuation, symbols and
spaces (curly quotes, dashes, NBSP) become separators, and it is cut into runs of word bytes
(ASCII letters, digits, and every other byte >= 0x80, so UTF-8 letters stay inside words); a run that
starts a token joins the previous token's last run when no separator byte lies between them, so a
word split over several BPE tokens (" Dar" + "win") is one word. Punctuation and whitespace are
dropped. Special tokens (EOS, PAD, any added token) and ids past the vocabulary become a BOUNDARY
word that no eval n-gram contains, so no match crosses a document. "The  theory,\\nof EVOLUTION"
and "the theory of evolution" give the same four words.

A word is identified by two polynomial hashes of its bytes modulo p = 2^31 - 1, each cut to its low
20 bits (40 bits of word identity; two different words of <= l bytes get equal values with
probability about 2^-40 + l/p per base), and the n-gram hash of olmax/hashing.py runs over these values as
if they were token ids: base 1 over the first value, base 2 over the second.
"""

from __future__ import annotations

import bisect
import html
import json
import re
import unicodedata
from functools import lru_cache
from typing import NamedTuple

import numpy as np
from numba import njit

from olmax.audit.leaks.scratch import Scratch
from olmax.data.tokenize import byte_decoder
from olmax.hashing import MERSENNE31, powers_mod

NORMALIZATION = (
    "word-level, per token where a token holds whole characters: Unicode compatibility forms "
    "folded (NFKC: ligatures, fullwidth letters), combining accents dropped, lowercased; words "
    "are maximal runs of ASCII letters, digits and non-ASCII letters, joined across BPE token "
    "boundaries; punctuation, symbols, curly quotes, dashes and whitespace (ASCII and Unicode, "
    "line wraps included) dropped, so markup tags leave only their names as extra words, "
    "which the alignment skips; special tokens (EOS) are document boundaries; a whole token after a "
    "space that is a written-out operator (plus, minus, times, equals) is dropped as its symbol is, "
    "one that is a numeral (zero to twenty, thirty to ninety) reads as its digits; a single letter "
    "glued to a number (3x, 14n) reads as a variable, whatever its name"
)
_WORD = re.compile(rb"[a-z0-9\x80-\xff]+")
# Written-out operators and numerals as whole tokens after a space: operators read as the symbols
# they stand for (dropped, as symbols are), numerals up to twenty and the tens as their digits. The
# same word elsewhere ("<b>five", a line's first word) stays a word: one word changed, which the
# alignment tolerates and the text check reads as its digits.
_SPOKEN = {w.encode(): b"" for w in ("plus", "minus", "times", "equals")} | {
    w.encode(): str(i).encode()
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen twenty".split()
    )
}
_SPOKEN |= {
    w.encode(): str(10 * i).encode()
    for i, w in enumerate("thirty forty fifty sixty seventy eighty ninety".split(), 3)
}
MAX_WORD_BYTES = 1 << 12  # longer words hash as if cut here (offsets are clipped)
# Word-byte hash bases (distinct from the n-gram bases, same modulus).
WORD_BASES = (1_234_567_891, 1_987_654_321)
BOUNDARY_VALUE = (1 << 20) - 1  # the boundary word's value (a real word takes it w.p. 2^-40)
WORD_MASK = np.uint64((1 << 20) - 1)  # word values keep 20 bits per base: ids <= hashing.MAX_TOKEN
_S32 = np.uint64(32)
# The run a letter glued to a number hashes as: "#", a byte no word holds, under both bases ("3x" and "3y"
# are the same word: a variable renamed is no edit to the word stream).
VARIABLE_BYTE = b"#"
VARIABLE_HH = np.uint64((ord(VARIABLE_BYTE) << 32) | ord(VARIABLE_BYTE))


def _fold_bytes(raw: bytes) -> bytes:
    """Lowercase a token's bytes; when they are whole UTF-8, also fold compatibility forms (NFKC:
    ligatures such as "ﬁ", fullwidth letters), drop combining accents ("é" and "e" + U+0301 both give
    "e"), lowercase non-ASCII letters and turn Unicode punctuation and spaces (curly quotes, dashes,
    NBSP, ...) into ASCII spaces. A token holding part of a character keeps its bytes
    (ASCII-lowercased): they stay word bytes. A space and a written-out operator or numeral (_SPOKEN)
    folds to a space and its symbol's word bytes (none for an operator, the digits for a numeral)."""
    if raw.isascii():  # nothing for NFKC or the accents to fold, no Unicode punctuation: most tokens
        spoken = _SPOKEN.get(raw[1:].lower()) if raw[:1] == b" " else None
        return raw.lower() if spoken is None else b" " + spoken
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.lower()
    spoken = _SPOKEN.get(text[1:].lower().encode()) if text[:1] == " " else None
    if spoken is not None:  # " minus" dropped as "-" is, " five" read as "5"
        return b" " + spoken
    # compatibility forms (ligatures, fullwidth letters, superscripts) to their plain letters, accents off
    text = "".join(ch for ch in unicodedata.normalize("NFKD", text) if unicodedata.category(ch) != "Mn")
    return "".join(
        " " if unicodedata.category(ch)[0] in "PZS" and ord(ch) > 127 else ch
        for ch in unicodedata.normalize("NFKC", text).lower()
    ).encode("utf-8")


def _run_hashes(runs: list[bytes], bases: tuple[int, ...]) -> tuple[np.ndarray, list[np.ndarray]]:
    """(length per run, [uint64 per run: sum of byte_j * base^j mod 2^31 - 1, 0 for an empty run, per base]),
    all runs at once."""
    lens = np.fromiter(map(len, runs), dtype=np.int64, count=len(runs))
    flat = np.array(bytearray(b"".join(runs)), dtype=np.uint64)
    starts = np.cumsum(lens) - lens
    pos = np.arange(len(flat), dtype=np.int64) - np.repeat(starts, lens)
    cut = np.minimum(starts, len(flat))
    hashes = []
    for base in bases:
        terms = flat * powers_mod(base, int(lens.max(initial=0)) + 1)[pos] % np.uint64(MERSENNE31)
        # a run's terms are terms[start:start + len]; the appended 0 gives an empty run (and the last) its sum
        sums = np.add.reduceat(np.append(terms, np.uint64(0)), cut)
        sums[lens == 0] = 0
        hashes.append(sums % np.uint64(MERSENNE31))
    return lens, hashes


class WordTables:
    """Per-token run tables: (V + 1) tokens, the last one standing for every id past the vocabulary."""

    def __init__(self, tokenizer_json: str):
        with open(tokenizer_json, "rb") as f:
            spec = json.load(f)
        vocab: dict[str, int] = spec["model"]["vocab"]
        added = {int(t["id"]) for t in spec.get("added_tokens", [])}
        size = max([*vocab.values(), *added]) + 2
        decoder = byte_decoder()
        token_bytes: list[bytes | None] = [None] * size  # None: boundary
        raw_bytes = [b"\n"] * size  # what a token reads as in the text check (a boundary: a line end)
        for token, i in vocab.items():
            if i in added:
                continue
            try:
                raw = bytes(decoder[ch] for ch in token)
            except KeyError:
                raw = token.encode("utf-8")
            raw_bytes[i] = raw
            token_bytes[i] = _fold_bytes(raw)
        # the vocabulary's frequency ranks of whole words (weights.py): a lower-case word that is one
        # token after a space, by its id (BPE merges are made in order of frequency)
        self.ranks: dict[str, int] = {}
        for i, raw in enumerate(raw_bytes):
            if raw[:1] == b" " and raw[1:].isalpha() and raw[1:].islower() and i not in added:
                self.ranks.setdefault(raw[1:].decode("ascii"), i)
        # each token's own bytes, for `text`: raw[raw_ptr[t]:raw_ptr[t + 1]]
        self.raw_ptr = np.concatenate([[0], np.cumsum([len(r) for r in raw_bytes])]).astype(np.int64)
        self.raw = np.array(bytearray(b"".join(raw_bytes)), dtype=np.uint8)
        n_runs = np.zeros(size, dtype=np.int64)
        starts_word = np.zeros(size, dtype=bool)
        ends_word = np.zeros(size, dtype=bool)
        digits_end = np.zeros(size, dtype=bool)  # its last run is all digits
        letter = np.zeros(size, dtype=bool)  # the token is one letter, a-z, and nothing else
        all_runs: list[bytes] = []  # every token's runs in token order; b"" stands for a boundary
        for i, raw in enumerate(token_bytes):
            if raw is None:
                n_runs[i] = 1
                all_runs.append(b"")
                continue
            runs = _WORD.findall(raw)
            n_runs[i] = len(runs)
            if runs:
                starts_word[i] = _WORD.match(raw) is not None
                ends_word[i] = raw[-1:] != b"" and _WORD.fullmatch(raw[-1:]) is not None
                digits_end[i] = runs[-1].isdigit()
                letter[i] = len(raw) == 1 and b"a" <= raw <= b"z"
            all_runs.extend(runs)
        lens, (h1, h2) = _run_hashes(all_runs, WORD_BASES)
        is_boundary = lens == 0
        h1[is_boundary] = h2[is_boundary] = BOUNDARY_VALUE
        lens[is_boundary] = 1
        boundary = np.asarray([b is None for b in token_bytes], dtype=bool)
        self.size = size
        # Per run: its hash under both bases in one uint64, (base 1 << 32) | base 2, and its length;
        # a token's runs are run_ptr[token]:run_ptr[token + 1].
        self.run_ptr = np.concatenate([[0], np.cumsum(n_runs)]).astype(np.int64)
        self.run_hh = (h1 << _S32) | h2
        self.run_len = lens
        # Per token: its first run's hash and length (0 for a token with no run), and the powers of the
        # word-byte bases, both bases in one uint64 (one gather for both).
        first = np.minimum(self.run_ptr[:-1], max(0, len(lens) - 1))
        has = n_runs > 0
        self.tok_hh = np.where(has, self.run_hh[first], 0).astype(np.uint64)
        # the same cut to the 20 bits a base of a word value: a one-token word's value
        self.tok_pack = (((self.tok_hh >> _S32) & WORD_MASK) << _S32) | (self.tok_hh & WORD_MASK)
        self.tok_len = np.where(has, self.run_len[first], 0).astype(np.int64)
        self.qq = (powers_mod(WORD_BASES[0], MAX_WORD_BYTES) << _S32) | powers_mod(
            WORD_BASES[1], MAX_WORD_BYTES
        )
        # One byte per token: bit 0 has a run, 1 starts with a word byte, 2 ends with one, 3 holds two
        # or more runs (a boundary is one run that neither starts nor ends a word: never joined), 4 its
        # last run is digits, 5 it is one letter (a variable glued to a number: VARIABLE)
        self.flags = (
            has.astype(np.uint8)
            | ((starts_word & ~boundary).astype(np.uint8) << 1)
            | ((ends_word & ~boundary).astype(np.uint8) << 2)
            | ((n_runs > 1).astype(np.uint8) << 3)
            | ((digits_end & ~boundary).astype(np.uint8) << 4)
            | ((letter & ~boundary).astype(np.uint8) << 5)
        )

    def words(
        self, tokens: np.ndarray, *, joins_first: bool = False, final: bool = True
    ) -> tuple[list[np.ndarray], np.ndarray, int]:
        """([word values base 1, base 2], index of each word's first token, tokens consumed).

        With final=False the last word is held back (it may continue in the next chunk): the
        returned `consumed` is the index of the token where it starts, and the caller passes the
        stream again from there. `joins_first` says the first token continues a word (never needed
        when chunks restart at a word start).
        """
        packed, first_tok, consumed = self.packed_words(tokens, joins_first=joins_first, final=final)
        return [packed >> np.uint64(32), packed & WORD_MASK], first_tok, consumed

    def packed_words(
        self, tokens: np.ndarray, *, joins_first: bool = False, final: bool = True
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """`words` with both values of a word in one uint64, (base 1 << 32) | base 2: the probe's form.

        One compiled pass over the tokens (`_words_kernel`); ids past the vocabulary (and negative ones)
        are boundaries. Scratch arrays are kept per thread, so a block of tokens allocates only its
        results."""
        t = as_token_ids(tokens)
        n = t.size
        cap = n + 1
        while True:
            out = WordBuffers(*_SCRATCH.get(cap))
            nw, consumed = _words_kernel(t, self.kernel_tables, joins_first, final, out)
            if nw >= 0:
                return out.vals[:nw].copy(), out.first[:nw].copy(), consumed
            cap = 2 * cap - nw  # tokens with several runs made more words than the scratch holds

    def text(self, tokens: np.ndarray) -> str:
        """The text of `tokens` (UTF-8, a character cut by the ends replaced; special tokens and ids past
        the vocabulary read as line ends)."""
        t = np.minimum(as_token_ids(tokens).astype(np.int64), self.size - 1)
        lo, hi = self.raw_ptr[t], self.raw_ptr[t + 1]
        if t.size == 0:
            return ""
        idx = np.repeat(lo - np.cumsum(hi - lo) + (hi - lo), hi - lo) + np.arange(int((hi - lo).sum()))
        return self.raw[idx].tobytes().decode("utf-8", errors="replace")

    @property
    def kernel_tables(self) -> KernelTables:
        """The tables the compiled passes read (`words_of` takes them from compiled callers). Built on
        each read, never kept: WordTables travels to workers attribute by attribute (olmax.wire), which
        sends arrays, not NamedTuples."""
        return KernelTables(
            self.flags,
            self.tok_pack,
            self.tok_hh,
            self.tok_len,
            self.run_ptr,
            self.run_hh,
            self.run_len,
            self.qq,
        )


class KernelTables(NamedTuple):
    """`WordTables`' arrays as the compiled passes take them: one argument (numba reads a NamedTuple of
    arrays in nopython mode, field access costs nothing), so every pass and every compiled caller
    (align.py, paraphrase.py) passes the tables along whole. Fields as on `WordTables`."""

    flags: np.ndarray  # uint8 per token: the bits described in WordTables.__init__
    tok_pack: np.ndarray  # uint64 per token: its first run's word value (a one-token word's value)
    tok_hh: np.ndarray  # uint64 per token: its first run's hash, both bases
    tok_len: np.ndarray  # int64 per token: its first run's bytes
    run_ptr: np.ndarray  # int64: token t's runs are run_ptr[t]:run_ptr[t + 1]
    run_hh: np.ndarray  # uint64 per run: its hash, both bases
    run_len: np.ndarray  # int64 per run: its bytes
    qq: np.ndarray  # uint64: the word-byte bases' powers, both bases


class WordBuffers(NamedTuple):
    """The word pass's output arrays, filled by `_words_kernel` and each pass it runs: per word, its
    packed value (`vals`) and first token (`first`); per token that continues a word, its index
    (`joined`) and the word it continues (`jword`). One argument, so the passes hand them on whole;
    `packed_words` takes them from per-thread scratch, `words_of` allocates its own."""

    vals: np.ndarray  # uint64
    first: np.ndarray  # int64
    joined: np.ndarray  # int64
    jword: np.ndarray  # int64


_SCRATCH = Scratch(np.uint64, np.int64, np.int64, np.int64)  # a WordBuffers' arrays, in field order


def as_token_ids(tokens: np.ndarray) -> np.ndarray:
    """Token ids as the one array type the compiled passes take (contiguous uint32, as in shards):
    other integer types are converted, and ids outside [0, 2^32) read as past the vocabulary."""
    t = np.ascontiguousarray(tokens).reshape(-1)
    if t.dtype != np.uint32:
        t = np.where((t >= 0) & (t <= 0xFFFFFFFF), t, 0xFFFFFFFF).astype(np.uint32)
    return t


@njit(cache=True, nogil=True)
def words_of(t, tables, final):
    """`WordTables.packed_words` for compiled callers (align.py): (values, first tokens, consumed) of the
    tokens `t` (`as_token_ids`), given `WordTables.kernel_tables`; scratch of its own."""
    cap = t.size + 1
    while True:
        out = WordBuffers(
            np.empty(cap, np.uint64),
            np.empty(cap, np.int64),
            np.empty(cap, np.int64),
            np.empty(cap, np.int64),
        )
        nw, consumed = _words_kernel(t, tables, False, final, out)
        if nw >= 0:
            return out.vals[:nw], out.first[:nw], consumed
        cap = 2 * cap - nw


@njit(cache=True, nogil=True)
def _words_kernel(t, tables, joins_first, final, out):
    """(words, consumed) of the tokens `t` (`tables`: KernelTables); the words' packed values are left
    in out.vals[:words] and the index of each one's first token in out.first[:words] (`out`:
    WordBuffers). Returns words < 0 when the buffers are too small (tokens with several runs): the
    caller retries with at least -words more room.

    First pass, per token (`_starts`): a token with a run either starts a word (its value is its first
    run's, the word's head) or joins the word before (it starts with a word byte and the token before
    ended with one: recorded with that word's index); each further run of a token starts a word of
    its own. Second pass, over the joined tokens only (`_join`): a word's hash gains each joined
    token's run hash times base^(bytes before it in the word)."""
    prev_end = 1 if joins_first else 0
    nw, nj = _starts(t, tables, prev_end, out)
    if nw < 0:  # a token with two or more runs: the pass that handles them
        nw, nj = _starts_any(t, tables, prev_end, out)
        if nw < 0:
            return nw, 0
    _join(t, tables, out, nj)
    consumed = t.size
    if not final and nw > 0:  # hold the last word back: it may continue in the next input
        nw -= 1
        consumed = out.first[nw]
    return nw, consumed


@njit(cache=True, nogil=True, inline="always")
def _token(t, i, last):
    """Token i's table row: ids past the vocabulary (negative ones wrap there) read the boundary row."""
    return np.int64(min(np.uint64(t[i]), last))


@njit(cache=True, nogil=True)
def _starts(t, tables, prev_end, out):
    """(words, joined tokens) of the first pass when no token holds two runs (`_one_run`, branch-free);
    (-1, 0) at the first that does."""
    flags, tok_pack = tables.flags, tables.tok_pack
    last = np.uint64(flags.size - 1)
    nw = 0
    nj = 0
    for i in range(t.size):
        tok = _token(t, i, last)
        f = np.int64(flags[tok])
        if f & 8:
            return -1, 0
        j = (f >> 1) & prev_end  # starts with a word byte, and the token before ended with one
        prev_end = (f >> 2) & 1
        nw, nj = _one_run(i, f, j, tok_pack[tok], out, nw, nj)
    return nw, nj


@njit(cache=True, nogil=True)
def _starts_any(t, tables, prev_end, out):
    """`_starts` for any tokens: each further run of a token starts a word of its own (its value cut
    to 20 bits a base). (-need, 0) when the buffers hold fewer than `need` words."""
    flags, tok_pack, run_ptr, run_hh = tables.flags, tables.tok_pack, tables.run_ptr, tables.run_hh
    # the buffers read as out.<field> where written, not unpacked once up front: so the loop compiles to
    # the same machine code (registers aside) as with the four arrays passed one by one
    n = t.size
    last = np.uint64(flags.size - 1)
    s32 = np.uint64(32)
    mask = np.uint64(WORD_MASK)
    cap = out.vals.size
    nw = 0
    nj = 0
    for i in range(n):
        tok = _token(t, i, last)
        f = np.int64(flags[tok])
        j = (f >> 1) & prev_end
        prev_end = (f >> 2) & 1
        if f & 8:
            r0, r1 = run_ptr[tok], run_ptr[tok + 1]
            need = nw + (r1 - r0) + (n - i) + 1  # this token's words, at most one per token after it
            if need > cap:
                return cap - need, 0
            if j:
                out.joined[nj] = i
                out.jword[nj] = nw - 1
                nj += 1
            else:
                out.vals[nw] = tok_pack[tok]
                out.first[nw] = i
                nw += 1
            for r in range(r0 + 1, r1):
                h = run_hh[r]
                out.vals[nw] = (((h >> s32) & mask) << s32) | (h & mask)
                out.first[nw] = i
                nw += 1
            continue
        nw, nj = _one_run(i, f, j, tok_pack[tok], out, nw, nj)
    return nw, nj


@njit(cache=True, nogil=True, inline="always")
def _one_run(i, f, j, value, out, nw, nj):
    """Token i (flags f, joining when j) of one run or none, branch-free: the slot out.vals[nw] is
    written every time and kept when the token starts a word (it has a run and does not join); a
    joined token is recorded likewise. Returns the new (words, joined tokens)."""
    vals, first, joined, jword = out
    s = (f & 1) & (j ^ 1)
    vals[nw] = value
    first[nw] = i
    nw += s
    joined[nj] = i
    jword[nj] = nw - 1
    return nw, nj + j


@njit(cache=True, nogil=True)
def _join(t, tables, out, nj):
    """Second pass: each word that joined tokens continue gets its whole hash, from its head (the last
    run of its first token) and each joined token's first run, shifted by the bytes before it."""
    flags, tok_hh, tok_len, qq = tables.flags, tables.tok_hh, tables.tok_len, tables.qq
    run_ptr, run_hh, run_len = tables.run_ptr, tables.run_hh, tables.run_len
    vals, first, joined, jword = out
    last = np.uint64(flags.size - 1)
    s32 = np.uint64(32)
    low = np.uint64(0xFFFFFFFF)
    mask = np.uint64(WORD_MASK)
    k = 0
    while k < nj:
        w = jword[k]
        if w < 0:  # continues a word begun before this input (joins_first): not a word here
            k += 1
            continue
        head = _token(t, first[w], last)
        if flags[head] & 8:
            r = run_ptr[head + 1] - 1
            hh, nbytes = run_hh[r], run_len[r]
        else:
            hh, nbytes = tok_hh[head], tok_len[head]
        h1 = hh >> s32
        h2 = hh & low
        digits = (flags[head] >> 4) & 1  # the word so far is all digits
        while k < nj and jword[k] == w:
            tok = _token(t, joined[k], last)
            f = flags[tok]
            if digits and f & 32:  # a letter glued to a number ("3x"): the variable, whatever its name
                c, size = VARIABLE_HH, np.int64(1)
                digits = 0
            else:
                c, size = tok_hh[tok], tok_len[tok]
                digits &= ((f >> 4) & 1) & (((f >> 3) & 1) ^ 1)
            q = qq[min(nbytes, MAX_WORD_BYTES - 1)]  # longer words hash as if cut there
            h1 = _mod_p(h1 + (c >> s32) * (q >> s32))
            h2 = _mod_p(h2 + (c & low) * (q & low))
            nbytes += size
            k += 1
        vals[w] = ((h1 & mask) << s32) | (h2 & mask)


@njit(cache=True, nogil=True, inline="always")
def _mod_p(x):
    """x mod 2^31 - 1 for x < 2^63: two Mersenne folds and one conditional subtract."""
    p = np.uint64(2147483647)
    s31 = np.uint64(31)
    x = (x & p) + (x >> s31)
    x = (x & p) + (x >> s31)
    return x - p if x >= p else x


@lru_cache(maxsize=2)
def word_tables(tokenizer_json: str) -> WordTables:
    """The (cached) word tables of a tokenizer.json."""
    return WordTables(tokenizer_json)


# --------------------------------------------------------------------------- the text-level check's tokens
# Verification reads a candidate's text once more, with the symbols the word stream drops: numbers and
# operators are tokens of their own that must match (a sign flip or another number is another item), and
# written-out operators and numerals read as their symbols ("minus" as "-", "five" as "5").
SIGN_NORMALIZATION = (
    "text check (short items, and items with numbers or operators): the candidate's text decoded, HTML "
    "tags and entities removed, NFKC with accents dropped, lowercased; tokens are letter runs, numbers "
    "(digits with inner . or ,) and operators + - * / = < > ^ % (the Unicode minus and dashes, x-sign "
    "and division sign folded; a hyphen between two letters is not one); written-out forms read as their "
    "symbols: plus, minus, times, multiplied by, divided by, equals, is equal to, equal to, and "
    "the numerals zero to ninety-nine (twenty-four, twenty four) as digits"
)
WORD, NUMBER, OPERATOR = 0, 1, 2
_NUMERALS = {
    w: str(i)
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen twenty".split()
    )
}
_NUMERALS.update(
    {w: str(10 * i) for i, w in enumerate("thirty forty fifty sixty seventy eighty ninety".split(), 3)}
)
_OP_WORDS = {"plus": "+", "minus": "-", "times": "*", "equals": "="}
_SPECIAL = set(_NUMERALS) | set(_OP_WORDS)
_OP_PHRASES = re.compile(r"\b(?:multiplied\s+by|divided\s+by|is\s+equal\s+to|equal\s+to)\b")
_OP_PHRASE_OF = {"multiplied": "*", "divided": "/", "is": "=", "equal": "="}
_TAG = re.compile(r"</?[a-z][\w:-]*(?:\s[^<>]*)?/?>", re.I)
_DASHES = str.maketrans(
    {c: "-" for c in "\u2010\u2011\u2012\u2013\u2212\ufe63\uff0d"} | {"\u00d7": "*", "\u00f7": "/"}
)
_THOUSANDS = re.compile(r"(?<=\d),(?=\d)")
_TEXT_TOKEN = re.compile(r"\d+(?:[.,]\d+)*|[^\W\d_]+|[-+*/=<>^%]")
_IN_WORD_HYPHEN = re.compile(r"(?<=[^\W\d_])-(?=[^\W\d_])")


@lru_cache(maxsize=1)
def _combining() -> re.Pattern:
    """Every combining mark (the accents NFKD splits off) as one character class: dropped in one pass."""
    codes = [c for c in range(0x110000) if unicodedata.combining(chr(c))]
    ranges, lo = [], codes[0]
    for prev, c in zip(codes, codes[1:] + [-1]):
        if c != prev + 1:  # as ranges: a class of a few hundred ranges, not a thousand characters
            ranges.append(f"{re.escape(chr(lo))}-{re.escape(chr(prev))}" if prev > lo else re.escape(chr(lo)))
            lo = c
    return re.compile(f"[{''.join(ranges)}]")


_CLASS_OF = {c: NUMBER for c in "0123456789"} | {c: OPERATOR for c in "-+*/=<>^%"}


def text_tokens(text: str, lines: bool = False) -> tuple[list[str], ...]:
    """(tokens, classes) of `text` for the text check (SIGN_NORMALIZATION): each token a letter run
    (WORD), a number (NUMBER) or an operator (OPERATOR); with `lines`, (tokens, classes, line) where
    line[i] counts the line breaks before token i (a region's layout: a copy is on lines of its own)."""
    # each rewrite only where its text can be (a plain `in` test is far cheaper than a regex pass)
    if "<" in text:
        text = _TAG.sub(" ", text)
    if "&" in text:
        text = html.unescape(text)
    if not text.isascii():
        text = unicodedata.normalize("NFKD", text)
        if not text.isascii():
            text = _combining().sub("", text)
        text = unicodedata.normalize("NFKC", text).translate(_DASHES)
    text = text.lower()
    if " by" in text or "equal" in text:
        text = _OP_PHRASES.sub(lambda m: " " + _OP_PHRASE_OF[m.group().split()[0]] + " ", text)
    if "-" in text:
        text = _IN_WORD_HYPHEN.sub(" ", text)  # "well-known", "x-ray", "twenty-four": no operator
    if "," in text:  # only numbers hold one: 1,000 is 1000
        text = _THOUSANDS.sub("", text)
    if lines:
        found = list(_TEXT_TOKEN.finditer(text))
        toks = [m.group() for m in found]
        breaks = [i for i, ch in enumerate(text) if ch == "\n"] if "\n" in text else []
        line = [bisect.bisect_left(breaks, m.start()) for m in found]
    else:
        toks, line = _TEXT_TOKEN.findall(text), []
    cls = [_CLASS_OF.get(t[0], WORD) for t in toks]
    if not _SPECIAL.isdisjoint(toks):
        _read_spoken(toks, cls, line)
    return (toks, cls, line) if lines else (toks, cls)


def _read_spoken(toks: list[str], cls: list[int], line: list[int]) -> None:
    """Written-out operators and numerals among `toks` as their symbols, in place (tens merged into the
    units after them: "twenty four" is 24); `line`, when not empty, kept in step."""
    spelled, merged = -2, []  # the last written-out numeral; tens merged into the units after them
    for i in [i for i, t in enumerate(toks) if t in _SPECIAL]:
        sym = _NUMERALS.get(toks[i])
        if sym is None:
            toks[i], cls[i] = _OP_WORDS[toks[i]], OPERATOR
            continue
        prev = toks[i - 1]
        if spelled == i - 1 and len(sym) == 1 and len(prev) == 2 and prev[1] == "0" and prev != "10":
            sym = prev[0] + sym  # twenty-four, twenty four
            merged.append(i - 1)
        toks[i], cls[i], spelled = sym, NUMBER, i
    for i in reversed(merged):
        del toks[i], cls[i]
        if line:
            del line[i]


def item_words(ids: list[list[int]], tables: WordTables) -> list[np.ndarray]:
    """Each text's packed words (`tables.packed_words` of its tokens), in one pass over all of them: the
    texts joined with an id past the vocabulary between them (a boundary: no word joins across it, and
    its own boundary word starts at the separator, so it belongs to no text)."""
    if not ids:
        return []
    lengths = np.asarray([len(t) for t in ids], dtype=np.int64)
    ends = np.cumsum(lengths + 1) - 1  # each text's separator
    stream = np.full(int(ends[-1]) + 1, tables.size - 1, dtype=np.uint32)
    for t, e, k in zip(ids, ends.tolist(), lengths.tolist()):
        stream[e - k : e] = t
    packed, first_tok, _ = tables.packed_words(stream, final=True)
    cut = np.searchsorted(first_tok, ends - lengths)  # each text's first word
    last = np.searchsorted(first_tok, ends)  # its separator's word
    return [packed[a:b] for a, b in zip(cut.tolist(), last.tolist())]
