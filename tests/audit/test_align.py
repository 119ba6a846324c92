"""The leak audit's verification primitives: the bit-parallel LCS against a plain dynamic program, and the
hit chaining that picks one placement of an item in a document."""

from __future__ import annotations

import numpy as np

from olmax.audit.align import chains, contains_run, lcs_length


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


P = 1 << 62  # normalize.PROTECTED: a number or an operator


def edits_reference(item: list[int], region: list[int]) -> int:
    """The fewest edits turning `item` into some run region[a:b], by trying every run (plain DP each)."""
    from olmax.audit.align import PROTECTED_EDIT

    def cost(w):
        return PROTECTED_EDIT if w & P else 1

    best = None
    for a in range(len(region) + 1):
        for b in range(a, len(region) + 1):
            run = region[a:b]
            d = [[0] * (len(run) + 1) for _ in range(len(item) + 1)]
            for i in range(1, len(item) + 1):
                d[i][0] = d[i - 1][0] + cost(item[i - 1])
            for j in range(1, len(run) + 1):
                d[0][j] = d[0][j - 1] + cost(run[j - 1])
            for i in range(1, len(item) + 1):
                for j in range(1, len(run) + 1):
                    x, y = item[i - 1], run[j - 1]
                    sub = 0 if x == y else max(cost(x), cost(y))
                    d[i][j] = min(d[i - 1][j - 1] + sub, d[i - 1][j] + cost(x), d[i][j - 1] + cost(y))
            best = d[-1][-1] if best is None else min(best, d[-1][-1])
    return best


def test_edit_distance_matches_every_run_tried():
    from olmax.audit.align import edit_distance

    rng = np.random.default_rng(3)
    for trial in range(150):
        k, m = int(rng.integers(1, 9)), int(rng.integers(0, 12))
        vocab = rng.integers(1, 6, 8) | np.where(rng.random(8) < 0.3, P, 0)
        a = rng.choice(vocab, k).astype(np.uint64)
        b = rng.choice(vocab, m).astype(np.uint64)
        assert edit_distance(a, b) == edits_reference(a.tolist(), b.tolist()), trial


def test_edits_to_wording_are_few_edits_to_numbers_and_operators_are_not():
    from olmax.audit.align import PROTECTED_EDIT, edit_distance, lcs_conflicts

    solve, three, x, minus, plus, seven, eq, eleven, twelve = (
        1,
        3 | P,
        5,
        6 | P,
        7 | P,
        8 | P,
        9 | P,
        10 | P,
        11 | P,
    )
    item = np.asarray([solve, three, x, minus, seven, eq, eleven, 20, 21], dtype=np.uint64)
    host = [100, 101]
    assert edit_distance(item, np.asarray(host + list(item) + host, dtype=np.uint64)) == 0
    reworded = [2, three, x, minus, seven, eq, eleven, 20, 22, 21]  # "Compute" for "Solve", one added
    assert edit_distance(item, np.asarray(host + reworded + host, dtype=np.uint64)) == 2
    flipped = [solve, three, x, plus, seven, eq, eleven, 20, 21]
    assert edit_distance(item, np.asarray(host + flipped + host, dtype=np.uint64)) >= PROTECTED_EDIT
    other = [solve, three, x, minus, seven, eq, twelve, 20, 21]
    assert edit_distance(item, np.asarray(host + other + host, dtype=np.uint64)) >= PROTECTED_EDIT
    # in a long item's alignment: a replaced number inside is a conflict, one past the copy's end is not
    long = np.asarray(list(range(30, 60)) + [minus, seven, eq, eleven] + list(range(60, 70)), dtype=np.uint64)
    same = np.asarray([1, 2] + long.tolist() + [eleven, 3 | P], dtype=np.uint64)
    assert lcs_conflicts(long, same) == 0
    flip = long.copy()
    flip[30] = plus
    assert lcs_conflicts(long, flip) == 1
    cut = np.asarray(long[:-3].tolist() + [twelve, 4 | P], dtype=np.uint64)
    assert lcs_conflicts(long, cut) == 0
    # a flip next to the same sign ("I- + H+" as "I- - H+": either reading aligns one sign) and a run of
    # values all changed are conflicts too
    base = list(range(30, 45))
    item = np.asarray(base + [5, minus, plus, 6] + base[:5], dtype=np.uint64)
    doc = np.asarray(base + [5, minus, minus, 6] + base[:5], dtype=np.uint64)
    assert lcs_conflicts(item, doc) == 1
    values = [20 | P, 40 | P, 60 | P, 80 | P]
    item = np.asarray(base + values + base[:6], dtype=np.uint64)
    doc = np.asarray(base + [27 | P, 43 | P, 61 | P, 88 | P] + base[:6], dtype=np.uint64)
    assert lcs_conflicts(item, doc) == 4
