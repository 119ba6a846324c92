"""The leak probe's prefilter and index: never a missed key (against a brute-force lookup of every
window), few false candidates, and the bounded hit collection against capping everything at once."""

from __future__ import annotations

import numpy as np
import pytest

from olmax.audit.leaks.item_index import EvalIndex, length_salt
from olmax.audit.leaks.prefilter import WindowFilter, window_sums
from olmax.audit.leaks.run import HIT_REC, HitSet, cap_hits, doc_freq
from olmax.hashing import PrefixHasher


def _words(rng, n, vocab):
    """[base-1, base-2] word values drawn from a small vocabulary of 20-bit pairs (many repeats)."""
    table = rng.integers(0, 1 << 20, size=(vocab, 2), dtype=np.uint64)
    pick = table[rng.integers(0, vocab, size=n)]
    return [np.ascontiguousarray(pick[:, 0]), np.ascontiguousarray(pick[:, 1])]


def _brute(index: EvalIndex, words) -> set[tuple[int, int]]:
    """(key index, start) of every window of every indexed length whose salted hash is a key."""
    h = PrefixHasher(words)
    out = set()
    for k in index.lengths:
        w = h.windows(k) ^ length_salt(k)
        at = np.flatnonzero(np.isin(w, index.ukeys))
        out |= set(zip(np.searchsorted(index.ukeys, w[at]).tolist(), at.tolist()))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_probe_finds_exactly_the_keys_a_brute_force_lookup_finds(seed):
    rng = np.random.default_rng(seed)
    train = _words(rng, 20_000, vocab=40)  # a small vocabulary: windows recur, bags collide
    seqs = []
    for _ in range(60):  # items copied from the training words: long ones and short ones
        k = int(rng.choice([13, 20, 40, 4, 5, 7, 12]))
        a = int(rng.integers(0, 20_000 - k))
        seqs.append([train[0][a : a + k].copy(), train[1][a : a + k].copy()])
    for k in (30, 6, 3):  # unrelated items, and one below min_item_words
        seqs.append(_words(rng, k, vocab=1000))
    index = EvalIndex([(w[0] << np.uint64(32)) | w[1] for w in seqs], 13, 4)
    assert index.short_lengths and index.anchor == 4
    packed = (train[0] << np.uint64(32)) | train[1]
    want = _brute(index, train)
    assert len(want) >= 60
    key, start = index.probe(packed, 0)
    got = set(zip(key.tolist(), start.tolist()))
    assert len(got) == key.size and got == want
    # with first_new, only windows ending there or later (what the next chunk must not repeat)
    for first_new in (1, 777, 19_990):
        k2, s2 = index.probe(packed, first_new)
        ends = {(kk, ss) for kk, ss in want if ss + _key_length(index, kk) - 1 >= first_new}
        assert set(zip(k2.tolist(), s2.tolist())) == ends


def _key_length(index: EvalIndex, key: int) -> int:
    item = int(index.rec_item[index.rec_ptr[key]])
    return min(int(index.lengths_of[item]), index.n)


def test_prefilter_keeps_every_inserted_window_and_few_others():
    rng = np.random.default_rng(0)
    words = _words(rng, 200_000, vocab=5000)
    packed = (words[0] << np.uint64(32)) | words[1]
    keys = window_sums(packed[:100_000], 13)
    f = WindowFilter(keys)
    assert f.coarse > 1  # both levels in play
    np.testing.assert_array_equal(f.window_candidates(packed[:100_000], 13), np.arange(keys.size))
    # from lo on: the same windows, never one that starts before lo
    np.testing.assert_array_equal(f.window_candidates(packed[:100_000], 13, 777), np.arange(777, keys.size))
    others = packed[100_000:]
    passed = f.window_candidates(others, 13).size / (others.size - 12)
    assert f.fill < 1 / 100 and passed < 2 * f.fill + 1e-3
    # a window passes exactly when its sum's bit is set (the slot rule written out here)
    sums = window_sums(others, 13)
    mixed = sums * np.uint64(0x9E3779B97F4A7C15)
    byte = (mixed >> np.uint64(64 - (f.bits - 3))).astype(np.int64)
    bit = ((mixed >> np.uint64(32)) & np.uint64(7)).astype(np.uint8)
    want = np.flatnonzero((f.table[byte] >> bit) & 1)
    np.testing.assert_array_equal(f.window_candidates(others, 13), want)
    assert 0 < want.size < sums.size
    # the coarse level changes nothing but the work: same answer as the full table alone
    one = WindowFilter(keys, coarse_bytes=1 << 40)
    small = WindowFilter(keys, coarse_bytes=1 << 10)
    assert one.coarse == 1 and small.coarse > f.coarse
    both = np.concatenate([others, packed[:50_000]])
    for g in (one, small):
        np.testing.assert_array_equal(g.window_candidates(both, 13), f.window_candidates(both, 13))
    assert f.window_candidates(packed[:12], 13).size == 0
    with pytest.raises(ValueError, match="max_bits"):
        WindowFilter(keys, max_bits=40)


def _hits(rng, n):
    rec = np.zeros(n, HIT_REC)
    rec["key"] = rng.integers(0, 40, n)
    rec["file"] = rng.integers(0, 3, n)
    rec["doc"] = rng.integers(0, 25, n)
    rec["cpos"] = rng.integers(0, 10_000, n)
    rec["pos"] = rec["cpos"] * 3
    return rec


@pytest.mark.parametrize("cap", [1, 4])
def test_hitset_keeps_the_first_documents_of_each_key_within_its_bound(cap):
    rng = np.random.default_rng(cap)
    batches = [_hits(rng, int(rng.integers(1, 300))) for _ in range(60)]
    everything = np.concatenate(batches)
    hs, peak = HitSet(cap, min_merge=64), 0
    for b in batches:
        hs.add(b)
        peak = max(peak, hs.kept.size + hs.n_pending)
    got = hs.result()
    want = cap_hits(everything, cap)
    np.testing.assert_array_equal(got, want)
    # never more than twice what it keeps, plus one batch and the merge threshold
    assert peak <= 2 * want.size + max(b.size for b in batches) + 64
    assert want.size < everything.size  # the cap did drop hits
    # df on the kept hits: min(distinct documents, cap) per key
    docs: dict[int, set] = {}
    for r in everything:
        docs.setdefault(int(r["key"]), set()).add((int(r["file"]), int(r["doc"])))
    df = doc_freq(got, 40)
    assert df.tolist() == [min(len(docs.get(k, ())), cap) for k in range(40)]
