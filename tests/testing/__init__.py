"""Tests of olmax.testing: the generators and builders tests/ and bench/ share."""
