"""Audit: span hashing, repeat and leakage detection, loader and stream audits, launch gates.

Public API (each also behind an `olmax audit ...` command that writes a JSON report and exits 1
when a gated check fails):
- `audit_loader(LoaderAuditConfig)`  — replay a run's plan: repeats, rank overlap, shares, copies;
- `audit_leaks(LeakConfig)`          — held-out eval items inside the training data;
- `audit_dedup(DedupConfig)`         — duplicate documents and repeated >= 50-token spans;
- `audit_stream(StreamConfig)`       — the rows a loader actually emitted vs the mix;
- `StreamMonitor`                    — online replay alerts during training;
- `window_hashes`, `PrefixHasher`, `spans_hashes` — the span hashes they share.
"""

import importlib

# Lazy exports: `olmax --help` imports olmax.audit.cli, which must not pull numpy in through here.
_EXPORTS = {
    "DedupConfig": "dedup", "audit_dedup": "dedup",
    "PrefixHasher": "hashing", "spans_hashes": "hashing", "window_hashes": "hashing",
    "LeakConfig": "leaks", "audit_leaks": "leaks",
    "LoaderAuditConfig": "loader_audit", "audit_loader": "loader_audit",
    "ReplayError": "monitor", "StreamMonitor": "monitor",
    "StreamConfig": "stream", "audit_stream": "stream",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"olmax.audit.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'olmax.audit' has no attribute {name!r}")
