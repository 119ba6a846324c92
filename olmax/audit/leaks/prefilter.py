"""The leak probe's prefilter: a bit table that says which word windows may be eval keys (never a false no).

Key. A window of words is keyed by the sum, mod 2^64, of its words' packed values (normalize.py:
base-1 value << 32 | base-2 value), multiplied by an odd constant; the key's top bits pick one bit
of a table. The probe slides each window length over a chunk's words in one compiled pass (numba):
one add and one subtract per position for the sum, a multiply, and a bit read from a 1 MiB coarse
copy of the table (it stays in cache) before the full one; the exact rolling hash is computed only
for the windows that pass.

No false negatives. The key is a function of the window's word values alone, computed the same way
on both sides, and the bit of every eval window is set: a training window equal to an eval window
always passes. False positives (then dropped by the exact lookup) are windows whose bit another key
set, a fraction 1 - exp(-keys / bits) <= 1 / bits_per_key of random windows while the table is
under its size cap (0.4% at 1.1M eval 13-grams in a 2^28-bit table), plus windows holding the same
words as an eval window in another order.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from olmax.audit.leaks.scratch import Scratch

MIX = np.uint64(0x9E3779B97F4A7C15)  # odd (2^64 / golden ratio): x -> x * MIX permutes uint64
_S32 = np.uint64(32)
_SEVEN = np.uint64(7)


def window_sums(packed: np.ndarray, k: int) -> np.ndarray:
    """uint64 (n - k + 1,): the sum of every length-k window of packed word values (wrapping: from
    prefix sums, window [i, i + k) is s[i + k] - s[i] mod 2^64, exact whatever the wrap)."""
    if packed.size < k:
        return np.zeros(0, dtype=np.uint64)
    s = np.empty(packed.size + 1, dtype=np.uint64)
    s[0] = 0
    np.cumsum(packed, out=s[1:])
    return s[k:] - s[:-k]


class WindowFilter:
    """Bit table over window sums: `window_candidates(packed, k)` keeps every length-k window of a word
    sequence whose sum was inserted.

    A sum's slot: mixed = sum * MIX; the byte is the mixed key's top bits, the bit inside it is bits
    32..34 (below the byte index, which takes at most 29 bits). Two levels: the full table, and a
    coarse copy (each byte the OR of `coarse` consecutive bytes, at most 1 MiB, so it stays in cache)
    that every window tries first. A window passes the coarse table whenever it passes the full one,
    so the answer is the full table's; only the windows that pass the coarse table touch the full one."""

    def __init__(
        self, sums: np.ndarray, bits_per_key: int = 128, max_bits: int = 30, coarse_bytes: int = 1 << 20
    ):
        if not 16 <= max_bits <= 32:
            raise ValueError(
                f"max_bits must lie in [16, 32] (the bit index uses key bits 32..34), got {max_bits}"
            )
        sums = np.ascontiguousarray(sums, dtype=np.uint64)
        # 2^bits >= bits_per_key * keys, between 2^16 (8 KiB) and 2^max_bits (128 MiB at 30)
        bits = int(np.clip(np.ceil(np.log2(max(1, sums.size) * bits_per_key)), 16, max_bits))
        self.bits = bits
        self.table = np.zeros(1 << (bits - 3), dtype=np.uint8)
        self._byte_shift = np.uint64(64 - (bits - 3))
        _insert(sums, self.table, self._byte_shift)
        self.coarse = max(1, self.table.size // coarse_bytes)
        self._coarse_byte_shift = self._byte_shift + np.uint64(self.coarse.bit_length() - 1)
        self.coarse_table = (
            np.bitwise_or.reduce(self.table.reshape(-1, self.coarse), axis=1)
            if self.coarse > 1
            else self.table
        )

    @property
    def fill(self) -> float:
        """Fraction of set bits: the false-positive rate on windows unrelated to the keys."""
        return float(np.unpackbits(self.table).mean())

    def window_candidates(self, packed: np.ndarray, k: int, lo: int = 0) -> np.ndarray:
        """int64: the starts i >= lo of the length-k windows packed[i:i + k] whose sum's bit is set."""
        packed = np.ascontiguousarray(packed, dtype=np.uint64)
        if k < 1 or packed.size - k + 1 - lo <= 0:
            return np.zeros(0, np.int64)
        cand, mixed = _SCRATCH.get(packed.size + 1)
        # built per call, not kept: the filter travels to workers attribute by attribute (olmax.wire)
        tables = FilterTables(self.table, self.coarse_table, self._byte_shift, self._coarse_byte_shift)
        got = _window_hits(packed, k, lo, tables, cand, mixed)
        return cand[:got].copy()


class FilterTables(NamedTuple):
    """A WindowFilter's two bit tables as the compiled pass takes them: one argument (numba reads a
    NamedTuple of arrays and scalars in nopython mode), each table with the shift that turns a mixed key
    into its byte index."""

    table: np.ndarray  # uint8: the full table
    coarse_table: np.ndarray  # uint8: each byte the OR of `coarse` bytes of the full one
    byte_shift: np.uint64  # mixed key >> byte_shift: the byte of the full table
    coarse_byte_shift: np.uint64  # mixed key >> coarse_byte_shift: the byte of the coarse table


_SCRATCH = Scratch(np.int64, np.uint64)  # the windows that pass the coarse table, and their mixed keys


@njit(cache=True, nogil=True)
def _insert(sums, table, byte_shift):
    for i in range(sums.size):
        x = sums[i] * MIX
        table[x >> byte_shift] |= np.uint8(1) << np.uint8((x >> _S32) & _SEVEN)


@njit(cache=True, nogil=True)
def _window_hits(values, k, lo, tables, cand, mixed):
    """How many of the windows values[i:i + k], i >= lo, pass the filter (`tables`: FilterTables); their
    starts are left in cand[:count]. The windows' sums slide along (wrapping uint64 adds: the same sums
    as window_sums gives).

    Branch-free (a window passes the coarse table at random, which no branch predictor guesses): every
    window is written to the next slot of cand/mixed and the slot is kept when its bit is set; then
    the same over the coarse table's passes against the full table."""
    table, coarse_table, byte_shift, coarse_byte_shift = tables
    c = 0
    s = np.uint64(0)
    for j in range(lo, lo + k):
        s += values[j]
    end = values.size - k + 1
    i = lo
    while True:
        x = s * MIX
        cand[c] = i
        mixed[c] = x
        c += (coarse_table[x >> coarse_byte_shift] >> ((x >> _S32) & _SEVEN)) & 1
        i += 1
        if i >= end:
            break
        s += values[i + k - 1] - values[i - 1]
    got = 0
    for j in range(c):
        x = mixed[j]
        cand[got] = cand[j]
        got += (table[x >> byte_shift] >> ((x >> _S32) & _SEVEN)) & 1
    return got
