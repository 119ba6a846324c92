"""Tests of olmax.data.prepare: the local and Beam runners and the dedup stages."""
