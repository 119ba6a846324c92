"""Tests of olmax.demo: the report and its verdicts."""
