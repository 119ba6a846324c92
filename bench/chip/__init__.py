"""Runs on a TPU chip and their peer: olmax's train step beside MaxText's (tpu_mfu, maxtext_peer) and its
training claims as one device command (tpu_seed); each has a CPU smoke that CI runs."""
