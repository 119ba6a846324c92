"""Connected components of verified near-duplicate edges, each labelled by its smallest member (the
first document in input order, the one kept)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _find(parent, x):
    root = x
    while parent[root] != root:
        root = parent[root]
    while parent[x] != root:  # path compression
        nxt = parent[x]
        parent[x] = root
        x = nxt
    return root


@njit(cache=True, nogil=True)
def _label(n, a, b):
    parent = np.arange(n, dtype=np.int64)
    for e in range(a.size):
        ra, rb = _find(parent, a[e]), _find(parent, b[e])
        if ra < rb:  # the smaller index is the root: a component's label is its first member
            parent[rb] = ra
        elif rb < ra:
            parent[ra] = rb
    for x in range(n):
        parent[x] = _find(parent, x)
    return parent


def min_labels(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """For nodes 0..n-1 and edges (a[i], b[i]): each node's component label, the component's smallest
    node (independent of the edges' order)."""
    return _label(n, np.asarray(a, np.int64), np.asarray(b, np.int64))
