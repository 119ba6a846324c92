"""Tests of bench/: the record and the harness, the benchmarks' smoke runs and the cited figures."""
