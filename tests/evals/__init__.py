"""Tests of olmax.evals: held-out loss, downstream tasks, memorization, the watcher."""
