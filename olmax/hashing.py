"""The one home of olmax's hashing: rolling hashes of token n-gram windows, xxh3 hashes of whole spans, and
splitmix64's finalizer (`mix64` in compiled kernels, `mix64_array` on numpy arrays, `mix64_int` on Python
ints) that dedup's word and shingle hashes and the loader's keyed orders are built on.

Span hashing: vectorized rolling hashes of token n-gram windows, plus xxh3 hashes of whole spans.

Scheme. A window w = (x_0, ..., x_{k-1}) of token ids (each < 2^20) hashes to
    h(w) = (H_1(w) << 32) | H_2(w),   H_b(w) = sum_j x_j * P_b^j  mod p,   p = 2^31 - 1,
with two fixed bases P_1, P_2 (Karp-Rabin over the Mersenne prime). All windows of an array are
computed at once from prefix sums: S[i] = sum_{t<i} x_t * P^t (wrapping uint64 sums are exact here:
each term is < 2^51 and a window sums at most MAX_WINDOW = 2^12 of them), then H(window at i) = (S[i+k] - S[i]) *
P^-i mod p. One pass gives windows of every length k from the same prefix sums, which is how short
eval items get an exact whole-item probe for free. About 12 numpy operations per token per base; no
Python call per window. `packed_windows` gives the same hashes for a few chosen windows of a long
array of packed word values by summing their terms directly (the leak probe's candidates: no prefix
sums over all).

Collision bound. For two different windows of length k, H_b(w) - H_b(w') is a nonzero polynomial in
P_b of degree < k over GF(p) (token ids are < 2^20 < p), so for bases drawn independently of the data
Pr[h(w) = h(w')] <= ((k - 1) / p)^2: 3.1e-17 for k = 13, 5.2e-16 for k = 50. Probing T training
windows against E eval n-grams therefore expects at most T * E * 3.1e-17 false n-gram matches:
about 190 over the 5.93T-token stage-1 mix against 1M eval 13-grams, spread over unrelated items, far
below what flags an item (see olmax/audit/leaks/). Whole instances and documents use xxh3-64 over their bytes
(one call per span; bounded by xxh3's ~9 GB/s): N spans collide with probability <= N^2 / 2^65,
i.e. 1.4e-2 for the 7.2e8 instances of stage 1, so every reported duplicate is re-checked byte for
byte before it is counted (`same_bytes`).
"""

from __future__ import annotations

import threading

import numpy as np
import xxhash
from numba import njit

MERSENNE31 = (1 << 31) - 1
# Two fixed bases in [2^29, 2^31): odd, not small powers, chosen once (any pair works; see the bound).
BASES = (1_000_003_111, 1_412_112_337)
_P = np.uint64(MERSENNE31)
_S31 = np.uint64(31)
_S32 = np.uint64(32)
_LOW32 = np.uint64(0xFFFFFFFF)
_BLOCK = 1 << 12
MAX_TOKEN = (1 << 20) - 1  # token ids must be <= this (dolma2: < 2^17); see the exactness argument
MASK64 = (1 << 64) - 1


@njit(cache=True, nogil=True, inline="always")
def mix64(x):
    """splitmix64's finalizer: a bijection of uint64 with full avalanche."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@njit(cache=True, nogil=True)
def pair_hash(x, y):
    """A 64-bit key of an unordered pair of word values (x <= y): the leak audit's paraphrase pair keys."""
    h = x * np.uint64(0x9E3779B97F4A7C15) + y * np.uint64(0xC2B2AE3D27D4EB4F)
    h ^= h >> np.uint64(29)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(32)
    return h


def mix64_array(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer on uint64 arrays (wrapping arithmetic): a fast, well-spread hash."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def mix64_int(x: int) -> int:
    """splitmix64's finalizer on a Python int, taken modulo 2^64."""
    x &= MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


MAX_WINDOW = 1 << 12


def reduce_mod(a: np.ndarray, tmp: np.ndarray) -> np.ndarray:
    """a mod p in place, for any uint64 a (two Mersenne folds, then one conditional subtract)."""
    np.right_shift(a, _S31, out=tmp)
    a &= _P
    a += tmp
    np.right_shift(a, _S31, out=tmp)
    a &= _P
    a += tmp
    np.subtract(a, _P, out=tmp)  # a < 2p here: a - p, or a huge wrapped value when a < p
    np.minimum(a, tmp, out=a)
    return a


def fold_mod(a: np.ndarray, tmp: np.ndarray) -> np.ndarray:
    """One Mersenne fold in place: a' = (a & p) + (a >> 31) is congruent to a mod p; for a < 2^63,
    a' < 2^31 + 2^32."""
    np.right_shift(a, _S31, out=tmp)
    a &= _P
    a += tmp
    return a


def powers_mod(base: int, n: int) -> np.ndarray:
    """uint64 (n,): base^i mod p, built as an outer product of a small and a strided table."""
    small = np.empty(_BLOCK, dtype=np.uint64)
    v = 1
    for i in range(_BLOCK):
        small[i] = v
        v = v * base % MERSENNE31
    nb = -(-n // _BLOCK)
    big = np.empty(nb, dtype=np.uint64)
    w, step = 1, pow(base, _BLOCK, MERSENNE31)
    for i in range(nb):
        big[i] = w
        w = w * step % MERSENNE31
    out = (big[:, None] * small[None, :]).ravel()[:n].copy()
    return reduce_mod(out, np.empty_like(out))


class _PowerCache:
    """Forward and inverse powers of both bases, grown on demand (shared by all callers in a process)."""

    def __init__(self) -> None:
        self.n = 0
        self.tables: tuple[list[np.ndarray], list[np.ndarray]] = ([], [])
        self._lock = threading.Lock()

    def get(self, n: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        fwd, inv = self.tables  # one consistent pair, even while another thread grows the tables
        if fwd and n <= fwd[0].size:
            return fwd, inv
        with self._lock:
            if n > self.n:
                size = max(n, 1 << 16, 2 * self.n)
                self.tables = (
                    [powers_mod(b, size) for b in BASES],
                    [powers_mod(pow(b, -1, MERSENNE31), size) for b in BASES],
                )
                self.n = size
            return self.tables


_CACHE = _PowerCache()


class PrefixHasher:
    """Prefix sums of one token array; `windows(k)` hashes all its length-k windows.

    `tokens` is one array of ids <= MAX_TOKEN (dolma2 ids are < 2^17), used by both bases, or a list
    of one array per base of values <= MAX_TOKEN (the 20-bit word values of normalize.py). Windows
    are at most MAX_WINDOW long.
    """

    def __init__(self, tokens: np.ndarray | list[np.ndarray]):
        per_base = isinstance(tokens, list)
        xs = [np.ascontiguousarray(x) for x in tokens] if per_base else [np.ascontiguousarray(tokens)]
        self.n = int(xs[0].size)
        fwd, self._inv = _CACHE.get(max(1, self.n))
        self._sums = []
        for b in range(len(BASES)):
            x = xs[b] if per_base else xs[0]
            s = np.zeros(self.n + 1, dtype=np.uint64)
            np.multiply(x, fwd[b][: self.n], out=s[1:], casting="unsafe")
            np.cumsum(s[1:], out=s[1:])
            self._sums.append(s)

    def windows(self, k: int, stride: int = 1) -> np.ndarray:
        """uint64 (ceil((n - k + 1) / stride),): hash of the window starting at each stride-th position."""
        m = self.n - k + 1
        if not 0 < k <= MAX_WINDOW:
            raise ValueError(f"window length must lie in [1, {MAX_WINDOW}], got {k}")
        if m <= 0:
            return np.zeros(0, dtype=np.uint64)
        out = None
        for b, s in enumerate(self._sums):
            d = s[k : k + m : stride] - s[0:m:stride]  # exact: the window's sum is < 2^63
            tmp = np.empty_like(d)
            fold_mod(d, tmp)  # < 2^33, so the product below stays < 2^64
            d *= self._inv[b][0:m:stride]
            reduce_mod(d, tmp)
            if out is None:
                out = d << np.uint64(32)
            else:
                out |= d
        return out

    def windows_at(self, k: int, starts: np.ndarray) -> np.ndarray:
        """uint64: hashes of the length-k windows starting at `starts` (each + k <= n)."""
        starts = np.asarray(starts, dtype=np.int64)
        out = None
        for b, s in enumerate(self._sums):
            d = s[starts + k] - s[starts]
            tmp = np.empty_like(d)
            reduce_mod(d, tmp)
            d *= self._inv[b][starts]
            reduce_mod(d, tmp)
            out = d << np.uint64(32) if out is None else out | d
        return out if out is not None else np.zeros(0, np.uint64)


def packed_windows(
    packed: np.ndarray, starts: np.ndarray, lengths: int | np.ndarray, block: int = 1 << 16
) -> np.ndarray:
    """uint64: `PrefixHasher([packed >> 32, packed & (2^32 - 1)]).windows_at(k, starts)` without prefix
    sums (each window's two halves, values <= MAX_TOKEN, summed term by term), with one window length
    k for all, or one per window (`lengths` an array like `starts`, each in [1, MAX_WINDOW], each window
    inside `packed`): windows of several lengths in one pass."""
    starts = np.asarray(starts, dtype=np.int64)
    out = np.empty(starts.size, dtype=np.uint64)
    if starts.size == 0:
        return out
    per = np.ndim(lengths) > 0
    lens = np.asarray(lengths, dtype=np.int64)
    k = int(lens.max()) if per else int(lengths)
    if not 0 < (int(lens.min()) if per else k) <= k <= MAX_WINDOW:
        raise ValueError(f"window lengths must lie in [1, {MAX_WINDOW}]")
    fwd, _ = _CACHE.get(k)
    span = np.arange(k, dtype=np.int64)
    step = max(1, block // k)
    for a in range(0, starts.size, step):
        at = starts[a : a + step, None] + span  # (windows, k)
        if per:
            keep = span < lens[a : a + step, None]  # the terms of shorter windows end early
            np.minimum(at, packed.size - 1, out=at)
        x = packed.take(at)
        half = x >> _S32
        x &= _LOW32
        if per:
            half *= keep
            x *= keep
        half *= fwd[0][:k]  # each term < 2^20 * 2^31, a window's sum < 2^63 (k <= MAX_WINDOW)
        x *= fwd[1][:k]
        h = np.empty((2, at.shape[0]), dtype=np.uint64)  # both bases reduced together
        half.sum(axis=1, out=h[0])
        x.sum(axis=1, out=h[1])
        reduce_mod(h, np.empty_like(h))
        h[0] <<= _S32
        h[0] |= h[1]
        out[a : a + step] = h[0]
    return out


def window_hashes(tokens: np.ndarray, k: int, stride: int = 1) -> np.ndarray:
    """uint64: the rolling hash of every length-k window of `tokens` (see the module docstring)."""
    return PrefixHasher(tokens).windows(k, stride)


def spans_hashes(tokens: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """uint64: xxh3-64 of tokens[starts[i]:ends[i]] for each i (one xxh3 call per span, no copies)."""
    buf = memoryview(np.ascontiguousarray(tokens, dtype="<u4")).cast("B")
    out = np.empty(len(starts), dtype=np.uint64)
    h = xxhash.xxh3_64_intdigest
    for i, (a, b) in enumerate(zip(np.asarray(starts).tolist(), np.asarray(ends).tolist())):
        out[i] = h(buf[4 * a : 4 * b])
    return out


def window_spans_hashes(tokens: np.ndarray, length: int) -> np.ndarray:
    """uint64: xxh3-64 of each whole window [w*length, (w+1)*length) (a file's instances)."""
    n = len(tokens) // length
    starts = np.arange(n, dtype=np.int64) * length
    return spans_hashes(tokens, starts, starts + length)


def row_hashes(rows: np.ndarray) -> np.ndarray:
    """uint64 (R,): xxh3-64 of each row's uint32 bytes (token ids are < 2^31: int32 rows view as-is)."""
    flat = np.ascontiguousarray(rows).view(np.uint32).reshape(-1)
    return window_spans_hashes(flat, rows.shape[-1])


def packed_row_hashes(index, chunk_tokens: int = 1 << 26) -> np.ndarray:
    """uint64 (N,): `row_hashes` of every row of a packed index (olmax.data.packing.PackedIndex) as the loader
    emits it, read `chunk_tokens` at a time."""
    chunk = max(1, chunk_tokens // index.seq_len)
    parts = [
        row_hashes(index.read(np.arange(a, min(index.num_instances, a + chunk), dtype=np.int64))["input_ids"])
        for a in range(0, index.num_instances, chunk)
    ]
    return np.concatenate(parts) if parts else np.zeros(0, np.uint64)


class StreamedSpans:
    """`spans_hashes` of a token stream that arrives in consecutive blocks (the same values): `feed` hashes
    the spans that end in a block, those inside it at once and the one carried in from earlier blocks
    through an xxh3-64 state; `open_start` (where the span cut by the block's end starts, or None) starts
    the next carried state, so no block is ever copied or kept."""

    def __init__(self) -> None:
        self._open: tuple[int, xxhash.xxh3_64] | None = None

    def feed(
        self, base: int, block: np.ndarray, starts: np.ndarray, ends: np.ndarray, open_start: int | None
    ) -> np.ndarray:
        """uint64: the hash of each span [starts[i], ends[i]) (file offsets, ascending, ending in this block;
        only the first may start before `base`), `block` holding tokens [base, base + len(block))."""
        tokens = np.ascontiguousarray(block, dtype="<u4")
        buf = memoryview(tokens).cast("B")
        out = np.empty(len(starts), dtype=np.uint64)
        inside = 0
        if len(starts) and starts[0] < base:
            state = self._carried(int(starts[0]))
            state.update(buf[: 4 * (int(ends[0]) - base)])
            out[0] = state.intdigest()
            self._open, inside = None, 1
        out[inside:] = spans_hashes(
            tokens, np.asarray(starts[inside:]) - base, np.asarray(ends[inside:]) - base
        )
        end = base + tokens.size
        if open_start is None or open_start >= end:
            self._open = None
        elif open_start < base:
            self._carried(open_start).update(buf)
        else:
            state = xxhash.xxh3_64()
            state.update(buf[4 * (open_start - base) :])
            self._open = (open_start, state)
        return out

    def _carried(self, start: int) -> xxhash.xxh3_64:
        if self._open is None or self._open[0] != start:
            raise ValueError(f"StreamedSpans: the span at {start} was not carried from the previous block")
        return self._open[1]
