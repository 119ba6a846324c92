"""Tests of olmax.dedup: MinHash in memory and out of core, repeated byte spans."""
