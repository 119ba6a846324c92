"""Repeated byte spans against a brute-force reference, hash collisions, whole UTF-8 characters."""

from __future__ import annotations

import numpy as np

from olmax.dedup.substring import cut, repeated_spans


def brute_force(data: list[bytes], L: int) -> list[np.ndarray]:
    """Per document (ASCII), a mask of the bytes inside an L-byte window that an earlier document's
    output holds whole (one of its windows that none of its own cuts touches)."""
    seen: set[bytes] = set()
    masks = []
    for d in data:
        m = np.zeros(len(d), bool)
        for p in range(len(d) - L + 1):
            if d[p : p + L] in seen:
                m[p : p + L] = True
        seen.update(d[p : p + L] for p in range(len(d) - L + 1) if not m[p : p + L].any())
        masks.append(m)
    return masks


def outputs_hold_the_cuts(data: list[bytes], L: int) -> None:
    """Every cut span's bytes lie whole in its keeper's output, an earlier document."""
    d, a, b, kept = repeated_spans(data, L)
    out = []
    for k in range(len(data)):
        sel = d == k
        out.append(cut(data[k], list(zip(a[sel].tolist(), b[sel].tolist()))))
    for k in range(d.size):
        assert kept[k] < d[k] and data[d[k]][a[k] : b[k]] in out[kept[k]], k


def masks_of(data: list[bytes], L: int) -> list[np.ndarray]:
    masks = [np.zeros(len(d), bool) for d in data]
    d, a, b, _ = repeated_spans(data, L)
    for k in range(d.size):
        masks[d[k]][a[k] : b[k]] = True
    return masks


def test_matches_brute_force_on_random_repeats():
    rng = np.random.default_rng(3)
    pool = bytes(rng.integers(97, 101, size=4000, dtype=np.uint8))  # 4 letters: many short repeats
    data = []
    for _ in range(40):
        parts = [bytes(rng.integers(97, 123, size=int(rng.integers(0, 30)), dtype=np.uint8))]
        for _ in range(int(rng.integers(1, 4))):
            a = int(rng.integers(0, len(pool) - 60))
            parts.append(pool[a : a + int(rng.integers(5, 60))])
        data.append(b"".join(parts))
    for L in (1, 8, 20):
        got, want = masks_of(data, L), brute_force(data, L)
        assert all(np.array_equal(g, w) for g, w in zip(got, want)), L
        outputs_hold_the_cuts(data, L)


def test_a_keeper_cut_in_turn_passes_nothing_on():
    """B holds P, C holds P with context B also had: C's copy of P lies whole in B's output, and D's
    copy is held by B (not by C, whose copy was cut)."""
    rng = np.random.default_rng(5)
    P = bytes(rng.integers(97, 123, size=40, dtype=np.uint8))
    X = bytes(rng.integers(97, 123, size=12, dtype=np.uint8))
    data = [b"a" * 3 + X + P + b"z", X + P + b"y" * 9, b"_" + X + P + b"!", b"q" + P]
    d, a, b, kept = repeated_spans(data, 10)
    outputs_hold_the_cuts(data, 10)
    assert d.tolist() == [1, 2, 3] and kept.tolist() == [0, 0, 0]


def test_first_holder_keeps_its_own_repeats_and_kept_names_it():
    s = b"0123456789" * 3
    data = [b"x" + s + b"y" + s, b"q" + s + b"r", b"nothing"]
    d, a, b, kept = repeated_spans(data, 10)
    assert d.tolist() == [1] and [a[0], b[0]] == [1, 31] and kept.tolist() == [0]


def thue_morse(n: int) -> bytes:
    return bytes(97 + bin(i).count("1") % 2 for i in range(n))


def test_hash_collision_removes_nothing():
    """Thue-Morse and its complement (2048 bytes) have the same polynomial hash mod 2^64 for every odd
    base: the byte comparison must refuse the match."""
    a = thue_morse(2048)
    b = bytes(97 + 98 - c for c in a)
    d, *_ = repeated_spans([a, b], 2048)
    assert d.size == 0
    d, s, e, kept = repeated_spans([a, b, a], 2048)
    assert d.tolist() == [2] and [s[0], e[0]] == [0, 2048] and kept.tolist() == [0]


def test_spans_hold_whole_utf8_characters():
    body = "é" * 40  # 80 bytes of two-byte characters
    data = [("a" + body + "b").encode(), ("c" + body[:-1] + "ü").encode()]
    d, a, b, _ = repeated_spans(data, 9)
    assert d.tolist() == [1]
    kept = cut(data[1], [(int(a[0]), int(b[0]))]).decode("utf-8")
    assert kept == "cü"
    assert cut(b"abcdef", [(1, 2), (4, 5)]) == b"acdf"
