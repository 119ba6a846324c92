"""The leak audit's verification primitives: the bit-parallel LCS against a plain dynamic program, and the
hit chaining that picks one placement of an item in a document."""

from __future__ import annotations

import numpy as np

from olmax.audit.leaks.align import chains, contains_run, lcs_length


def lcs_reference(a: list[int], b: list[int]) -> int:
    row = [0] * (len(b) + 1)
    for x in a:
        prev_diag = 0
        for j, y in enumerate(b, 1):
            keep = row[j]
            row[j] = prev_diag + 1 if x == y else max(row[j], row[j - 1])
            prev_diag = keep
    return row[-1]


def test_lcs_matches_a_plain_dynamic_program():
    rng = np.random.default_rng(0)
    for trial in range(300):
        k, m = int(rng.integers(1, 90)), int(rng.integers(0, 200))
        vocab = int(rng.integers(2, 30))
        a = rng.integers(0, vocab, k).astype(np.uint64)
        b = rng.integers(0, vocab, m).astype(np.uint64)
        assert lcs_length(a, b) == lcs_reference(a.tolist(), b.tolist()), trial


def test_lcs_tolerates_insertions_drops_and_substitutions():
    item = np.arange(100, 140, dtype=np.uint64)  # 40 distinct words
    edited = [w for i, w in enumerate(item.tolist()) if i % 12 != 5]  # one in twelve dropped
    edited = [999 if i % 10 == 3 else w for i, w in enumerate(edited)]  # one in ten substituted
    with_tags = []
    for i, w in enumerate(edited):
        with_tags += [7, 8] if i % 6 == 0 else []  # tag words between phrases
        with_tags.append(w)
    got = lcs_length(item, np.asarray([1, 2, 3, *with_tags, 4, 5], dtype=np.uint64))
    assert got == lcs_reference(item.tolist(), with_tags) and 0.75 * 40 <= got < 40


def test_contains_run_is_an_exact_contiguous_match():
    item = np.asarray([5, 6, 7], dtype=np.uint64)
    assert contains_run(np.asarray([1, 5, 6, 7, 2], dtype=np.uint64), item)
    assert not contains_run(np.asarray([5, 6, 1, 7], dtype=np.uint64), item)
    assert not contains_run(np.asarray([5, 6], dtype=np.uint64), item)


def test_chains_follow_the_item_order_and_prefer_one_diagonal():
    # an item that repeats a phrase at positions 1..7 and 16..22; the document holds it once, from word 81
    q = np.asarray([1, 2, 3, 16, 17, 18], dtype=np.int64)
    c = np.asarray([97, 98, 99, 97, 98, 99], dtype=np.int64)
    got = {tuple(q[sel].tolist()) for sel in chains(q, c)}
    assert got == {(1, 2, 3), (16, 17, 18)}  # both readings, never a mix of the two
    # a placement with words inserted between hits is one chain; a stray hit far away is not in it
    q = np.asarray([0, 8, 16, 24, 3], dtype=np.int64)
    c = np.asarray([10, 21, 33, 44, 5000], dtype=np.int64)
    (sel,) = chains(q, c)
    assert q[sel].tolist() == [0, 8, 16, 24]


def test_lcs_across_64_bit_words():
    rng = np.random.default_rng(1)
    for k in (63, 64, 65, 127, 128, 129, 300):
        a = rng.integers(0, 12, k).astype(np.uint64)
        b = rng.integers(0, 12, int(rng.integers(k // 2, 2 * k))).astype(np.uint64)
        assert lcs_length(a, b) == lcs_reference(a.tolist(), b.tolist()), k
        assert lcs_length(a, a) == k and lcs_length(a, b[:0]) == 0


def _longest_chain(q: list[int], c: list[int]) -> int:
    """Length of the longest sequence of hits each of which may follow the one before (plain DP)."""
    hits = sorted(zip(c, q))
    best = [1] * len(hits)
    for i, (ci, qi) in enumerate(hits):
        for j, (cj, qj) in enumerate(hits[:i]):
            if qi > qj and 0 < ci - cj <= 3 * (qi - qj) + 24:
                best[i] = max(best[i], best[j] + 1)
    return max(best, default=0)


def test_chains_are_valid_and_longest():
    rng = np.random.default_rng(2)
    for trial in range(500):
        h = int(rng.integers(1, 30))
        q = rng.integers(0, 40, h)
        c = np.sort(rng.integers(0, 150, h)) if trial % 2 else rng.integers(0, 150, h)
        found = chains(q, c)
        assert 1 <= len(found) <= 4
        for sel in found:
            assert len(sel) == _longest_chain(q.tolist(), c.tolist())
            qs, cs = q[sel], c[sel]
            assert (np.diff(qs) > 0).all() and (np.diff(cs) > 0).all()
            assert (np.diff(cs) <= 3 * np.diff(qs) + 24).all()
