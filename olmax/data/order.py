"""The order of instances in an epoch: OLMo-core's cached PCG64 permutation, or a stateless keyed one.

Contract. `olmo-core` (the default, AI2 parity): epoch e (1-based) is `arange(N, uint32)` shuffled in
place by `numpy.random.Generator(PCG64(seed + e))`; it is built once, written atomically to
`WORK_DIR/order-olmo-core-n{N}-seed{S}-epoch{E}.u32` (raw uint32, the layout OLMo-core memmaps) and
read through a memmap, so every process on a host shares one page-cache copy and a process's
resident memory holds only the pages it touches; the loaders of one process share one mapping. `feistel`: a bijection of [0, N) built from a
balanced Feistel network keyed by (seed, epoch) with cycle walking: O(1) memory, no file, and any
position is computed directly; it is NOT OLMo-core's order. Both depend only on (N, seed, epoch).
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Protocol

import numpy as np

from olmax.atomic import temp_path
from olmax.errors import OlmaxError
from olmax.hashing import mix64_array, mix64_int

ORDER_KINDS = ("olmo-core", "feistel")
_build_lock = threading.Lock()


class EpochOrder(Protocol):
    """The instance ids of one epoch, by position in the epoch's permutation."""

    num_instances: int

    def take(self, start: int, stop: int, step: int = 1) -> np.ndarray:
        """Instance ids at positions range(start, stop, step), as uint32 or uint64."""
        ...


def default_work_dir() -> str:
    """$OLMAX_WORK_DIR, else a folder in the system temp dir (as OLMo-core defaults to the temp dir)."""
    return os.environ.get("OLMAX_WORK_DIR") or os.path.join(tempfile.gettempdir(), "olmax-work")


def work_dir_path(work_dir: str | None) -> Path:
    """Where order files and the demo mix live: `work_dir`, else $OLMAX_WORK_DIR, else the temp dir."""
    return Path(work_dir or default_work_dir())


def olmo_core_permutation(num_instances: int, seed: int, epoch: int) -> np.ndarray:
    """OLMo-core's epoch order, in memory: arange(N, uint32) shuffled by PCG64(seed + epoch)."""
    if epoch < 1:
        raise OlmaxError(f"--epoch must be >= 1 (epochs are 1-based, as in OLMo-core), got {epoch}")
    if num_instances >= np.iinfo(np.uint32).max:
        raise OlmaxError(
            f"{num_instances} instances do not fit OLMo-core's uint32 order; use "
            f"order='feistel' or a longer --seq-len"
        )
    perm = np.arange(num_instances, dtype=np.uint32)
    np.random.Generator(np.random.PCG64(seed + epoch)).shuffle(perm)
    return perm


def build_order_file(path: str, num_instances: int, seed: int, epoch: int, *, progress: bool = False) -> None:
    """Write OLMo-core's epoch order to `path` (atomically): arange(N, uint32) shuffled in place by
    PCG64(seed + epoch), then written out sequentially in blocks.

    Memory: the one N-element uint32 array (4N bytes: 2.9 GB at stage 1), no other N-sized temporary, freed
    before returning. Shuffling inside the file's shared mapping instead would hold no anonymous memory,
    but measured at stage 1 the kernel's writeback of the randomly re-dirtied pages wrote 800 GB in 16
    minutes without finishing (docs/scale.md): the exact Fisher-Yates needs the array in RAM."""

    if epoch < 1:
        raise OlmaxError(f"--epoch must be >= 1 (epochs are 1-based, as in OLMo-core), got {epoch}")
    if num_instances >= np.iinfo(np.uint32).max:
        raise OlmaxError(
            f"{num_instances} instances do not fit OLMo-core's uint32 order; use "
            f"order='feistel' or a longer --seq-len"
        )
    perm = np.arange(num_instances, dtype=np.uint32)
    with _Ticker(progress, num_instances, f"order epoch {epoch}: shuffle"):
        np.random.Generator(np.random.PCG64(seed + epoch)).shuffle(perm)
    bar = _bar(progress, num_instances, f"order epoch {epoch}: write")
    with temp_path(path) as tmp, open(tmp, "wb") as f:
        for a in range(0, num_instances, _FILL_BLOCK):
            b = min(num_instances, a + _FILL_BLOCK)
            f.write(memoryview(perm[a:b]))  # a view: no copy
            bar.update(b - a)
        f.flush()
        os.fsync(f.fileno())
    bar.close()
    del perm


_FILL_BLOCK = 1 << 22
SHUFFLE_NS_PER_INSTANCE = 130.0  # measured on the dev machine (docs/scale.md); only feeds the shuffle's ETA


def _bar(enabled: bool, total: int, desc: str):
    from tqdm import tqdm

    # enabled: shown on a terminal only (tqdm's disable=None), so logs and tests stay clean
    return tqdm(
        total=total, desc=desc, unit="inst", unit_scale=True, disable=None if enabled else True, leave=False
    )


class _Ticker:
    """A progress bar for one long C call (the shuffle cannot report progress): advanced by elapsed time
    against the expected duration, so it shows elapsed time and an estimated remainder, capped below 100%."""

    def __init__(self, enabled: bool, total: int, desc: str):
        self.enabled, self.total, self.desc = enabled, total, desc

    def __enter__(self) -> _Ticker:
        if not self.enabled:
            return self

        self._stop = threading.Event()
        self._bar = _bar(True, self.total, self.desc + " (ETA estimated)")
        expected = max(1e-3, self.total * SHUFFLE_NS_PER_INSTANCE * 1e-9)
        t0 = time.perf_counter()

        def tick() -> None:
            while not self._stop.wait(0.5):
                done = min(0.99, (time.perf_counter() - t0) / expected) * self.total
                self._bar.update(int(done) - self._bar.n)

        self._thread = threading.Thread(target=tick, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self._stop.set()
            self._thread.join()
            self._bar.update(self.total - self._bar.n)
            self._bar.close()


def order_file_path(work_dir: str, num_instances: int, seed: int, epoch: int) -> str:
    return os.path.join(work_dir, f"order-olmo-core-n{num_instances}-seed{seed}-epoch{epoch}.u32")


class CachedOrder:
    """OLMo-core's permutation for one epoch, memmapped from the work dir (built there if missing)."""

    def __init__(self, work_dir: str, num_instances: int, seed: int, epoch: int, *, progress: bool = False):
        self.num_instances = num_instances
        self.progress = progress
        self.path = order_file_path(work_dir, num_instances, seed, epoch)
        if not self._valid():
            self._build(work_dir, seed, epoch)
        self._perm = np.memmap(self.path, dtype=np.uint32, mode="r", shape=(num_instances,))

    def _valid(self) -> bool:
        return os.path.isfile(self.path) and os.path.getsize(self.path) == 4 * self.num_instances

    def _build(self, work_dir: str, seed: int, epoch: int) -> None:
        try:
            os.makedirs(work_dir, exist_ok=True)
        except OSError as e:
            raise OlmaxError(
                f"{work_dir}: cannot create the order work dir ({e}); pass a writable "
                f"--work-dir or set OLMAX_WORK_DIR"
            ) from e
        # One builder per host: threads serialize on a lock, processes on an flock of a side file;
        # the losers find the finished file when they get the lock.
        with _build_lock, open(self.path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if self._valid():
                return
            build_order_file(self.path, self.num_instances, seed, epoch, progress=self.progress)

    def take(self, start: int, stop: int, step: int = 1) -> np.ndarray:
        return np.array(self._perm[start:stop:step])


class MemoryOrder:
    """OLMo-core's permutation held in memory (small indexes, tests)."""

    def __init__(self, num_instances: int, seed: int, epoch: int):
        self.num_instances = num_instances
        self._perm = olmo_core_permutation(num_instances, seed, epoch)

    def take(self, start: int, stop: int, step: int = 1) -> np.ndarray:
        return self._perm[start:stop:step].copy()


class FeistelOrder:
    """A keyed bijection of [0, N): a balanced Feistel network on 2h bits (4^h >= N), cycle-walked."""

    def __init__(self, num_instances: int, seed: int, epoch: int, rounds: int = 8):
        if num_instances < 1:
            raise OlmaxError("the index has no instances; nothing to order")
        if epoch < 1:
            raise OlmaxError(f"--epoch must be >= 1 (epochs are 1-based), got {epoch}")
        self.num_instances = num_instances
        half = max(1, (max(1, (num_instances - 1).bit_length()) + 1) // 2)
        self._half = np.uint64(half)
        self._mask = np.uint64((1 << half) - 1)
        base = mix64_int(seed * 0x9E3779B97F4A7C15 + epoch * 0xD1B54A32D192ED03 + 0x632BE59BD9B4E019)
        self._keys = [np.uint64(mix64_int(base + i * 0x9E3779B97F4A7C15)) for i in range(rounds)]

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> self._half, x & self._mask
        for key in self._keys:
            left, right = right, left ^ (mix64_array(right ^ key) & self._mask)
        return (left << self._half) | right

    def permute(self, positions: np.ndarray) -> np.ndarray:
        """uint64 instance ids of the given positions; walks the cycle until each lands below N."""
        y = self._encrypt(np.asarray(positions, dtype=np.uint64))
        n = np.uint64(self.num_instances)
        out_of_range = np.flatnonzero(y >= n)
        while out_of_range.size:
            y[out_of_range] = self._encrypt(y[out_of_range])
            out_of_range = out_of_range[y[out_of_range] >= n]
        return y

    def take(self, start: int, stop: int, step: int = 1) -> np.ndarray:
        return self.permute(np.arange(start, stop, step, dtype=np.uint64))


# The order files open in this process, by file identity: every loader of a process (one per rank in the
# loader audit) reads one shared mapping, so a page is mapped and counted once, not once per loader.
_open_orders: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_open_lock = threading.Lock()


def _file_key(path: str) -> tuple | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (path, st.st_ino, st.st_mtime_ns, st.st_size)


def _shared_order(work_dir: str, num_instances: int, seed: int, epoch: int, progress: bool) -> CachedOrder:
    path = order_file_path(work_dir, num_instances, seed, epoch)
    with _open_lock:
        key = _file_key(path)
        order = _open_orders.get(key) if key is not None else None
        if order is None:
            order = CachedOrder(work_dir, num_instances, seed, epoch, progress=progress)
            key = _file_key(path)
            if key is not None:
                _open_orders[key] = order
    return order


def epoch_order(
    kind: str,
    num_instances: int,
    seed: int,
    epoch: int,
    work_dir: str | None = None,
    *,
    progress: bool = False,
) -> EpochOrder:
    """The order of `epoch` (1-based). `olmo-core` memmaps from `work_dir` (None: held in memory);
    `progress` shows bars while an order file is built."""
    if kind == "olmo-core":
        if work_dir is None:
            return MemoryOrder(num_instances, seed, epoch)
        return _shared_order(work_dir, num_instances, seed, epoch, progress)
    if kind == "feistel":
        return FeistelOrder(num_instances, seed, epoch)
    raise OlmaxError(f"unknown order {kind!r}; choose one of {', '.join(ORDER_KINDS)}")
