"""MinHash LSH near-duplicates with verification (Dolma 3's settings by default: word 5-grams, 26 bands
x 11 rows, pairs kept at true Jaccard >= 0.8).

Signatures: hash k of a shingle x (its low 32 bits) is the high 32 bits of a_k * x + b_k (mod 2^64,
multiply-add-shift; a_k odd 64-bit, b_k < 2^32, drawn once from a fixed seed), the signature the minimum over the document's shingles. LSH: the
rows of each band are hashed to one 64-bit bucket key; documents sharing a key in any band are
candidates. In a bucket (members in input order) every member is paired with each of the first
`ANCHORS` members before it (all pairs in buckets of up to ANCHORS + 1), so a bucket of boilerplate
pages costs O(members) pairs, not O(members^2). Every candidate pair is verified on the documents'
shingle sets (exact Jaccard); clusters are the connected components of verified pairs only, so
unverified bucket collisions never chain documents together.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from olmax.dedup.components import min_labels
from olmax.dedup.params import MinHashParams
from olmax.dedup.shingles import mix64

ANCHORS = 32
SEED = 0x5EED_D01A3


def coefficients(k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(low and high 32 bits of a, b): a odd 64-bit, b < 2^32 (so a_lo * x + b fits 64 bits)."""
    rng = np.random.default_rng(SEED)
    a = rng.integers(0, 1 << 63, size=k, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    b = rng.integers(0, 1 << 32, size=k, dtype=np.uint64)
    return (a & np.uint64(0xFFFFFFFF)).astype(np.uint32), (a >> np.uint64(32)).astype(np.uint32), b


@njit(cache=True, nogil=True)
def _signatures(sh, off, a_lo, a_hi, b):
    ndocs, k = off.size - 1, a_lo.size
    sig = np.empty((ndocs, k), dtype=np.uint32)
    s32 = np.uint64(32)
    m = np.empty(k, dtype=np.uint32)
    for d in range(ndocs):
        m[:] = np.uint32(0xFFFFFFFF)
        for i in range(off[d], off[d + 1]):
            x = sh[i] & np.uint64(0xFFFFFFFF)  # the shingle's low 32 bits
            x32 = np.uint32(x)
            for j in range(k):
                # (a x + b) >> 32 mod 2^32 = a_hi x + ((a_lo x + b) >> 32) mod 2^32: 32-bit multiplies
                # only, which the compiler vectorizes over the k hashes
                v = np.uint32(np.uint32(a_hi[j] * x32) + np.uint32((np.uint64(a_lo[j]) * x + b[j]) >> s32))
                m[j] = min(m[j], v)
        sig[d, :] = m
    return sig


def signatures(shingles: np.ndarray, offsets: np.ndarray, params: MinHashParams) -> np.ndarray:
    """(documents, bands * rows) uint32 MinHash signatures of the shingle sets."""
    return _signatures(shingles, offsets, *coefficients(params.hashes))


@njit(cache=True, nogil=True)
def _band_keys(sig, band, rows):
    keys = np.empty(sig.shape[0], dtype=np.uint64)
    for d in range(sig.shape[0]):
        h = np.uint64(band + 1)
        for r in range(rows):
            h = mix64(h ^ np.uint64(sig[d, band * rows + r]))
        keys[d] = h
    return keys


@njit(cache=True, nogil=True)
def _bucket_pairs(sorted_keys, members, anchors):
    n = sorted_keys.size
    count = 0
    i = 0
    while i < n:
        j = i + 1
        while j < n and sorted_keys[j] == sorted_keys[i]:
            j += 1
        m = j - i
        for t in range(1, m):
            count += min(t, anchors)
        i = j
    a = np.empty(count, dtype=np.int64)
    b = np.empty(count, dtype=np.int64)
    c = 0
    i = 0
    while i < n:
        j = i + 1
        while j < n and sorted_keys[j] == sorted_keys[i]:
            j += 1
        for t in range(i + 1, j):
            for s in range(i, min(t, i + anchors)):
                a[c], b[c] = members[s], members[t]
                c += 1
        i = j
    return a, b


def band_keys(sig: np.ndarray, params: MinHashParams) -> np.ndarray:
    """(documents, bands) uint64 bucket keys of the signatures (what `candidate_pairs` groups by)."""
    sig = np.ascontiguousarray(sig)
    out = np.empty((sig.shape[0], params.bands), dtype=np.uint64)
    for band in range(params.bands):
        out[:, band] = _band_keys(sig, band, params.rows)
    return out


def bucket_pairs(members: np.ndarray) -> np.ndarray:
    """The candidate pairs of one bucket, its members (document numbers) in input order: each member
    with the first `ANCHORS` before it, as `candidate_pairs` pairs them; an (n, 2) int64 array."""
    members = np.asarray(members, np.int64)
    a, b = _bucket_pairs(np.zeros(members.size, np.uint64), members, ANCHORS)
    return np.stack([a, b], axis=1)


def band_pairs(keys: np.ndarray, members: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One band's candidate pairs (a[i], b[i]) of `members` (document numbers, ascending) given their
    bucket keys in that band: each member with the first `ANCHORS` before it in its bucket."""
    order = np.argsort(keys, kind="stable")  # stable: members of a bucket stay in input order
    return _bucket_pairs(keys[order], np.asarray(members, np.int64)[order], ANCHORS)


def candidate_pairs(sig: np.ndarray, params: MinHashParams, eligible: np.ndarray) -> np.ndarray:
    """Unique candidate pairs (i < j) of the eligible documents, as an (n, 2) int64 array in order."""
    idx = np.flatnonzero(eligible)
    if idx.size < 2:
        return np.zeros((0, 2), np.int64)
    sub = np.ascontiguousarray(sig[idx])
    parts = []
    for band in range(params.bands):
        a, b = band_pairs(_band_keys(sub, band, params.rows), idx)
        if a.size:
            parts.append(a * np.int64(sig.shape[0]) + b)
    if not parts:
        return np.zeros((0, 2), np.int64)
    codes = np.unique(np.concatenate(parts))
    return np.stack([codes // sig.shape[0], codes % sig.shape[0]], axis=1)


@njit(cache=True, nogil=True)
def _jaccard(sh, off, a, b):
    out = np.empty(a.size, dtype=np.float64)
    for e in range(a.size):
        i, iend = off[a[e]], off[a[e] + 1]
        j, jend = off[b[e]], off[b[e] + 1]
        na, nb = iend - i, jend - j
        inter = 0
        while i < iend and j < jend:
            x, y = sh[i], sh[j]
            if x == y:
                inter += 1
                i += 1
                j += 1
            elif x < y:
                i += 1
            else:
                j += 1
        union = na + nb - inter
        out[e] = inter / union if union else 0.0
    return out


def jaccard(shingles: np.ndarray, offsets: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact Jaccard similarity of the shingle sets of documents a[i] and b[i]."""
    return _jaccard(shingles, offsets, np.asarray(a, np.int64), np.asarray(b, np.int64))


@dataclass
class Clusters:
    """Per document: the document kept for it (itself when not a near-duplicate) and, for a removed
    one, the exact Jaccard with the kept one; the verified edges behind them."""

    keep: np.ndarray
    jaccard: np.ndarray
    edges: np.ndarray
    candidates: int

    @property
    def removed(self) -> np.ndarray:
        return np.flatnonzero(self.keep != np.arange(self.keep.size))


def cluster(
    shingles: np.ndarray, offsets: np.ndarray, sig: np.ndarray, params: MinHashParams, eligible=None
) -> Clusters:
    """Near-duplicate clusters: connected components of candidate pairs verified at Jaccard >=
    threshold, each kept by its first document (smallest index)."""
    n = offsets.size - 1
    if eligible is None:
        eligible = np.ones(n, bool)
    eligible = eligible & (np.diff(offsets) > 0)  # no shingles: nothing to compare
    pairs = candidate_pairs(sig, params, eligible)
    sim = jaccard(shingles, offsets, pairs[:, 0], pairs[:, 1])
    return components(shingles, offsets, pairs[sim >= params.threshold], int(pairs.shape[0]))


def components(
    shingles: np.ndarray | None, offsets: np.ndarray, edges: np.ndarray, candidates: int, similarity=None
) -> Clusters:
    """The clusters of the verified edges (pairs i < j, in code order): each component kept by its first
    document, a removed one's exact Jaccard with it (`similarity(a, b)`, default `jaccard` on `shingles`)."""
    n = offsets.size - 1
    keep = min_labels(n, edges[:, 0], edges[:, 1])
    j = np.ones(n, dtype=np.float64)
    gone = np.flatnonzero(keep != np.arange(n))
    sim = similarity or (lambda a, b: jaccard(shingles, offsets, a, b))
    j[gone] = sim(keep[gone], gone)
    return Clusters(keep, j, edges, candidates)
