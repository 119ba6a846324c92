"""Tests of olmax.data: shards, mixes, the index, the order and the loader."""
