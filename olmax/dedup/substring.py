"""Repeated byte spans (ExactSubstr, Dolma 3's suffix-array step): a span of at least L bytes that an
earlier document (input order) keeps in its output is cut from every later document that holds it;
each cut span names the document that keeps its bytes.

Documents are taken in input order. Each L-byte window inside one document gets a 64-bit rolling hash;
only windows whose hash occurs twice are candidates. A window of document d is cut when an earlier
document's output holds the same L bytes whole: the first such window (per hash) once its document
is finished, compared byte for byte (a hash collision cuts nothing), or the next window of the run
it continues (one byte compared). The cut windows of d merge into spans, one per run of one keeper's
text (a span overlapping the previous one starts where it ends), shrunk to whole UTF-8 characters, so
each kept text is its input minus the spans. Then d's windows that no span touches become holders
for later documents. So every cut span is text its keeper still holds, and a document keeps its own
repeats (the first holder of a span is never cut by it).

Memory: about 25 bytes per input byte of a partition (the bytes, each window's hash and start, a
sorted copy of the hashes; then as much again per window whose hash occurs twice); the caller cuts the corpus into partitions of
consecutive documents (input order) and repeats are found within a partition, as Dolma 3 ran it
per shard.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from olmax.dedup.shingles import mix64

BASE = np.uint64(0x100000001B3)


@njit(cache=True, nogil=True)
def _windows(buf, offsets, L):
    """Rolling hashes of the L-byte windows inside documents, and each window's start."""
    total = 0
    for d in range(offsets.size - 1):
        total += max(0, offsets[d + 1] - offsets[d] - L + 1)
    hashes = np.empty(total, dtype=np.uint64)
    pos = np.empty(total, dtype=np.int64)
    top = np.uint64(1)
    for _ in range(L - 1):
        top *= BASE
    w = 0
    for d in range(offsets.size - 1):
        a, b = offsets[d], offsets[d + 1]
        if b - a < L:
            continue
        h = np.uint64(0)
        for i in range(a, a + L):
            h = h * BASE + np.uint64(buf[i] + 1)
        hashes[w], pos[w] = h, a
        w += 1
        for p in range(a + 1, b - L + 1):
            h = (h - np.uint64(buf[p - 1] + 1) * top) * BASE + np.uint64(buf[p + L - 1] + 1)
            hashes[w], pos[w] = h, p
            w += 1
    return hashes, pos


@njit(cache=True, nogil=True)
def _repeated_values(s):
    """The values a sorted array holds more than once, each once."""
    out = np.empty(s.size // 2 + 1, dtype=s.dtype)
    n = 0
    for i in range(1, s.size):
        if s[i] == s[i - 1] and (n == 0 or out[n - 1] != s[i]):
            out[n] = s[i]
            n += 1
    return out[:n].copy()


@njit(cache=True, nogil=True)
def _members(hashes, keys):
    """Indices i (ascending) with hashes[i] in `keys` (an open-addressing set: a sorted-array search
    per window costs a cache miss per step)."""
    size = 1
    while size < 2 * keys.size:
        size *= 2
    mask = np.uint64(size - 1)
    table = np.zeros(size, dtype=np.uint64)
    used = np.zeros(size, dtype=np.bool_)
    for k in keys:
        t = mix64(k) & mask
        while used[t] and table[t] != k:
            t = (t + np.uint64(1)) & mask
        table[t], used[t] = k, True
    out = np.empty(hashes.size, dtype=np.int64)
    n = 0
    for i in range(hashes.size):
        h = hashes[i]
        t = mix64(h) & mask
        while used[t]:
            if table[t] == h:
                out[n] = i
                n += 1
                break
            t = (t + np.uint64(1)) & mask
    return out[:n].copy()


@njit(cache=True, nogil=True)
def _equal(buf, x, y, L):
    for i in range(L):
        if buf[x + i] != buf[y + i]:
            return False
    return True


@njit(cache=True, nogil=True)
def _is_cont(c):
    return (c & 0xC0) == 0x80


@njit(cache=True, nogil=True)
def _pieces(buf, offsets, L, pos, doc_of, grp, ngroups):
    """The documents in input order, each against the windows that earlier documents kept whole: (doc,
    start, end, keeper doc) of the pieces to cut, start and end relative to the document."""
    nw = pos.size
    holder = np.full(ngroups, -1, dtype=np.int64)  # per hash: the first window an earlier output holds
    uncut = np.zeros(nw, dtype=np.bool_)
    p_doc = np.empty(nw, dtype=np.int64)
    p_a = np.empty(nw, dtype=np.int64)
    p_b = np.empty(nw, dtype=np.int64)
    p_kept = np.empty(nw, dtype=np.int64)
    n = 0
    i = 0
    while i < nw:
        d = doc_of[i]
        j = i
        while j < nw and doc_of[j] == d:
            j += 1
        first = n
        prev = -1  # the window the previous window matched (-1: none)
        for w in range(i, j):
            h = -1
            if prev >= 0 and pos[w] == pos[w - 1] + 1 and prev + 1 < nw:
                c = prev + 1  # the holder's next window, if it goes on with the same bytes, uncut
                if (
                    doc_of[c] == doc_of[prev]
                    and pos[c] == pos[prev] + 1
                    and uncut[c]
                    and grp[c] == grp[w]
                    and buf[pos[c] + L - 1] == buf[pos[w] + L - 1]
                ):
                    h = c
            if h < 0:
                g = holder[grp[w]]
                if g >= 0 and _equal(buf, pos[w], pos[g], L):
                    h = g  # else a hash collision (different bytes): nothing is cut
            if h >= 0:
                p, k = pos[w], doc_of[h]
                goes_on = (
                    prev >= 0
                    and pos[w] == pos[w - 1] + 1
                    and doc_of[h] == doc_of[prev]
                    and pos[h] == pos[prev] + 1
                )
                if n > first and goes_on and p_kept[n - 1] == k and p <= p_b[n - 1]:
                    p_b[n - 1] = p + L  # the same run of the keeper's text goes on
                else:
                    start = max(p, p_b[n - 1]) if n > first else p
                    p_doc[n], p_a[n], p_b[n], p_kept[n] = d, start, p + L, k
                    n += 1
            prev = h
        # whole UTF-8 characters only: a piece's ends move inwards to character starts
        m = first
        for s in range(first, n):
            a, b = p_a[s], p_b[s]
            while a < b and _is_cont(buf[a]):
                a += 1
            while b > a and b < offsets[d + 1] and _is_cont(buf[b]):
                b -= 1
            if b > a:
                p_doc[m], p_a[m], p_b[m], p_kept[m] = d, a, b, p_kept[s]
                m += 1
        n = m
        # this document's windows that its output holds whole become holders for later documents
        s = first
        for u in range(i, j):
            while s < n and p_b[s] <= pos[u]:
                s += 1
            uncut[u] = not (s < n and p_a[s] < pos[u] + L)
            if uncut[u] and holder[grp[u]] < 0:
                holder[grp[u]] = u
        for s in range(first, n):
            p_a[s] -= offsets[d]
            p_b[s] -= offsets[d]
        i = j
    return p_doc[:n].copy(), p_a[:n].copy(), p_b[:n].copy(), p_kept[:n].copy()


def repeated_spans(data: list[bytes], min_bytes: int):
    """For documents `data` (UTF-8, input order): (doc, start, end, kept_doc) arrays of the byte spans
    to remove, in document then position order; the span's bytes are a run of `kept_doc`'s text that
    its output keeps whole (adjacent spans may have different keepers)."""
    offsets = np.zeros(len(data) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in data], out=offsets[1:])
    buf = np.frombuffer(b"".join(data), dtype=np.uint8)
    hashes, pos = _windows(buf, offsets, min_bytes)
    empty = np.zeros(0, np.int64)
    if hashes.size < 2:
        return empty, empty, empty, empty
    # only windows whose hash occurs twice can be repeats: find those hashes with one unstable sort
    twice = _repeated_values(np.sort(hashes))
    if twice.size == 0:
        return empty, empty, empty, empty
    cand = _members(hashes, twice)  # ascending: the windows in position order
    uniq, grp = np.unique(hashes[cand], return_inverse=True)
    pos = pos[cand]
    doc_of = (np.searchsorted(offsets, pos, side="right") - 1).astype(np.int64)
    return _pieces(buf, offsets, min_bytes, pos, doc_of, grp.astype(np.int64), uniq.size)


def cut(text_bytes: bytes, spans: list[tuple[int, int]]) -> bytes:
    """The bytes left when the (sorted, disjoint) spans are removed."""
    out, at = [], 0
    for a, b in spans:
        out.append(text_bytes[at:a])
        at = b
    out.append(text_bytes[at:])
    return b"".join(out)
