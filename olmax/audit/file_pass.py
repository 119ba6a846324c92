"""One pass over one physical file of a mix, block by block: the map that the loader audit's content checks
(content.py), `audit dedup` (dedup.py) and both on Beam (loader_beam.py, dedup_beam.py) run on every file.

The file is read where it is (olmax.data.token_reads: a local memory map, or a URL's byte ranges with
read-ahead), in blocks of about BLOCK_BYTES whose length is a multiple of the window length, so each block
holds whole instance windows. From each block, as asked by `PassSettings`:
- "instances": INSTANCE_REC, xxh3-64 of every whole L-token window (window w = tokens [w L, (w + 1) L));
- "docs": DOC_REC, xxh3-64 of every document of at least `min_doc_tokens` tokens (olmax.data.documents'
  boundaries: the sidecar's, else EOS), a document cut by a block boundary hashed through a carried state;
- "spans": SPAN_REC, the rolling hash of every `span`-token window holding no EOS (the previous block's
  last span - 1 tokens kept, so windows across a boundary are hashed once).
The records are the ones the whole file would give at once, whatever the block size; only the order they
come out in differs, and every reduce sorts them. The pass returns the file's PassTotals.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xxhash

from olmax.data.documents import DocumentBounds, sidecar_documents
from olmax.data.stream import DOLMA2_EOS
from olmax.data.token_reads import TokenFile
from olmax.hashing import PrefixHasher, StreamedSpans, window_spans_hashes

INSTANCE_REC = np.dtype([("hash", "<u8"), ("phys", "<i4"), ("window", "<i8")])
DOC_REC = np.dtype([("hash", "<u8"), ("phys", "<i4"), ("doc", "<i8"), ("start", "<i8"), ("ntok", "<i8")])
SPAN_REC = np.dtype([("hash", "<u8"), ("phys", "<i4"), ("pos", "<i8")])


@dataclass(frozen=True)
class PassSettings:
    """What one pass hashes: instance windows of `seq_len` tokens (None: none), documents of at least
    `min_doc_tokens` tokens (docs=False: none), `span`-token windows (0: none), `chunk_tokens` of spans
    at a time."""

    seq_len: int | None = None
    docs: bool = True
    min_doc_tokens: int = 32
    span: int = 0
    chunk_tokens: int = 1 << 20
    eos_token_id: int = DOLMA2_EOS


@dataclass(frozen=True)
class PassTotals:
    """One physical file's summary: its tokens, the tokens in documents, documents, documents compared
    (>= min_doc_tokens) and the xxh3-128 digest of its token bytes (0 when empty; identical files are
    compared by it first)."""

    tokens: int
    doc_tokens: int
    docs: int
    compared: int
    digest: int


def file_pass(item: tuple[int, str], settings: PassSettings):
    """The map over one (physical id, path or URL): yields (kind, records) as the module says, returns
    its PassTotals."""
    phys, path = item
    f = TokenFile(path)
    n = f.block_tokens()
    if settings.seq_len:
        n = max(settings.seq_len, n // settings.seq_len * settings.seq_len)
    docs = _Docs(phys, settings, sidecar_documents(path, len(f))) if settings.docs else None
    spans = _Spans(phys, settings) if settings.span > 0 else None
    digest = xxhash.xxh3_128()
    for base, block in f.blocks(n):
        digest.update(np.ascontiguousarray(block))
        if settings.seq_len:
            h = window_spans_hashes(block, settings.seq_len)
            rec = np.empty(h.size, dtype=INSTANCE_REC)
            rec["hash"], rec["phys"] = h, phys
            rec["window"] = base // settings.seq_len + np.arange(h.size)
            yield "instances", rec
        if docs is not None:
            yield "docs", docs.feed(base, block)
        if spans is not None:
            yield from (("spans", rec) for rec in spans.feed(base, block))
    if docs is not None:
        yield "docs", docs.finish(len(f))
    return PassTotals(
        len(f),
        docs.tokens if docs else 0,
        docs.count if docs else 0,
        docs.compared if docs else 0,
        digest.intdigest() if len(f) else 0,
    )


class _Docs:
    """DOC_REC of the documents a file's blocks complete, with the counts PassTotals reports."""

    def __init__(self, phys: int, settings: PassSettings, known):
        self.phys, self.min_tokens = phys, settings.min_doc_tokens
        self.bounds = DocumentBounds(known, settings.eos_token_id)
        self.hashes = StreamedSpans()
        self.tokens = self.count = self.compared = 0

    def feed(self, base: int, block: np.ndarray) -> np.ndarray:
        ordinals, starts, ends = self.bounds.feed(base, block)
        return self._records(base, block, ordinals, starts, ends)

    def finish(self, total: int) -> np.ndarray:
        ordinals, starts, ends = self.bounds.finish(total)
        return self._records(total, np.zeros(0, np.uint32), ordinals, starts, ends)

    def _records(self, base, block, ordinals, starts, ends) -> np.ndarray:
        lengths = ends - starts
        self.tokens += int(lengths.sum())
        self.count += int(lengths.size)
        h = self.hashes.feed(base, block, starts, ends, self.bounds.open_start())
        keep = lengths >= self.min_tokens
        self.compared += int(keep.sum())
        rec = np.empty(int(keep.sum()), dtype=DOC_REC)
        rec["hash"], rec["phys"], rec["doc"] = h[keep], self.phys, ordinals[keep]
        rec["start"], rec["ntok"] = starts[keep], lengths[keep]
        return rec


class _Spans:
    """SPAN_REC of the `span`-token windows ending in each block (the last span - 1 tokens carried)."""

    def __init__(self, phys: int, settings: PassSettings):
        self.phys, self.span, self.chunk = phys, settings.span, settings.chunk_tokens
        self.eos = settings.eos_token_id
        self.tail = np.zeros(0, np.uint32)

    def feed(self, base: int, block: np.ndarray):
        x = np.concatenate([self.tail, block]) if self.tail.size else np.asarray(block)
        at = base - self.tail.size  # file offset of x[0]
        for a in range(0, max(0, x.size - self.span + 1), self.chunk):
            part = np.asarray(x[a : a + self.chunk + self.span - 1])
            h = PrefixHasher(part).windows(self.span)
            eos = np.concatenate([[0], np.cumsum(part == self.eos)])
            inside = np.flatnonzero(eos[self.span : self.span + h.size] - eos[: h.size] == 0)
            rec = np.empty(inside.size, SPAN_REC)
            rec["hash"], rec["phys"], rec["pos"] = h[inside], self.phys, inside + (at + a)
            yield rec
        self.tail = np.array(x[max(0, x.size - self.span + 1) :], dtype=np.uint32)
