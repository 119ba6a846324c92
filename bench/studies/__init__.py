"""Studies: how well a check works rather than how fast it runs (the leak rule's recall on planted items,
the dedup stage's on planted near-copies, the memorization checks' power against a dose)."""
