"""Thread-pool helpers shared by the passes that read many files."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor


def in_order(pool: ThreadPoolExecutor, fn: Callable, items: Iterable, ahead: int) -> Iterator:
    """`pool.map(fn, items)`, but with at most `ahead` items submitted and not yet consumed: a slow item
    never lets the finished ones behind it pile up, so memory holds `ahead` results at most."""
    waiting: deque = deque()
    for it in items:
        waiting.append(pool.submit(fn, it))
        if len(waiting) >= ahead:
            yield waiting.popleft().result()
    while waiting:
        yield waiting.popleft().result()
