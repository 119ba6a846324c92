"""Evals: held-out loss and bits-per-byte, memorization flags, an lm-eval adapter."""
