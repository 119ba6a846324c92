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

from olmax.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(
    __name__,
    {
        "DedupConfig": "olmax.audit.audit_config",
        "audit_dedup": "olmax.audit.dedup",
        "PrefixHasher": "olmax.hashing",
        "spans_hashes": "olmax.hashing",
        "window_hashes": "olmax.hashing",
        "LeakConfig": "olmax.audit.audit_config",
        "audit_leaks": "olmax.audit.leaks.run",
        "LoaderAuditConfig": "olmax.audit.audit_config",
        "audit_loader": "olmax.audit.loader_audit",
        "ReplayError": "olmax.audit.monitor",
        "StreamMonitor": "olmax.audit.monitor",
        "StreamConfig": "olmax.audit.audit_config",
        "audit_stream": "olmax.audit.emitted",
    },
)
