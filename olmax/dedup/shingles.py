"""The one home of the near-duplicate definition: normalized words of a text and their n-gram shingle
hashes. `data prepare --dedup minhash` shingles the input texts, `audit dedup --near` and
`audit loader --near` the texts decoded from the shards' tokens (`decoded_shingles`), so both find
the same near-duplicates of the same documents.

Normalization (text): Python's `str.lower()`, then, over the UTF-8 bytes in one compiled pass, words
are maximal runs of ASCII letters and digits and non-ASCII characters; ASCII punctuation, whitespace
and control bytes separate words, and so do U+00A0-U+00BF (NBSP, Latin-1 punctuation and signs),
U+2000-U+206F (Unicode spaces, dashes, curly quotes, ellipsis) and U+3000-U+3003 (CJK space and
stops). Digits are kept (two tables that differ only in their numbers are different documents).
A word is its FNV-1a 64-bit hash, finalized with splitmix64.

Shingles: every run of n consecutive words of a document (a document with 1 <= m < n words gives
one shingle of all m), hashed to 64 bits; each document's shingle set is sorted and unique (the set
MinHash estimates and Jaccard verification compares). Two different shingles share a hash with
probability ~2^-64 per pair.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from olmax.hashing import mix64

FNV_OFFSET = np.uint64(0xCBF29CE484222325)
FNV_PRIME = np.uint64(0x100000001B3)
NORMALIZATION = (
    "lowercased (str.lower), words = runs of ASCII letters/digits and non-ASCII characters; ASCII "
    "punctuation/whitespace, U+00A0-U+00BF, U+2000-U+206F and U+3000-U+3003 separate words; digits kept"
)


@njit(cache=True, nogil=True, inline="always")
def _separator_len(buf, i, n):
    """0 when byte i starts a word character, else the length of the separator character there."""
    c = buf[i]
    if c < 0x80:
        if (0x30 <= c <= 0x39) or (0x61 <= c <= 0x7A) or (0x41 <= c <= 0x5A):
            return 0
        return 1
    if c == 0xC2 and i + 1 < n and 0xA0 <= buf[i + 1] <= 0xBF:
        return 2
    if c == 0xE2 and i + 2 < n and (buf[i + 1] == 0x80 or buf[i + 1] == 0x81):
        return 3
    if c == 0xE3 and i + 2 < n and buf[i + 1] == 0x80 and buf[i + 2] <= 0x83:
        return 3
    return 0


@njit(cache=True, nogil=True)
def word_hashes(buf, offsets):
    """Word hashes of documents buf[offsets[d]:offsets[d+1]] (lowercased UTF-8): (hashes, per-document
    word offsets)."""
    ndocs = offsets.size - 1
    out = np.empty(max(1, buf.size // 2 + 1), dtype=np.uint64)
    woff = np.zeros(ndocs + 1, dtype=np.int64)
    nw = 0
    for d in range(ndocs):
        i, end = offsets[d], offsets[d + 1]
        h = FNV_OFFSET
        inword = False
        while i < end:
            s = _separator_len(buf, i, end)
            if s:
                if inword:
                    out[nw] = mix64(h)
                    nw += 1
                    inword = False
                    h = FNV_OFFSET
                i += s
                continue
            c = buf[i]
            if 0x41 <= c <= 0x5A:  # ASCII upper case left by a caller that did not lower()
                c += 32
            h = (h ^ np.uint64(c)) * FNV_PRIME
            inword = True
            i += 1
        if inword:
            out[nw] = mix64(h)
            nw += 1
        woff[d + 1] = nw
    return out[:nw].copy(), woff


@njit(cache=True, nogil=True)
def shingle_sets(values, offsets, n):
    """Sorted unique n-gram shingle hashes of each document's word hashes values[offsets[d]:offsets[d+1]]:
    (flat shingles, per-document offsets)."""
    ndocs = offsets.size - 1
    total = 0
    for d in range(ndocs):
        m = offsets[d + 1] - offsets[d]
        total += (m - n + 1) if m >= n else (1 if m > 0 else 0)
    out = np.empty(total, dtype=np.uint64)
    soff = np.zeros(ndocs + 1, dtype=np.int64)
    k = 0
    for d in range(ndocs):
        a, b = offsets[d], offsets[d + 1]
        m = b - a
        start = k
        if m > 0:
            count = (m - n + 1) if m >= n else 1
            width = n if m >= n else m
            for i in range(count):
                h = np.uint64(width)
                for j in range(width):
                    h = mix64(h ^ values[a + i + j]) + np.uint64(j + 1)
                out[k] = h
                k += 1
            seg = np.sort(out[start:k])
            u = start
            for i in range(seg.size):
                if i == 0 or seg[i] != seg[i - 1]:
                    out[u] = seg[i]
                    u += 1
            k = u
        soff[d + 1] = k
    return out[:k].copy(), soff


def text_shingles(texts: list[str], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique word n-gram shingles of each text (the module docstring's normalization)."""
    data = [t.lower().encode("utf-8", "surrogatepass") for t in texts]
    offsets = np.zeros(len(data) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in data], out=offsets[1:])
    buf = np.frombuffer(b"".join(data), dtype=np.uint8)
    words, woff = word_hashes(buf, offsets)
    return shingle_sets(words, woff, n)


def decoded_shingles(decode, tokens: np.ndarray, starts: np.ndarray, ends: np.ndarray, n: int):
    """`text_shingles` of the documents tokens[starts[d]:ends[d]] (EOS excluded by the caller's bounds)
    decoded to text by `decode(list_of_ids) -> str` (the tokenizer they were prepared with)."""
    texts = [decode(np.asarray(tokens[int(a) : int(b)]).tolist()) for a, b in zip(starts, ends)]
    return text_shingles(texts, n)
