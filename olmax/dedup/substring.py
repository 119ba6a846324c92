"""Repeated byte spans (ExactSubstr, Dolma 3's suffix-array step): every span of at least L bytes that
occurs more than once is removed from every document but the first (input order) that holds it.

A byte lies in a repeated span of >= L bytes exactly when it lies in an L-byte window that occurs
again, so windows give the suffix array's answer: each L-byte window inside one document gets a
64-bit rolling hash; windows are sorted by hash (stably, so input order within a hash); a window
whose hash was first seen in an earlier document is compared byte for byte with that first
occurrence (one byte per window along a run, since the previous window matched) and, when equal, its
L bytes are removed; a hash collision (different bytes) falls back to comparing the group's earlier
windows, so nothing is removed without an exact match. The removed windows of a document merge into
spans, shrunk to whole UTF-8 characters so each kept text is its input minus the spans.

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
def _spans(buf, offsets, L, sorted_hashes, order, pos, doc_of):
    nw = order.size
    rank = np.empty(nw, dtype=np.int64)
    first = np.empty(nw, dtype=np.int64)
    i = 0
    while i < nw:
        j = i + 1
        while j < nw and sorted_hashes[j] == sorted_hashes[i]:
            j += 1
        for t in range(i, j):
            rank[order[t]] = t
            first[order[t]] = order[i]
        i = j
    # candidate windows in position order; `prev_match`: the window the previous one matched (-1: none)
    span_doc = np.empty(nw, dtype=np.int64)
    span_a = np.empty(nw, dtype=np.int64)
    span_b = np.empty(nw, dtype=np.int64)
    span_kept = np.empty(nw, dtype=np.int64)
    ns = 0
    cur_doc, cur_a, cur_b, cur_kept = -1, 0, 0, -1
    prev_match = -1
    for w in range(nw):
        f = first[w]
        holder = -1
        if f != w and doc_of[f] != doc_of[w]:
            if (
                prev_match >= 0
                and w > 0
                and doc_of[w] == doc_of[w - 1]
                and pos[w] == pos[w - 1] + 1
                and f == prev_match + 1
                and pos[f] == pos[prev_match] + 1
                and doc_of[f] == doc_of[prev_match]
            ):
                same = buf[pos[w] + L - 1] == buf[pos[f] + L - 1]
            else:
                same = _equal(buf, pos[w], pos[f], L)
            if same:
                holder = f
            else:  # a hash collision: the first earlier window with these exact bytes, if any
                g = rank[f]
                while g < rank[w]:
                    c = order[g]
                    if _equal(buf, pos[w], pos[c], L):
                        if doc_of[c] != doc_of[w]:
                            holder = c
                        break
                    g += 1
        prev_match = holder
        if holder < 0:
            continue
        p = pos[w]
        if doc_of[w] == cur_doc and p <= cur_b:
            cur_b = max(cur_b, p + L)
        else:
            if cur_doc >= 0:
                span_doc[ns], span_a[ns], span_b[ns], span_kept[ns] = cur_doc, cur_a, cur_b, cur_kept
                ns += 1
            cur_doc, cur_a, cur_b, cur_kept = doc_of[w], p, p + L, doc_of[holder]
    if cur_doc >= 0:
        span_doc[ns], span_a[ns], span_b[ns], span_kept[ns] = cur_doc, cur_a, cur_b, cur_kept
        ns += 1
    # whole UTF-8 characters only: a span's ends move inwards to character starts
    k = 0
    for s in range(ns):
        a, b, d = span_a[s], span_b[s], span_doc[s]
        while a < b and _is_cont(buf[a]):
            a += 1
        while b > a and b < offsets[d + 1] and _is_cont(buf[b]):
            b -= 1
        if b > a:
            span_doc[k], span_a[k], span_b[k], span_kept[k] = d, a - offsets[d], b - offsets[d], span_kept[s]
            k += 1
    return span_doc[:k].copy(), span_a[:k].copy(), span_b[:k].copy(), span_kept[:k].copy()


def repeated_spans(data: list[bytes], min_bytes: int):
    """For documents `data` (UTF-8, input order): (doc, start, end, kept_doc) arrays of the byte spans
    to remove, in document then position order; `kept_doc` is the first document holding the span's
    first window."""
    offsets = np.zeros(len(data) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in data], out=offsets[1:])
    buf = np.frombuffer(b"".join(data), dtype=np.uint8)
    hashes, pos = _windows(buf, offsets, min_bytes)
    empty = np.zeros(0, np.int64)
    if hashes.size < 2:
        return empty, empty, empty, empty
    # only windows whose hash occurs twice can be repeats: find those hashes with one unstable sort,
    # then order just those windows stably (by hash, then position)
    twice = _repeated_values(np.sort(hashes))
    if twice.size == 0:
        return empty, empty, empty, empty
    cand = _members(hashes, twice)
    h, pos = hashes[cand], pos[cand]
    order = np.argsort(h, kind="stable")
    doc_of = (np.searchsorted(offsets, pos, side="right") - 1).astype(np.int64)
    return _spans(buf, offsets, min_bytes, h[order], order, pos, doc_of)


def cut(text_bytes: bytes, spans: list[tuple[int, int]]) -> bytes:
    """The bytes left when the (sorted, disjoint) spans are removed."""
    out, at = [], 0
    for a, b in spans:
        out.append(text_bytes[at:a])
        at = b
    out.append(text_bytes[at:])
    return b"".join(out)
