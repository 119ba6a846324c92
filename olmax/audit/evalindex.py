"""The eval side of the leak probe: an exact index of eval word windows, and the probe of a word stream.

Index. Every n-word window (default n = 13) of every eval item, and for items shorter than n words
(but at least min_item_words) the whole item, as rolling hashes (hashing.py) xor'ed with a salt per
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

import numpy as np
import xxhash

from olmax.audit.hashing import packed_windows
from olmax.audit.prefilter import WindowFilter, window_sums


def length_salt(k: int) -> np.uint64:
    """Keys of different window lengths live in one table: xor each length's hashes with its own salt."""
    return np.uint64(xxhash.xxh3_64_intdigest(f"olmax-window-{k}".encode()))


def short_salt(k: int) -> np.uint64:
    """The salt of the short items' own k-word windows (apart from whole items of k words)."""
    return np.uint64(xxhash.xxh3_64_intdigest(f"olmax-short-window-{k}".encode()))


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
        short_words: int = 0,
        short_ngram: int = 0,
    ):
        """`max_items_per_key` > 0: an n-gram that many distinct items share is a template of the eval
        side ("which of the following is the"), kept out of the index (`template_keys` counts them).
        `short_ngram` > 0: items of more than short_ngram and at most `short_words` words also give
        their short_ngram-word windows (salted apart), so a short item with a word edited is found
        through the windows the edit leaves whole."""
        self.n = n
        self.short_ngram = short_ngram
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
        sel = (k_use > s) & (k_use <= short_words) if s > 0 else np.zeros(use.size, dtype=bool)
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
        order = np.argsort(key, kind="stable")
        key = key[order]
        self.rec_item, self.rec_q = rec_item[order], rec_q[order]
        self.rec_w = wlen[order].astype(np.int64)  # each record's window length
        self.template_keys = 0
        if max_items_per_key > 0 and key.size:
            # distinct items per key (records are sorted by key, then by item within a key)
            new_pair = np.ones(key.size, dtype=bool)
            new_pair[1:] = (key[1:] != key[:-1]) | (self.rec_item[1:] != self.rec_item[:-1])
            ukey, inv = np.unique(key, return_inverse=True)
            n_items = np.bincount(inv.reshape(-1)[new_pair], minlength=ukey.size)
            keep = n_items[inv.reshape(-1)] < max_items_per_key
            self.template_keys = int((n_items >= max_items_per_key).sum())
            key, self.rec_item, self.rec_q = key[keep], self.rec_item[keep], self.rec_q[keep]
            self.rec_w = self.rec_w[keep]
        # how many of each item's words its indexed windows cover (templates left out): what a copy's
        # hits can cover at most
        self.coverable = np.zeros(self.lengths_of.size, np.int64)
        if self.rec_item.size:
            item_at = np.zeros(self.lengths_of.size, np.int64)
            item_at[use] = offset
            start = item_at[self.rec_item] + self.rec_q
            diff = np.zeros(words.size + 1, np.int64)
            np.add.at(diff, start, 1)
            np.add.at(diff, start + self.rec_w, -1)
            covered = (np.cumsum(diff[:-1]) > 0).astype(np.int64)
            self.coverable[use] = np.add.reduceat(covered, offset) if use.size else 0
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
        self.short_filter = WindowFilter(bag_s) if bag_s.size else None
        self.short_ngram_salt = short_salt(s) if s > 0 else np.uint64(0)
        self.anchor_filter = WindowFilter(
            window_sums(words, self.anchor)[offset[short]] if short.any() else np.zeros(0, np.uint64)
        )

    @property
    def num_keys(self) -> int:
        return int(self.ukeys.size)

    def probe(self, packed: np.ndarray, first_new: int) -> tuple[np.ndarray, np.ndarray]:
        """(key index, window start) of every window of the packed word values (normalize.py
        `packed_words`) that ends at or after index first_new and is an index key."""
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
        if self.has_short_ngrams and m - s + 1 > lo:
            cand = self.short_filter.window_candidates(packed, s, lo)
            k_, at = self.lookup.find(packed_windows(packed, cand, s) ^ self.short_ngram_salt, cand)
            keys.append(k_)
            starts.append(at)
        a = self.anchor
        lo = max(0, first_new - (self.short_lengths[-1] if a else 0) + 1)
        if a and m - a + 1 > lo:
            cand = self.anchor_filter.window_candidates(packed, a, lo)
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
        if not keys:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(keys).astype(np.int64), np.concatenate(starts).astype(np.int64)
