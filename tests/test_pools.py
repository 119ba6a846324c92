"""olmax.pools.in_order: pool.map's order and errors, with a bounded number of results held."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from olmax.pools import in_order


def test_results_in_input_order_with_at_most_ahead_submitted():
    started, lock = [], threading.Lock()

    def slow_first(i):
        with lock:
            started.append(i)
        time.sleep(0.05 if i == 0 else 0.0)  # item 0 finishes last: the others must not run far ahead
        return i * i

    with ThreadPoolExecutor(4) as pool:
        out = []
        for r in in_order(pool, slow_first, range(20), ahead=3):
            out.append(r)
            assert len(started) <= len(out) + 3
    assert out == [i * i for i in range(20)]


def test_an_error_reaches_the_consumer_at_its_place():
    def fail_at_5(i):
        if i == 5:
            raise ValueError("item 5")
        return i

    got = []
    with ThreadPoolExecutor(2) as pool, pytest.raises(ValueError, match="item 5"):
        for r in in_order(pool, fail_at_5, range(10), ahead=2):
            got.append(r)
    assert got == [0, 1, 2, 3, 4]
