"""Tests of olmax.evalsets: eval-set names and reading."""
