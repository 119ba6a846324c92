"""Tests of olmax.audit: the loader, emitted-stream and dedup audits, exposure, the monitor."""
