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

from olmax.audit.dedup import DedupConfig, audit_dedup
from olmax.audit.hashing import PrefixHasher, spans_hashes, window_hashes
from olmax.audit.leaks import LeakConfig, audit_leaks
from olmax.audit.loader_audit import LoaderAuditConfig, audit_loader
from olmax.audit.monitor import ReplayError, StreamMonitor
from olmax.audit.stream import StreamConfig, audit_stream

__all__ = ["DedupConfig", "LeakConfig", "LoaderAuditConfig", "PrefixHasher", "ReplayError",
           "StreamConfig", "StreamMonitor", "audit_dedup", "audit_leaks", "audit_loader",
           "audit_stream", "spans_hashes", "window_hashes"]
