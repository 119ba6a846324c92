"""The leak audit's verification, compiled (numba): where an item's hits place it in a document
(`chains`), how much of it the words there hold (`lcs_length`), the exact contiguous match short items
need (`contains_run`), and all three over a file's candidates in one call (`verify_candidates`). Items
and regions are arrays of packed word values (normalize.py).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from olmax.audit.leaks.normalize import KernelTables, as_token_ids, words_of
from olmax.audit.leaks.weights import edit_cost, key_term_replaced

_M1 = np.uint64(0x5555555555555555)
_M2 = np.uint64(0x3333333333333333)
_M4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_H01 = np.uint64(0x0101010101010101)


class CandidateArrays(NamedTuple):
    """One training file's copy candidates as flat arrays, what `verify_candidates` aligns: candidate g's
    hits are q[hit_ptr[g]:hit_ptr[g + 1]] (item word positions) and pos[...] (token offsets), its
    document is tokens[doc_start[g]:doc_end[g]], its item's words items[item_ptr[i]:item_ptr[i + 1]]
    for i = item_of[g], n[g] its window and short[g] whether it needs a whole-item match. One argument
    (numba reads a NamedTuple of arrays in nopython mode); `verify_candidates` casts each field to the
    dtype noted beside it."""

    doc_start: np.ndarray  # int64 per candidate
    doc_end: np.ndarray  # int64 per candidate
    hit_ptr: np.ndarray  # int64, one more than candidates
    q: np.ndarray  # int64 per hit
    pos: np.ndarray  # int64 per hit
    items: np.ndarray  # uint64: the items' words, concatenated
    item_ptr: np.ndarray  # int64, one more than items
    item_of: np.ndarray  # int64 per candidate
    n: np.ndarray  # int64 per candidate
    short: np.ndarray  # bool per candidate


def verify_candidates(
    tokens: np.ndarray, tables: KernelTables, cands: CandidateArrays
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(score, token start, token end) of each candidate of one file (`cands`, as CandidateArrays
    describes them; any integer dtypes). `tables` is `WordTables.kernel_tables`.

    Each candidate: the document's words around the hits (the item's words not covered by them on
    either side, plus slack, at 4 tokens a word; doubled while a placement runs past the tokens read,
    up to 16 times), the chains of hits (`chains`) and around each its region (room for the item's
    words outside the chain, half again for inserted words, and slack); the score is the best
    region's aligned fraction of the item's words (a short item scores 1.0 only for an exact
    contiguous match, else at most 0.999), the span runs from the chain's first word to the word after
    its last window."""
    # a whole file: shard dtypes as they are (no copy), anything else through as_token_ids
    tokens = np.asarray(tokens)
    tokens = (
        tokens
        if tokens.dtype in (np.uint16, np.uint32) and tokens.flags.c_contiguous
        else as_token_ids(tokens)
    )
    # one dtype per field, so the compiled pass is built once whatever the caller's arrays
    typed = CandidateArrays(
        cands.doc_start.astype(np.int64),
        cands.doc_end.astype(np.int64),
        cands.hit_ptr.astype(np.int64),
        cands.q.astype(np.int64),
        cands.pos.astype(np.int64),
        cands.items.astype(np.uint64),
        cands.item_ptr.astype(np.int64),
        cands.item_of.astype(np.int64),
        cands.n.astype(np.int64),
        cands.short.astype(np.bool_),
    )
    return _verify(tokens, tables, typed)


@njit(cache=True, nogil=True)
def _verify(tokens, tables, cands):
    doc_start, doc_end, hit_ptr, q_all, pos_all, items, item_ptr, item_of, n, short = cands
    m = doc_start.size
    scores = np.zeros(m, np.float64)
    t0s = np.zeros(m, np.int64)
    t1s = np.zeros(m, np.int64)
    for g in range(m):
        q = q_all[hit_ptr[g] : hit_ptr[g + 1]]
        pos = pos_all[hit_ptr[g] : hit_ptr[g + 1]]
        item = items[item_ptr[item_of[g]] : item_ptr[item_of[g] + 1]]
        k = item.size
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
                r0s[j] = c[s0] - qa - qa // 2 - slack  # room for words inserted before the first hit
                r1s[j] = c[s1] + (k - qb) + (k - qb) // 2 + slack
                past |= (r0s[j] < 0 and a > ds) or (r1s[j] > vals.size and b < de)
            if grow >= 16 or not past:
                break
            grow *= 2
        best, bs0, bs1 = -1.0, 0, 0
        for j in range(found.shape[0]):
            region = vals[max(0, r0s[j]) : min(vals.size, r1s[j])]
            if short[g]:
                score = 1.0 if _contains(region, item) else min(0.999, _lcs(item, region) / k)
            else:
                score = _lcs(item, region) / k
            if score > best:
                best, bs0, bs1 = score, found[j, 0], found[j, found.shape[1] - 1]
        last = c[bs1] + n[g]  # the word after the last matched window
        scores[g] = best
        t0s[g] = a + first_tok[c[bs0]] if first_tok.size else a
        t1s[g] = a + first_tok[last] if last < first_tok.size else b
    return scores, t0s, t1s


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


# ------------------------------------------------------------------------------------------ text check
def text_check(
    item: tuple[list[str], list[int]],
    region: tuple[list[str], list[int]],
    ranks: dict | None = None,
    key_terms: bool = False,
) -> tuple[float, str]:
    """(edits, conflict) of an item's text tokens placed in a region's (normalize.text_tokens): the
    fewest token edits (a substitution, an inserted or a dropped token each 1) that turn the item into
    some run of the region's tokens, and, on that placement, the first number or operator of the item
    that stands where the region has a different one of the same class ("'-' vs '+'"; '' when none:
    a number or operator only missing, or replaced by a word, is an edit, not a conflict), where the
    FLANK item tokens on each side align too (or the item ends).

    With `ranks` (the vocabulary's word ranks, weights.py) the edits on that placement are weighed by
    what they change (weights.edit_cost: one touching only common words costs CHEAP_EDIT); with
    `key_terms` too, a word of the item standing where the region has a rare one
    (weights.key_term_replaced), held in place as a number is, is a conflict ("'field' replaced by
    'eigenvalue'"): another question, not an edit."""
    a_tok, a_cls = item
    b_tok, b_cls, *layout = region
    ids: dict[str, int] = {}
    a = np.asarray([ids.setdefault(t, len(ids)) for t in a_tok], dtype=np.int64)
    b = np.asarray([ids.setdefault(t, len(ids)) for t in b_tok], dtype=np.int64)
    edits, i, j, sub, at = _place(a, np.asarray(a_cls, np.int64), b, np.asarray(b_cls, np.int64))
    sub_l, at_l = sub.tolist(), at.tolist()
    forgiven = renamed(a_tok, b_tok, sub_l)
    conflict = f"{a_tok[i]!r} vs {b_tok[j]!r}" if i >= 0 else ""
    if ranks is None:
        return int(edits) - len(forgiven), conflict
    if key_terms and not conflict:
        conflict = key_term_conflict(a_tok, b_tok, at_l, ranks, layout[0] if layout else None)
    return weighed_edits(a_tok, b_tok, at_l, forgiven, ranks), conflict


def weighed_edits(
    a_tok: list[str], b_tok: list[str], at: list[int], forgiven: set[int], ranks: dict
) -> float:
    """The edits of a placement (`at[i]`: the region token item token i is matched or changed to, -1
    where it is dropped) weighed by weights.edit_cost: each dropped item token, each changed one (but
    the `forgiven` ones of a renamed variable) and each region token inserted inside the placement."""
    cost, used = 0.0, [j for j in at if j >= 0]
    for i, j in enumerate(at):
        if j < 0:
            cost += edit_cost(a_tok[i], None, ranks)
        elif a_tok[i] != b_tok[j] and i not in forgiven:
            cost += edit_cost(a_tok[i], b_tok[j], ranks)
    if used:
        inside = set(range(min(used), max(used) + 1)) - set(used)
        cost += sum(edit_cost(None, b_tok[j], ranks) for j in sorted(inside))
    return cost


def key_term_conflict(
    a_tok: list[str], b_tok: list[str], at: list[int], ranks: dict, line: list[int] | None = None
) -> str:
    """The first word of the item changed into a specific word of the region (weights.key_term_replaced)
    with its FLANK neighbours each way matched (or the item's end), as "'field' replaced by 'eigenvalue'";
    '' when none. At the item's first or last token a copy cut short reads the text beside it as a
    substitution just as well: there it counts only when the region's word is on the line of the
    item's word next to it (`line[j]`: the region token's line, normalize.text_tokens), never without
    `line`."""
    k = len(a_tok)

    def held(y: int) -> bool:
        return not 0 <= y < k or (at[y] >= 0 and a_tok[y] == b_tok[at[y]])

    for x, j in enumerate(at):
        if j < 0 or a_tok[x] == b_tok[j] or not key_term_replaced(a_tok[x], b_tok[j], ranks):
            continue
        if not all(held(y) for y in range(x - FLANK, x + FLANK + 1) if y != x):
            continue
        if x in (0, k - 1):
            inner = x + 1 if x == 0 else x - 1
            if line is None or not 0 <= inner < k or at[inner] < 0 or line[j] != line[at[inner]]:
                continue
        return f"{a_tok[x]!r} replaced by {b_tok[j]!r}"
    return ""


def renamed(a_tok: list[str], b_tok: list[str], sub: list[int]) -> set[int]:
    """The item tokens whose change a consistent renaming forgives: on the placement (`sub[i]`: the
    region token item token i was changed into, -1 where it was kept, dropped or matched), each
    single-letter word changed into one other single letter every time it occurs, and no other letter
    changed into that one, counts as one edit, not one per occurrence (`3x + 1 = y` as `3t + 1 = y`; a
    variable renamed): every occurrence but the first is forgiven."""
    letter = {t for t in a_tok if len(t) == 1 and t.isalpha()}
    to: dict[str, set[str]] = {}
    for i, j in enumerate(sub):
        if j >= 0 and a_tok[i] in letter:
            to.setdefault(a_tok[i], set()).add(b_tok[j])
    forgiven: set[int] = set()
    for x, ys in to.items():
        (y,) = ys if len(ys) == 1 else (None,)
        if y is None or not (len(y) == 1 and y.isalpha()) or y in letter:
            continue
        if all(sub[i] >= 0 for i, t in enumerate(a_tok) if t == x):  # changed everywhere it occurs
            if sum(1 for z in to.values() if y in z) == 1:
                forgiven |= set([i for i, t in enumerate(a_tok) if t == x][1:])
    return forgiven


FLANK = 2  # the item tokens each side of a changed number or operator that must align for a conflict


@njit(cache=True, nogil=True)
def _place(a, a_cls, b, b_cls):
    """Semi-global edit distance of `a` inside `b` (free ends in `b`), with the first same-class
    number/operator substitution on the best path, item-first: (edits, i, j, changed, at), (i, j) =
    (-1, -1) for none, `changed[i]` the region token item token i was substituted by (-1: none), `at[i]`
    the region token it is matched or substituted by (-1: dropped). On ties the path prefers a substitution (a changed number reads as changed, not as one
    dropped beside one inserted)."""
    k, m = a.size, b.size
    d = np.zeros((k + 1, m + 1), np.int64)
    for i in range(1, k + 1):
        d[i, 0] = i
        for j in range(1, m + 1):
            sub = d[i - 1, j - 1] + (0 if a[i - 1] == b[j - 1] else 1)
            dele = d[i - 1, j] + 1
            ins = d[i, j - 1] + 1
            d[i, j] = min(sub, dele, ins)
    best, bj = k, 0
    for j in range(m + 1):
        if d[k, j] <= best:  # the last of equal placements: a changed last token reads as changed
            best, bj = d[k, j], j
    i, j = k, bj
    state = np.zeros(k, np.int64)  # per item token: 0 dropped or changed, 1 matched, 2 conflicting
    sub_j = np.full(k, -1, np.int64)
    changed = np.full(k, -1, np.int64)  # per item token: the region token it was changed into
    at = np.full(k, -1, np.int64)  # per item token: the region token it is matched or changed to
    while i > 0:
        if j > 0 and d[i, j] == d[i - 1, j - 1] + (0 if a[i - 1] == b[j - 1] else 1):
            at[i - 1] = j - 1
            if a[i - 1] == b[j - 1]:
                state[i - 1] = 1
            else:
                changed[i - 1] = j - 1
                if a_cls[i - 1] != 0 and a_cls[i - 1] == b_cls[j - 1]:
                    state[i - 1] = 2
                    sub_j[i - 1] = j - 1
            i -= 1
            j -= 1
        elif d[i, j] == d[i - 1, j] + 1:
            i -= 1
        else:
            j -= 1
    # a conflict counts where the item is held in place on both sides: its FLANK neighbours each way
    # aligned (matched, or conflicting too), or the item's end before them; a cut item's end aligned
    # against the text beside it, with a stray common word matched, is no conflict
    ci, cj = -1, -1
    for x in range(k - 1, -1, -1):
        if state[x] != 2:
            continue
        ok = True
        for y in range(x - FLANK, x + FLANK + 1):
            if y != x and 0 <= y < k and state[y] == 0:
                ok = False
        if ok:
            ci, cj = x, sub_j[x]
    return best, ci, cj, changed, at
