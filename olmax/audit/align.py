"""The leak audit's verification, compiled (numba): where an item's hits place it in a document
(`chains`), how much of it the words there hold (`lcs_length`), whether a number or an operator of it
was replaced there (`lcs_conflicts`), the exact contiguous match very short items need
(`contains_run`), the few word edits short ones may have (`edit_distance`), and all of them over a
file's candidates in one call (`verify_candidates`). Items and regions are arrays of packed word
values in the verification's reading (normalize.py: numbers and operators flagged PROTECTED).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from olmax.audit.normalize import PROTECTED, as_token_ids, words_of

_M1 = np.uint64(0x5555555555555555)
_M2 = np.uint64(0x3333333333333333)
_M4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_H01 = np.uint64(0x0101010101010101)


ALIGNED, EXACT, EDITS = 0, 1, 2  # a candidate's rule: aligned fraction, exact run, few word edits
PROTECTED_EDIT = 1 << 20  # an edit that changes a protected word: never one of the few allowed
# Conflicts are looked for within stretches of the alignment whose gaps hold at most this many words on
# either side (a longer gap is the alignment reaching into the text around a partial copy).
MAX_GAP = 6
EDGE = 2  # unit words past the aligned stretch that are still compared with the document's


def verify_candidates(
    tokens: np.ndarray,
    tables: tuple,
    doc_start: np.ndarray,
    doc_end: np.ndarray,
    hit_ptr: np.ndarray,
    q: np.ndarray,
    pos: np.ndarray,
    items: np.ndarray,
    item_ptr: np.ndarray,
    item_of: np.ndarray,
    n: np.ndarray,
    mode: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(score, token start, token end, conflicts, edits) of each candidate of one file: candidate g's
    hits are q[hit_ptr[g]:hit_ptr[g + 1]] (item word positions) and pos[...] (token offsets), its
    document is tokens[doc_start[g]:doc_end[g]], its item's words items[item_ptr[i]:item_ptr[i + 1]]
    for i = item_of[g] (the verification's reading: numbers and operators carry
    normalize.PROTECTED), `n` its window and `mode` its rule. `tables` is that reading's
    `WordTables.kernel_tables`.

    Each candidate: the document's words around the hits (the item's words not covered by them on
    either side, plus slack, at 4 tokens a word; doubled while a placement runs past the tokens read,
    up to 16 times), the chains of hits (`chains`) and around each its region (room for the item's
    words outside the chain, half again for inserted words, and slack). Per region, by mode:
    ALIGNED: the aligned fraction of the item's words (longest common subsequence) and, when the item
    has protected words, the conflicts of one longest alignment (`lcs_conflicts`); EXACT: 1.0 for an
    exact contiguous match, else at most 0.999; EDITS: the fewest word edits that turn the item into
    a run of the region (`edit_distance`, an edit of a protected word counting PROTECTED_EDIT) and
    the aligned fraction. The best region (fewest conflicts and edits, then score) is reported; the
    span runs from the chain's first word to the word after its last window."""
    # a whole file: shard dtypes as they are (no copy), anything else through as_token_ids
    tokens = np.asarray(tokens)
    tokens = (
        tokens
        if tokens.dtype in (np.uint16, np.uint32) and tokens.flags.c_contiguous
        else as_token_ids(tokens)
    )
    return _verify(
        tokens,
        tables,
        doc_start.astype(np.int64),
        doc_end.astype(np.int64),
        hit_ptr.astype(np.int64),
        q.astype(np.int64),
        pos.astype(np.int64),
        items.astype(np.uint64),
        item_ptr.astype(np.int64),
        item_of.astype(np.int64),
        n.astype(np.int64),
        mode.astype(np.int64),
    )


@njit(cache=True, nogil=True)
def _verify(tokens, tables, doc_start, doc_end, hit_ptr, q_all, pos_all, items, item_ptr, item_of, n, mode):
    m = doc_start.size
    scores = np.zeros(m, np.float64)
    t0s = np.zeros(m, np.int64)
    t1s = np.zeros(m, np.int64)
    conflicts = np.zeros(m, np.int64)
    edits = np.zeros(m, np.int64)
    for g in range(m):
        q = q_all[hit_ptr[g] : hit_ptr[g + 1]]
        pos = pos_all[hit_ptr[g] : hit_ptr[g + 1]]
        item = items[item_ptr[item_of[g]] : item_ptr[item_of[g] + 1]]
        k = item.size
        has_protected = False
        for w in item:
            has_protected |= (w & _PROT) != np.uint64(0)
        ds, de = doc_start[g], doc_end[g]
        slack = 3 + k // 10
        before = 4 * (q.min() + slack) + 16
        after = 4 * (k - q.max() + slack) + 16
        p0, p1 = pos.min(), pos.max()
        grow = 1
        while True:
            a, b = max(ds, p0 - grow * before), min(de, p1 + grow * after)
            vals, first_tok, _ = words_of(tokens[a:b], tables, True)
            c = np.searchsorted(first_tok, pos - a)  # word index of each hit's first word
            np.minimum(c, max(0, vals.size - 1), c)
            found = _chains(q, c, 4)  # each in document order: c rises along it
            r0s = np.empty(found.shape[0], np.int64)
            r1s = np.empty(found.shape[0], np.int64)
            past = False
            for j in range(found.shape[0]):
                s0, s1 = found[j, 0], found[j, found.shape[1] - 1]
                qa, qb = q[s0], q[s1]
                # room for words inserted (markup: its operators are words in this reading)
                r0s[j] = c[s0] - 2 * qa - slack
                r1s[j] = c[s1] + 2 * (k - qb) + slack
                past |= (r0s[j] < 0 and a > ds) or (r1s[j] > vals.size and b < de)
            if grow >= 16 or not past:
                break
            grow *= 2
        best, bconf, bedit, bs0, bs1 = -1.0, 1 << 40, 1 << 40, 0, 0
        for j in range(found.shape[0]):
            region = vals[max(0, r0s[j]) : min(vals.size, r1s[j])]
            conf, ed = 0, 0
            if mode[g] == EXACT:
                score = 1.0 if _contains(region, item) else min(0.999, _lcs(item, region) / k)
            elif mode[g] == EDITS:
                ed = _edits(item, region)
                score = min(0.999, _lcs(item, region) / k) if ed else 1.0
            else:
                score = _lcs(item, region) / k
                if has_protected:
                    conf = _lcs_conflicts(item, region)
            better = conf < bconf or (conf == bconf and (ed < bedit or (ed == bedit and score > best)))
            if better:
                best, bconf, bedit, bs0, bs1 = score, conf, ed, found[j, 0], found[j, found.shape[1] - 1]
        last = c[bs1] + n[g]  # the word after the last matched window
        scores[g] = best
        conflicts[g] = bconf
        edits[g] = bedit
        t0s[g] = a + first_tok[c[bs0]] if first_tok.size else a
        t1s[g] = a + first_tok[last] if last < first_tok.size else b
    return scores, t0s, t1s, conflicts, edits


_PROT = PROTECTED


def edit_distance(item: np.ndarray, region: np.ndarray) -> int:
    """The fewest word edits (a substitution, a dropped or an inserted word: 1 each) that turn `item`
    into a contiguous run of `region`; an edit that drops, replaces or inserts a protected word (a
    number or an operator: normalize.PROTECTED) counts PROTECTED_EDIT."""
    return int(
        _edits(np.ascontiguousarray(item, dtype=np.uint64), np.ascontiguousarray(region, dtype=np.uint64))
    )


def lcs_conflicts(item: np.ndarray, region: np.ndarray) -> int:
    """Numbers and operators replaced by others (a sign flipped, another value): in the main stretch of
    one longest common subsequence of the two (the most aligned words with no gap over MAX_GAP words
    on either side), the protected words of the item and of the region aligned on their own, those
    left over on both sides counting (min of the two leftovers); and when at most EDGE item words lie
    past the stretch at an end, each of them that is protected against the region's word at the same
    offset, also protected and different."""
    return int(
        _lcs_conflicts(
            np.ascontiguousarray(item, dtype=np.uint64), np.ascontiguousarray(region, dtype=np.uint64)
        )
    )


@njit(cache=True, nogil=True)
def _edits(item, region):
    """Semi-global edit distance (the region's words before and after the run are free), one column of
    the table at a time."""
    k, r = item.size, region.size
    big = PROTECTED_EDIT
    prev = np.empty(k + 1, np.int64)
    cur = np.empty(k + 1, np.int64)
    prev[0] = 0
    for i in range(1, k + 1):
        prev[i] = prev[i - 1] + (big if item[i - 1] & _PROT else 1)
    best = prev[k]
    for j in range(1, r + 1):
        w = region[j - 1]
        wp = (w & _PROT) != np.uint64(0)
        ins = big if wp else 1
        cur[0] = 0
        for i in range(1, k + 1):
            x = item[i - 1]
            xp = (x & _PROT) != np.uint64(0)
            if x == w:
                d = prev[i - 1]
            else:
                d = prev[i - 1] + (big if xp or wp else 1)
            d = min(d, cur[i - 1] + (big if xp else 1), prev[i] + ins)
            cur[i] = d
        best = min(best, cur[k])
        prev, cur = cur, prev
    return best


@njit(cache=True, nogil=True)
def _lcs_conflicts(item, region):
    k, r = item.size, region.size
    dp = np.zeros((k + 1, r + 1), np.int32)
    for i in range(1, k + 1):
        x = item[i - 1]
        for j in range(1, r + 1):
            if x == region[j - 1]:
                dp[i, j] = dp[i - 1, j - 1] + 1
            else:
                dp[i, j] = max(dp[i - 1, j], dp[i, j - 1])
    # one longest alignment, as (item, region) index pairs in order
    pi = np.empty(dp[k, r], np.int64)
    pj = np.empty(dp[k, r], np.int64)
    i, j, at = k, r, dp[k, r]
    while i > 0 and j > 0:
        if item[i - 1] == region[j - 1] and dp[i, j] == dp[i - 1, j - 1] + 1:
            at -= 1
            pi[at], pj[at] = i - 1, j - 1
            i -= 1
            j -= 1
        elif dp[i - 1, j] >= dp[i, j - 1]:
            i -= 1
        else:
            j -= 1
    # the alignment's main stretch: the most aligned pairs with no gap over MAX_GAP words on either side
    if pi.size == 0:
        return 0
    b0, b1, s0 = 0, 0, 0
    for e in range(pi.size):
        if e + 1 < pi.size and pi[e + 1] - pi[e] - 1 <= MAX_GAP and pj[e + 1] - pj[e] - 1 <= MAX_GAP:
            continue
        if e - s0 > b1 - b0:
            b0, b1 = s0, e
        s0 = e + 1
    # inside it, the protected words of both sides that an alignment of the protected words alone
    # leaves over; at the unit's ends, when at most EDGE words of it lie outside the stretch, those
    # words against the document's next (previous) ones, offset by offset
    conflicts = _protected_left(item[pi[b0] : pi[b1] + 1], region[pj[b0] : pj[b1] + 1])
    left = k - 1 - pi[b1]
    if 0 < left <= EDGE:
        for t in range(1, min(left, r - 1 - pj[b1]) + 1):
            x, y = item[pi[b1] + t], region[pj[b1] + t]
            conflicts += x != y and (x & _PROT) != np.uint64(0) and (y & _PROT) != np.uint64(0)
    left = pi[b0]
    if 0 < left <= EDGE:
        for t in range(1, min(left, pj[b0]) + 1):
            x, y = item[pi[b0] - t], region[pj[b0] - t]
            conflicts += x != y and (x & _PROT) != np.uint64(0) and (y & _PROT) != np.uint64(0)
    return conflicts


@njit(cache=True, nogil=True)
def _protected_left(a, b):
    """min(protected words of a, of b) minus their longest common subsequence: the replaced ones."""
    pa = a[(a & _PROT) != np.uint64(0)]
    pb = b[(b & _PROT) != np.uint64(0)]
    if pa.size == 0 or pb.size == 0:
        return 0
    row = np.zeros(pb.size + 1, np.int64)
    for x in pa:
        diag = 0
        for j in range(1, pb.size + 1):
            keep = row[j]
            row[j] = diag + 1 if x == pb[j - 1] else max(row[j], row[j - 1])
            diag = keep
    return min(pa.size, pb.size) - row[pb.size]


def lcs_length(item: np.ndarray, region: np.ndarray) -> int:
    """Length of the longest common subsequence of two word sequences."""
    return int(
        _lcs(np.ascontiguousarray(item, dtype=np.uint64), np.ascontiguousarray(region, dtype=np.uint64))
    )


def contains_run(region: np.ndarray, item: np.ndarray) -> bool:
    """Whether `item`'s words occur contiguously, in order, in `region`."""
    return bool(
        _contains(np.ascontiguousarray(region, dtype=np.uint64), np.ascontiguousarray(item, dtype=np.uint64))
    )


def chains(q: np.ndarray, c: np.ndarray, max_chains: int = 4) -> list[np.ndarray]:
    """Indices of the longest chains of hits that keep the item's order in the document: item positions
    `q` and document word positions `c` both increasing, with at most 3 document words per item word
    (+ 24) between consecutive hits, so inserted words (markup, a sentence added) stay in one placement
    while a second copy or a stray match elsewhere does not join it. Each sorted by document position;
    several when chains tie (an item that repeats a phrase: the same hits read as either occurrence),
    the first `max_chains` of them by where they end. Among predecessors of equal chain length a hit
    follows the one on the nearest diagonal (c - q)."""
    q = np.ascontiguousarray(q, dtype=np.int64)
    c = np.ascontiguousarray(c, dtype=np.int64)
    if q.size == 0:
        return []
    return list(_chains(q, c, max_chains))


@njit(cache=True, nogil=True)
def _lcs(item, region):
    """Bit-parallel LCS (Allison-Dix / Hyyro) over the item, in words of 64 bits: per region word w
    with item positions M (a bit mask), V <- (V + (V & M)) | (V & ~M); the LCS is the zero bits of V."""
    k = item.size
    if k == 0:
        return 0
    nwords = (k + 63) // 64
    # the item's distinct words in an open-addressing table (a power of two, at most half full; word
    # values are uniform hashes, so their low bits index it), and the bit mask of each one's positions
    size = 2
    while size < 2 * k:
        size *= 2
    slot_mask = np.uint64(size - 1)
    keys = np.empty(size, np.uint64)
    row = np.full(size, -1, np.int64)
    masks = np.zeros((k, nwords), np.uint64)
    rows = 0
    for i in range(k):
        h = item[i] & slot_mask
        while row[h] >= 0 and keys[h] != item[i]:
            h = (h + np.uint64(1)) & slot_mask
        if row[h] < 0:
            keys[h] = item[i]
            row[h] = rows
            rows += 1
        masks[row[h], i >> 6] |= np.uint64(1) << np.uint64(i & 63)
    v = np.full(nwords, np.uint64(0xFFFFFFFFFFFFFFFF))
    top_bits = k - 64 * (nwords - 1)
    top_mask = (
        np.uint64(0xFFFFFFFFFFFFFFFF)
        if top_bits == 64
        else (np.uint64(1) << np.uint64(top_bits)) - np.uint64(1)
    )
    v[nwords - 1] = top_mask
    for w in region:
        h = w & slot_mask
        while row[h] >= 0 and keys[h] != w:
            h = (h + np.uint64(1)) & slot_mask
        at = row[h]
        if at < 0:
            continue
        carry = np.uint64(0)
        for b in range(nwords):
            vb = v[b]
            ub = vb & masks[at, b]
            s = vb + ub
            c1 = np.uint64(1) if s < vb else np.uint64(0)
            s2 = s + carry
            c2 = np.uint64(1) if s2 < s else np.uint64(0)
            carry = c1 | c2
            v[b] = s2 | (vb & ~masks[at, b])
        v[nwords - 1] &= top_mask
    ones = 0
    for b in range(nwords):
        x = v[b]
        x = x - ((x >> np.uint64(1)) & _M1)
        x = (x & _M2) + ((x >> np.uint64(2)) & _M2)
        x = (x + (x >> np.uint64(4))) & _M4
        ones += np.int64((x * _H01) >> np.uint64(56))
    return k - ones


@njit(cache=True, nogil=True)
def _contains(region, item):
    k = item.size
    if k == 0 or region.size < k:
        return False
    for i in range(region.size - k + 1):
        j = 0
        while j < k and region[i + j] == item[j]:
            j += 1
        if j == k:
            return True
    return False


@njit(cache=True, nogil=True)
def _may_follow(dq, dc):
    return dq > 0 and dc > 0 and dc <= 3 * dq + 24


@njit(cache=True, nogil=True)
def _chains(q, c, max_chains):
    """`chains` as a (chains, length) array of indices into q and c."""
    h = q.size
    # hits by document position, then item position, ties in input order: an insertion sort (the hits
    # come nearly in order, so it does little work)
    order = np.arange(h)
    for i in range(1, h):
        o = order[i]
        j = i - 1
        while j >= 0 and (c[order[j]] > c[o] or (c[order[j]] == c[o] and q[order[j]] > q[o])):
            order[j + 1] = order[j]
            j -= 1
        order[j + 1] = o
    qs = q[order]
    cs = c[order]
    best = np.ones(h, np.int64)
    prev = np.full(h, -1, np.int64)
    top, n_top = 1, 1
    for i in range(1, h):
        # while hit i - 1 ends the only longest chain so far and hit i may follow it, every other
        # predecessor has a shorter chain: i - 1 is the one the search would pick
        if n_top == 1 and best[i - 1] == top and _may_follow(qs[i] - qs[i - 1], cs[i] - cs[i - 1]):
            top += 1
            best[i], prev[i] = top, i - 1
            continue
        pick, score = -1, -1
        for j in range(i):
            if _may_follow(qs[i] - qs[j], cs[i] - cs[j]):
                drift = min(abs((cs[i] - qs[i]) - (cs[j] - qs[j])), 4095)
                sj = best[j] * 4096 - drift
                if sj > score:
                    pick, score = j, sj
        if pick >= 0:
            best[i], prev[i] = best[pick] + 1, pick
        if best[i] > top:
            top, n_top = best[i], 1
        elif best[i] == top:
            n_top += 1
    n = min(max_chains, n_top)
    out = np.empty((n, top), np.int64)
    row = 0
    for end in range(h):
        if best[end] == top and row < n:
            i, at = end, top - 1
            while i >= 0:
                out[row, at] = order[i]
                i = prev[i]
                at -= 1
            row += 1
    return out
