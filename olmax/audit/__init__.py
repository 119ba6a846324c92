"""Audit: span hashing, repeat and leakage detection, loader audits and launch gates."""
