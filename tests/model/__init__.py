"""Tests of olmax.model: layers, attention kernels, conversion and parity."""
