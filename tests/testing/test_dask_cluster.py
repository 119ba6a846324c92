"""olmax/testing/dask_cluster.py: a loopback scheduler and workers that are gone after the block, even when it raised."""

from __future__ import annotations

import pytest


def test_the_cluster_runs_work_and_stops_when_the_block_raises():
    distributed = pytest.importorskip("distributed")
    from olmax.testing.dask_cluster import dask_cluster

    with pytest.raises(RuntimeError, match="a failing test"):
        with dask_cluster(workers=1, timeout=60) as address:
            with distributed.Client(address, timeout=30) as client:
                assert client.submit(sum, [1, 2]).result(timeout=30) == 3
            raise RuntimeError("a failing test")
    with pytest.raises(OSError):  # nothing listens there any more
        distributed.Client(address, timeout=2)
