"""Tests of olmax.train: the step, checkpoints, resume, the run record, multi-process runs."""
