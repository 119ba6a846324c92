"""The eval side of the leak probe: an exact index of eval word windows, and the probe of a word stream.

Index. Every n-word window (default n = 13) of every eval item, and for items shorter than n words
(but at least min_item_words) the whole item, as rolling hashes (olmax/hashing.py) xor'ed with a salt per
length, in one sorted array of unique keys; each key points to its (item, n-gram position) records.

Probe. A chunk of training words is probed at every position: each window length slides over its
packed word values through the prefilter (prefilter.py: the windows' bag sums, no false negatives),
which keeps about 0.4% of positions, and only those are hashed exactly and looked up (SortedKeys: a
directory on the keys' top bits, then a few halving steps). Items shorter than n words are found through an anchor,
their first `anchor` words: anchor windows pass their own prefilter and exact anchor lookup, and
only then are hashed at the lengths of the items their anchor begins (all lengths in one pass).
The probe's answer is exactly the set of windows whose rolling hash is an index key: the prefilter
only saves work.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import xxhash
from numba import njit

from olmax.audit.leaks.prefilter import WindowFilter, window_sums
from olmax.hashing import packed_windows


def length_salt(k: int) -> np.uint64:
    """Keys of different window lengths live in one table: xor each length's hashes with its own salt."""
    return np.uint64(xxhash.xxh3_64_intdigest(f"olmax-window-{k}".encode()))


def short_salt(k: int) -> np.uint64:
    """The salt of the short items' own k-word windows (apart from whole items of k words)."""
    return np.uint64(xxhash.xxh3_64_intdigest(f"olmax-short-window-{k}".encode()))


def core_salt(k: int) -> np.uint64:
    """The salt of a short item's k-word core (a run of words no template window covers)."""
    return np.uint64(xxhash.xxh3_64_intdigest(f"olmax-core-{k}".encode()))


def template_cores(
    free: np.ndarray, item_start: np.ndarray, offset: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(item, start, length) of every maximal run of `free` words (those no template window covers)
    within one item: where a templated item keeps what makes it that item. `free` runs over the items'
    concatenated words, `item_start` marks each item's first word, `offset` is each item's first word."""
    if free.size == 0:
        return (np.zeros(0, np.int64),) * 3
    begins = free & (item_start | ~np.concatenate([[False], free[:-1]]))
    ends = free & (np.concatenate([item_start[1:], [True]]) | ~np.concatenate([free[1:], [False]]))
    a = np.flatnonzero(begins)
    b = np.flatnonzero(ends) + 1
    item = np.searchsorted(offset, a, side="right") - 1
    return item, a - offset[item], b - a


class WindowRecords(NamedTuple):
    """Index records of word windows, one per window: its item, its first word's position in the item
    and its length in words (EvalIndex's rec_item, rec_q, rec_w)."""

    item: np.ndarray  # int64
    q: np.ndarray  # int64
    length: np.ndarray  # int64


def core_records(
    words: np.ndarray,
    offset: np.ndarray,
    use: np.ndarray,
    k_use: np.ndarray,
    templates: WindowRecords,
    s: int,
    short_words: np.ndarray,
) -> tuple[np.ndarray, ...]:
    """(key, item, start, length) of the core runs of the short items (more than s, at most
    `short_words[i]` words for item use[i]) that templates leave: each run of exactly s - 1 words no template window
    (`templates`) covers. An item most of whose windows are templates ("solve for x in the equation
    ...") keeps its numbers and names there: an edit inside the template then leaves that run to find
    it by. `words` are the indexed items' concatenated words, `offset` each one's first (items `use`,
    of `k_use` words)."""
    item_at = np.zeros(int(use.max()) + 1 if use.size else 0, np.int64)
    item_at[use] = offset
    diff = np.zeros(words.size + 1, np.int64)
    t_start = item_at[templates.item] + templates.q  # each template window's first word in `words`
    np.add.at(diff, t_start, 1)
    np.add.at(diff, t_start + templates.length, -1)
    item_start = np.zeros(words.size, dtype=bool)
    item_start[offset] = True
    c_u, c_q, c_len = template_cores(np.cumsum(diff[:-1]) == 0, item_start, offset)
    ok = (c_len == s - 1) & (k_use[c_u] > s) & (k_use[c_u] <= short_words[c_u])
    c_u, c_q, c_len = c_u[ok], c_q[ok], c_len[ok]
    salts = np.asarray([core_salt(k) for k in range(s)], dtype=np.uint64)
    c_key = (
        packed_windows(words, offset[c_u] + c_q, c_len) ^ salts[c_len] if c_u.size else np.zeros(0, np.uint64)
    )
    return c_key, use[c_u], c_q, c_len


def template_mask(key: np.ndarray, item: np.ndarray, max_items: int) -> tuple[np.ndarray, int]:
    """(keep, templates): the records whose key fewer than `max_items` distinct items share (all when
    max_items <= 0), and how many keys reach it (the eval side's templates)."""
    if max_items <= 0 or key.size == 0:
        return np.ones(key.size, dtype=bool), 0
    order = np.lexsort((item, key))
    k, it = key[order], item[order]
    new_key = np.ones(k.size, dtype=bool)
    new_key[1:] = k[1:] != k[:-1]
    new_pair = new_key.copy()
    new_pair[1:] |= it[1:] != it[:-1]
    key_no = np.cumsum(new_key) - 1
    n_items = np.bincount(key_no[new_pair], minlength=int(key_no[-1]) + 1)
    keep = np.empty(k.size, dtype=bool)
    keep[order] = n_items[key_no] < max_items
    return keep, int((n_items >= max_items).sum())


class SortedKeys:
    """Exact lookup in a sorted array of unique uint64 hashes (uniform bits): a directory of where
    each value of the top `bits` bits begins narrows a query to about one key, and a few branch-free
    halving steps (as many as the largest range needs) find it. About two cache misses a query where
    a binary search over the ~10 MB of keys takes ~20, and the queries need no sorting."""

    def __init__(self, keys: np.ndarray):
        self.keys = keys
        bits = int(np.clip(np.log2(max(1, keys.size)), 8, 24))  # ~1 key per directory entry
        self.shift = np.uint64(64 - bits)
        prefix = (keys >> self.shift).astype(np.int64)
        self.starts = np.searchsorted(prefix, np.arange((1 << bits) + 1)).astype(np.int64)
        self.steps = int(np.diff(self.starts).max()).bit_length()

    def find(self, h: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(index in `keys`, position) of the hashes `h` found there, in query order."""
        if h.size == 0 or self.keys.size == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        top = (h >> self.shift).view(np.int64)
        lo = self.starts.take(top)
        cnt = self.starts.take(top + 1)
        cnt -= lo
        last = self.keys.size - 1
        for _ in range(self.steps):  # lower bound of h in keys[lo:lo + cnt]
            half = cnt >> 1
            mid = lo + half
            go = self.keys.take(np.minimum(mid, last)) < h
            go &= cnt > 0
            mid += 1
            lo = np.where(go, mid, lo)
            cnt = np.where(go, cnt - half - 1, half)
        np.minimum(lo, last, out=lo)
        ok = self.keys.take(lo) == h
        return lo[ok], at[ok]


class EvalIndex:
    """Exact index of the eval side: sorted keys → (item, n-gram position), plus the prefilters.

    `items` holds each item's packed word values (normalize.WordTables.packed_words)."""

    def __init__(
        self,
        items: list[np.ndarray],
        n: int,
        min_item_words: int,
        max_items_per_key: int = 0,
        short_words: int | np.ndarray = 0,
        short_ngram: int = 0,
        groups: np.ndarray | None = None,
    ):
        """`max_items_per_key` > 0: an n-gram that many distinct items share is a template of the eval
        side ("which of the following is the"), kept out of the index (`template_keys` counts them).
        `short_ngram` > 0: items of more than short_ngram and at most `short_words` words also give
        their short_ngram-word windows (salted apart), so a short item with a word edited is found
        through the windows the edit leaves whole. `groups[item]`: the group an item belongs to (the
        units of one eval item); a template counts distinct groups (default: every item its own).
        `short_words` may be one limit per item (a worked solution of up to 60 words, whose edits may
        leave no n-word window whole, also gives its short windows)."""
        self.n = n
        self.short_ngram = short_ngram
        self.paraphrase = None  # a ParaphraseIndex (paraphrase.py), probed with the windows when set
        self.lengths_of = np.asarray([w.size for w in items], dtype=np.int64)
        # Every item long enough, its words concatenated: an item of k >= n words gives its k - n + 1
        # n-word windows, a shorter one its whole self; records in item order, then window order.
        use = np.flatnonzero(self.lengths_of >= min_item_words)
        k_use = self.lengths_of[use]
        w_use = np.minimum(k_use, n)  # window length per item
        per = k_use - w_use + 1  # windows per item
        words = (
            np.concatenate([np.asarray(items[i], dtype=np.uint64) for i in use])
            if use.size
            else np.zeros(0, np.uint64)
        )
        offset = np.cumsum(k_use) - k_use
        rec_item = np.repeat(use, per)
        rec_q = np.arange(rec_item.size, dtype=np.int64) - np.repeat(np.cumsum(per) - per, per)
        at = np.repeat(offset, per) + rec_q
        wlen = np.repeat(w_use, per)
        salts = np.asarray([length_salt(int(k)) for k in range(n + 1)], dtype=np.uint64)
        key = packed_windows(words, at, wlen) ^ salts[wlen] if at.size else np.zeros(0, np.uint64)
        bag_n = window_sums(words, n)[at[wlen == n]]
        s = short_ngram
        limit = np.broadcast_to(np.asarray(short_words, dtype=np.int64), (len(items),))[use]
        sel = (k_use > s) & (k_use <= limit) if s > 0 else np.zeros(use.size, dtype=bool)
        bag_s = np.zeros(0, np.uint64)
        if sel.any():  # the short items' own s-word windows
            per_s = k_use[sel] - s + 1
            s_item = np.repeat(use[sel], per_s)
            s_q = np.arange(s_item.size, dtype=np.int64) - np.repeat(np.cumsum(per_s) - per_s, per_s)
            s_at = np.repeat(offset[sel], per_s) + s_q
            key = np.concatenate([key, packed_windows(words, s_at, s) ^ short_salt(s)])
            rec_item, rec_q = np.concatenate([rec_item, s_item]), np.concatenate([rec_q, s_q])
            wlen = np.concatenate([wlen, np.full(s_item.size, s, np.int64)])
            bag_s = window_sums(words, s)[s_at]
        group = np.arange(len(items)) if groups is None else np.asarray(groups, dtype=np.int64)
        keep, self.template_keys = template_mask(key, group[rec_item], max_items_per_key)
        self.core_lengths: list[int] = []
        self.core_salts: dict[int, np.uint64] = {}
        self.core_filters: dict[int, WindowFilter] = {}
        if s > 1 and not keep.all():
            templates = WindowRecords(rec_item[~keep], rec_q[~keep], wlen[~keep])
            c_key, c_item, c_q, c_len = core_records(words, offset, use, k_use, templates, s, limit)
            c_keep, c_templates = template_mask(c_key, group[c_item], max_items_per_key)
            if c_key.size:
                self.template_keys += c_templates
                key = np.concatenate([key, c_key])
                rec_item = np.concatenate([rec_item, c_item])
                rec_q, wlen = np.concatenate([rec_q, c_q]), np.concatenate([wlen, c_len])
                keep = np.concatenate([keep, c_keep])
                self.core_lengths = sorted(set(c_len[c_keep].tolist()))
                c_start = offset[np.searchsorted(use, c_item)] + c_q
                self.core_salts = {k: core_salt(k) for k in self.core_lengths}
                self.core_filters = {
                    k: WindowFilter(window_sums(words, k)[c_start[c_keep & (c_len == k)]])
                    for k in self.core_lengths
                }
        order = np.argsort(key[keep], kind="stable")
        key = key[keep][order]
        self.rec_item, self.rec_q = rec_item[keep][order], rec_q[keep][order]
        self.rec_w = wlen[keep][order].astype(np.int64)  # each record's window length
        self.ukeys, first = np.unique(key, return_index=True)
        self.lookup = SortedKeys(self.ukeys)
        self.rec_ptr = np.concatenate([first, [key.size]]).astype(np.int64)
        self.lengths = sorted(
            {n if k >= n else int(k) for k in self.lengths_of.tolist() if k >= min_item_words}
        )
        self.short_lengths = [k for k in self.lengths if k < n]
        self.salts = {k: length_salt(k) for k in {n, *self.lengths}}
        self.short_arr = np.asarray(self.short_lengths, dtype=np.int64)
        self.short_salts = np.asarray([self.salts[k] for k in self.short_lengths], dtype=np.uint64)
        # Short items are found through an anchor: their first `anchor` words, probed at every
        # position; only anchor hits are hashed at the items' full lengths (exact lookup after).
        self.anchor = min(self.short_lengths, default=0)
        short = (k_use < n) if self.anchor else np.zeros(use.size, dtype=bool)
        anchors = packed_windows(words, offset[short], self.anchor) if short.any() else np.zeros(0, np.uint64)
        bit = np.left_shift(1, k_use[short] - self.anchor).astype(np.int64)
        self.anchors, inv = np.unique(anchors, return_inverse=True)
        self.anchor_lookup = SortedKeys(self.anchors)
        # which item lengths each anchor starts (bit j: length anchor + j), so a hit is only
        # hashed at the lengths of the items it could begin
        self.anchor_lengths = np.zeros(self.anchors.size, dtype=np.int64)
        np.bitwise_or.at(self.anchor_lengths, inv.reshape(-1), bit)
        self.has_ngrams = bool(bag_n.size)
        self.filter = WindowFilter(bag_n)
        self.has_short_ngrams = bool(bag_s.size)
        self.short_ngram_salt = short_salt(s) if s > 0 else np.uint64(0)
        bag_a = window_sums(words, self.anchor)[offset[short]] if short.any() else np.zeros(0, np.uint64)
        # anchors as long as the short windows share their pass: one filter over both, one scan
        self.anchor_in_short = bool(self.anchor == s and bag_s.size and bag_a.size)
        if self.anchor_in_short:
            bag_s = np.concatenate([bag_s, bag_a])
        self.short_filter = WindowFilter(bag_s) if bag_s.size else None
        self.anchor_filter = None if self.anchor_in_short else WindowFilter(bag_a)

    @property
    def num_keys(self) -> int:
        return int(self.ukeys.size)

    @property
    def pair_from(self) -> int | None:
        """The first key of the paraphrase pairs (the windows' keys come before), None without them."""
        return self.num_keys if self.paraphrase is not None else None

    @property
    def carry(self) -> int:
        """Words a probe carries from one chunk into the next: the longest window less one."""
        longest = max([*self.lengths, self.paraphrase.window + 1 if self.paraphrase else 1])
        return longest - 1

    def min_cover(self, edits: np.ndarray) -> np.ndarray:
        """int64 (items,): for each item of at most 64 words, the fewest of its words that its indexed
        windows (templates left out, cores in) still cover after `edits[item]` of its words are
        changed, wherever they fall (a changed word breaks every window holding it; an inserted or
        dropped word breaks no more): what the hits of a copy with that many edits cover at the least.
        At least 1; longer items get 0 (not computed)."""
        k = self.lengths_of
        order = np.argsort(self.rec_item, kind="stable")
        item = self.rec_item[order]
        q, w = self.rec_q[order], self.rec_w[order]
        small = k[item] <= 64
        masks = np.where(
            small,
            ((np.uint64(1) << np.minimum(w, 63).astype(np.uint64)) - np.uint64(1)) << q.astype(np.uint64),
            np.uint64(0),
        )
        masks = np.where(w >= 64, np.uint64(0xFFFFFFFFFFFFFFFF), masks)
        ptr = np.searchsorted(item, np.arange(k.size + 1))
        out = np.zeros(k.size, np.int64)
        _min_cover(masks, ptr, k, np.asarray(edits, np.int64), out)
        return out

    def probe(self, packed: np.ndarray, first_new: int) -> tuple[np.ndarray, np.ndarray]:
        """(key index, window start) of every window of the packed word values (normalize.py
        `packed_words`) that ends at or after index first_new and is an index key; with a `paraphrase`
        index, its pair hits too, their keys numbered after this index's (num_keys + pair key)."""
        m = packed.size
        keys, starts = [], []
        n = self.n
        lo = max(0, first_new - n + 1)
        if self.has_ngrams and m - n + 1 > lo:
            cand = self.filter.window_candidates(packed, n, lo)
            k_, at = self.lookup.find(packed_windows(packed, cand, n) ^ self.salts[n], cand)
            keys.append(k_)
            starts.append(at)
        s = self.short_ngram
        lo = max(0, first_new - s + 1)
        a = self.anchor
        lo_a = max(0, first_new - (self.short_lengths[-1] if a else 0) + 1)
        shared = None  # the anchor windows' candidates, when they share the short windows' scan
        scan = min(lo, lo_a) if self.anchor_in_short else lo
        if self.has_short_ngrams and m - s + 1 > scan:
            both = self.short_filter.window_candidates(packed, s, scan)
            cand = both[both >= lo]
            k_, at = self.lookup.find(packed_windows(packed, cand, s) ^ self.short_ngram_salt, cand)
            keys.append(k_)
            starts.append(at)
            if self.anchor_in_short:
                shared = both[both >= lo_a]
        for k in self.core_lengths:
            lo = max(0, first_new - k + 1)
            if m - k + 1 > lo:
                cand = self.core_filters[k].window_candidates(packed, k, lo)
                k_, at = self.lookup.find(packed_windows(packed, cand, k) ^ self.core_salts[k], cand)
                keys.append(k_)
                starts.append(at)
        if a and m - a + 1 > lo_a and (shared is not None or self.anchor_filter is not None):
            cand = shared if shared is not None else self.anchor_filter.window_candidates(packed, a, lo_a)
            idx, at = self.anchor_lookup.find(packed_windows(packed, cand, a), cand)
            # windows of a length some item with this anchor has (bit k - a), that fit and end in
            # the new part (older ones were probed with the last chunk): all lengths in one pass
            ks = self.short_arr
            end = at[:, None] + ks
            ok = ((self.anchor_lengths[idx][:, None] >> (ks - a)) & 1).astype(bool)
            ok &= (end <= m) & (end > first_new)
            hit, j = ok.nonzero()
            if hit.size:
                ak = at[hit]
                k_, at_k = self.lookup.find(packed_windows(packed, ak, ks[j]) ^ self.short_salts[j], ak)
                keys.append(k_)
                starts.append(at_k)
        if self.paraphrase is not None:  # pairs of an item's numbers and names: keys after the windows'
            k_, at = self.paraphrase.probe(packed, first_new)
            keys.append(k_ + self.num_keys)
            starts.append(at)
        if not keys:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(keys).astype(np.int64), np.concatenate(starts).astype(np.int64)


@njit(cache=True)
def _popcount(x):
    n = 0
    while x:
        x &= x - np.uint64(1)
        n += 1
    return n


@njit(cache=True)
def _min_cover(masks, ptr, k, edits, out):
    """EvalIndex.min_cover: every set of edits[i] changed positions among item i's k[i] words (k <= 64),
    the coverage of the windows (bit masks) that hold none of them; the least, at least 1."""
    pos = np.zeros(64, np.int64)
    for i in range(k.size):
        if k[i] > 64 or ptr[i] == ptr[i + 1]:
            continue
        m = masks[ptr[i] : ptr[i + 1]]
        a = min(edits[i], k[i])
        for j in range(a):
            pos[j] = j
        best = k[i]
        while True:
            hit = np.uint64(0)
            for j in range(a):
                hit |= np.uint64(1) << np.uint64(pos[j])
            cov = np.uint64(0)
            for x in m:
                if x & hit == 0:
                    cov |= x
            best = min(best, _popcount(cov))
            # the next combination of a positions out of k[i]
            j = a - 1
            while j >= 0 and pos[j] == k[i] - a + j:
                j -= 1
            if j < 0:
                break
            pos[j] += 1
            for t in range(j + 1, a):
                pos[t] = pos[t - 1] + 1
        out[i] = max(1, best)
