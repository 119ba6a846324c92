"""Generators and test-data builders that tests/ and bench/ share: real text as Dolma jsonl, planted leaks,
planted near-duplicates, a dedup pool, a loopback dask cluster. Nothing in the rest of the package imports
them (tests/test_architecture.py)."""
