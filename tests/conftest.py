"""Fixtures shared by every test area: a dask.distributed cluster on loopback for the DaskRunner tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # dask_cluster.py


@pytest.fixture(scope="session")
def dask_address():
    """A scheduler and two single-threaded worker processes on 127.0.0.1 (one cluster per test run)."""
    pytest.importorskip("apache_beam")
    pytest.importorskip("distributed")
    from dask_cluster import dask_cluster

    with dask_cluster(workers=2) as address:
        yield address
