"""Per-thread scratch arrays for the audit's compiled kernels (normalize.py, prefilter.py).

A kernel that needs temporaries as large as its input (a 1M-token chunk) gets them here instead of
allocating: freshly allocated arrays of several MB come from the allocator as new pages, and touching
them costs more than the kernel's own work. Each thread keeps its arrays (grown when a larger input
comes) up to `keep` elements; larger inputs get arrays of their own.
"""

from __future__ import annotations

import threading

import numpy as np


class Scratch:
    """Arrays of the given dtypes, at least n elements each, private to the calling thread."""

    def __init__(self, *dtypes, keep: int = 1 << 22):
        self.dtypes = [np.dtype(d) for d in dtypes]
        self.keep = keep
        self._local = threading.local()

    def get(self, n: int) -> tuple[np.ndarray, ...]:
        have = getattr(self._local, "arrays", None)
        if have is not None and have[0].size >= n:
            return have
        size = max(n, 1 << 12)
        arrays = tuple(np.empty(size, d) for d in self.dtypes)
        if size <= self.keep:
            self._local.arrays = arrays
        return arrays
