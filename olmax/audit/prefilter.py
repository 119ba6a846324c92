"""The leak probe's prefilter: a bit table that says which word windows may be eval keys (never a false no).

Key. A window of words is keyed by the sum, mod 2^64, of its words' packed values (normalize.py:
base-1 value << 32 | base-2 value), multiplied by an odd constant; the key's top bits pick one bit
of a table. All windows of a chunk get their sums from one prefix sum (one subtraction each), so the
probe spends about nine numpy operations per word position and length on it (the bit is read from
a 1 MiB coarse copy of the table first, which stays in cache), against about twenty for the exact
rolling hash, which is computed only for the windows that pass.

No false negatives. The key is a function of the window's word values alone, computed the same way
on both sides, and the bit of every eval window is set: a training window equal to an eval window
always passes. False positives (then dropped by the exact lookup) are windows whose bit another key
set, a fraction 1 - exp(-keys / bits) <= 1 / bits_per_key of random windows while the table is
under its size cap (0.4% at 1.1M eval 13-grams in a 2^28-bit table), plus windows holding the same
words as an eval window in another order.
"""

from __future__ import annotations

import sys

import numpy as np

MIX = np.uint64(0x9E3779B97F4A7C15)  # odd (2^64 / golden ratio): x -> x * MIX permutes uint64
_LITTLE = sys.byteorder == "little"


def prefix_sums(packed: np.ndarray) -> np.ndarray:
    """uint64 (n + 1,): wrapping prefix sums of packed word values; window [i, i + k) sums to
    s[i + k] - s[i] (mod 2^64, exact whatever the wrap)."""
    s = np.empty(packed.size + 1, dtype=np.uint64)
    s[0] = 0
    np.cumsum(packed, out=s[1:])
    return s


def window_sums(packed: np.ndarray, k: int) -> np.ndarray:
    """uint64 (n - k + 1,): the sum of every length-k window of packed word values."""
    if packed.size < k:
        return np.zeros(0, dtype=np.uint64)
    s = prefix_sums(packed)
    return s[k:] - s[:-k]


class WindowFilter:
    """Bit table over window sums: `candidates(sums)` keeps every window whose sum was inserted.

    Two levels: the full table, and a coarse copy (each byte the OR of `coarse` consecutive bytes,
    at most 1 MiB, so it stays in cache) that every window tries first. A window passes the coarse
    table whenever it passes the full one, so the answer is the full table's; only the ~12% of
    windows that pass the coarse table touch the full one."""

    def __init__(self, sums: np.ndarray, bits_per_key: int = 128, max_bits: int = 30,
                 coarse_bytes: int = 1 << 20):
        if not 16 <= max_bits <= 32:
            raise ValueError(f"max_bits must lie in [16, 32] (the bit index uses key bits 32..34), "
                             f"got {max_bits}")
        sums = np.asarray(sums, dtype=np.uint64)
        # 2^bits >= bits_per_key * keys, between 2^16 (8 KiB) and 2^max_bits (128 MiB at 30)
        bits = int(np.clip(np.ceil(np.log2(max(1, sums.size) * bits_per_key)), 16, max_bits))
        self.bits = bits
        self.table = np.zeros(1 << (bits - 3), dtype=np.uint8)
        self._byte_shift = np.uint64(64 - (bits - 3))
        mixed = sums * MIX
        np.bitwise_or.at(self.table, (mixed >> self._byte_shift).astype(np.intp),
                         np.left_shift(np.uint8(1), self._bit(mixed)))
        self.coarse = max(1, self.table.size // coarse_bytes)
        self._coarse_shift = self.coarse.bit_length() - 1
        self._coarse_byte_shift = self._byte_shift + np.uint64(self._coarse_shift)
        self.coarse_table = np.bitwise_or.reduce(self.table.reshape(-1, self.coarse), axis=1) \
            if self.coarse > 1 else self.table

    @staticmethod
    def _bit(mixed: np.ndarray) -> np.ndarray:
        """uint8: the bit inside the byte, bits 32..34 of the mixed key (below the byte index,
        which takes the top bits - 3 <= 29 bits)."""
        if _LITTLE:
            return mixed.view(np.uint8)[4::8] & np.uint8(7)
        return (mixed >> np.uint64(32)).astype(np.uint8) & np.uint8(7)

    @property
    def fill(self) -> float:
        """Fraction of set bits: the false-positive rate on windows unrelated to the keys."""
        return float(np.unpackbits(self.table).mean())

    def candidates(self, sums: np.ndarray) -> np.ndarray:
        """int64: indices of the windows whose bit is set. Overwrites `sums` (a uint64 temporary)."""
        sums = np.ascontiguousarray(sums, dtype=np.uint64)
        sums *= MIX
        bit = self._bit(sums)
        if self.coarse == 1:
            sums >>= self._byte_shift  # the byte in the table, < 2^29: an intp view indexes fast
            got = self.table.take(sums.view(np.int64))
            got >>= bit
            got &= np.uint8(1)
            return got.view(bool).nonzero()[0]  # 0/1 bytes: bool's nonzero is several times faster
        got = self.coarse_table.take((sums >> self._coarse_byte_shift).view(np.int64))
        got >>= bit
        got &= np.uint8(1)
        cand = got.view(bool).nonzero()[0]
        byte = sums[cand]  # the full table's byte: only for the windows that pass the coarse one
        byte >>= self._byte_shift
        got = self.table.take(byte.view(np.int64))
        got >>= bit[cand]
        got &= np.uint8(1)
        return cand[got.view(bool)]
