"""Content identity of a mix: identical instances and documents across different files or positions.

Map (per distinct physical file, in parallel threads: xxh3 and numpy release the GIL): xxh3-64 of
every L-token instance window and of every document (sidecar or EOS boundaries). Reduce (per hash
partition, see partition.py): equal hashes at different (physical file, position) are duplicate
content; each reported pair is re-read and compared byte for byte, so a hash collision is never
counted. A path the mix lists twice is one physical file, hence never a duplicate here: planned
repetition is told apart by construction, and a byte-identical copy under another name is not.

`document_records` (the document map) and `reduce_documents` / `merge_documents` (the per-partition
reduce and its assembly) are also `olmax audit dedup`'s, on either of its runners; `olmax.data.shards.local_shard` and
`token_slice` read files given as fsspec URLs for it (`scan_content` itself, the loader audit's pass,
refuses URLs).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import xxhash

from olmax import storage
from olmax.audit.config import LoaderAuditConfig
from olmax.audit.partition import MapProgress, equal_runs, map_reduce, partition_bits
from olmax.audit.spans import documents, physical_ids, require_local
from olmax.data.index import TokenIndex
from olmax.data.shards import local_tokens, read_sidecar, sidecar_path
from olmax.data.stream import DOLMA2_EOS
from olmax.data.tokenfile import read_slice
from olmax.errors import OlmaxError
from olmax.hashing import spans_hashes, window_spans_hashes

INSTANCE_REC = np.dtype([("hash", "<u8"), ("phys", "<i4"), ("window", "<i8")])
DOC_REC = np.dtype([("hash", "<u8"), ("phys", "<i4"), ("doc", "<i8"), ("start", "<i8"), ("ntok", "<i8")])


@dataclass
class ContentReport:
    """What the content pass found (all positions are physical: the file's first mix path)."""

    phys: np.ndarray  # (F,) physical id of each mix file
    phys_paths: list[str]
    # physical window ids: window w of physical file p is phys_offsets[p] + w
    phys_offsets: np.ndarray
    # the duplicate windows only (16 bytes each, nothing per unique window): dup_windows sorted, and
    # dup_originals[i] the earlier physical window whose content dup_windows[i] repeats
    dup_windows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    dup_originals: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    duplicate_windows: int = 0  # physical windows whose content appeared earlier elsewhere
    duplicate_docs: int = 0
    duplicate_doc_tokens: int = 0
    doc_tokens: int = 0
    docs: int = 0
    collisions: int = 0  # equal hashes whose bytes differed (expected 0)
    identical_files: list[dict] = field(default_factory=list)  # whole files equal to an earlier one
    window_examples: list[dict] = field(default_factory=list)
    doc_examples: list[dict] = field(default_factory=list)

    def physical_windows(self, index: TokenIndex, instance_ids: np.ndarray) -> np.ndarray:
        """int64: the physical window of each global instance id (a path listed twice: one window)."""
        files, starts = index.locate(instance_ids)
        return self.phys_offsets[self.phys[files]] + starts // index.seq_len

    def content_of(self, windows: np.ndarray) -> np.ndarray:
        """int64: one id per distinct content (its first physical window) for each physical window."""
        out = np.array(windows, dtype=np.int64, copy=True)
        if self.dup_windows.size and out.size:
            at = np.minimum(np.searchsorted(self.dup_windows, out), self.dup_windows.size - 1)
            hit = self.dup_windows[at] == out
            out[hit] = self.dup_originals[at[hit]]
        return out

    def content_ids(self, index: TokenIndex, instance_ids: np.ndarray) -> np.ndarray:
        """int64: one id per distinct content for each global instance id."""
        return self.content_of(self.physical_windows(index, instance_ids))

    def duplicates_in(self, lo: int, hi: int) -> int:
        """Duplicate windows among physical windows [lo, hi)."""
        return int(np.searchsorted(self.dup_windows, hi) - np.searchsorted(self.dup_windows, lo))


@dataclass
class DocDuplicates:
    """The duplicate documents of one hash partition (or, merged, of all): later copies of a document
    found earlier (by physical file, then position), their tokens, hash collisions and examples."""

    duplicates: int = 0
    tokens: int = 0
    collisions: int = 0
    examples: list[dict] = field(default_factory=list)


def document_records(
    path: str, tokens: np.ndarray, phys: int, min_doc_tokens: int, eos_token_id: int = DOLMA2_EOS
) -> tuple[np.ndarray, int, int]:
    """(DOC_REC of the documents of >= min_doc_tokens tokens, tokens in documents, documents) of token
    file `path` (a local path: its sidecar, when present, gives the boundaries)."""
    docs = documents(path, tokens, eos_token_id)
    lengths = docs.ends - docs.starts
    keep = np.flatnonzero(lengths >= min_doc_tokens)
    d = np.empty(keep.size, dtype=DOC_REC)
    d["hash"] = spans_hashes(tokens, docs.starts[keep], docs.ends[keep])
    d["phys"], d["doc"], d["start"], d["ntok"] = phys, keep, docs.starts[keep], lengths[keep]
    return d, int(lengths.sum()), int(lengths.size)


@dataclass
class FileContent:
    """One physical file's map summary: tokens and documents in it, and its whole-content digest."""

    doc_tokens: int
    docs: int
    digest: int  # xxh3-128 of its token bytes (0 when empty): identical files are compared by it first


def content_records(
    path: str,
    tokens: np.ndarray,
    phys: int,
    seq_len: int | None,
    min_doc_tokens: int,
    eos_token_id: int = DOLMA2_EOS,
):
    """The content map over one physical file (`path` local, `tokens` its tokens): yields
    ("instances", INSTANCE_REC of every L-token window, unless seq_len is None) and ("docs", DOC_REC);
    returns its FileContent."""
    whole = xxhash.xxh3_128_intdigest(np.ascontiguousarray(tokens)) if len(tokens) else 0
    if seq_len:
        h = window_spans_hashes(tokens, seq_len)
        inst = np.empty(h.size, dtype=INSTANCE_REC)
        inst["hash"], inst["phys"], inst["window"] = h, phys, np.arange(h.size)
        yield "instances", inst
    d, ntok, ndocs = document_records(path, tokens, phys, min_doc_tokens, eos_token_id)
    yield "docs", d
    return FileContent(ntok, ndocs, whole)


def file_content(
    item: tuple[int, str], *, seq_len: int | None, min_doc_tokens: int, eos_token_id: int = DOLMA2_EOS
):
    """`content_records` of (physical id, path or fsspec URL): a URL other than `file://` is read from a
    scratch copy (with its sidecar)."""
    phys, path = item
    with local_tokens(path) as (local, tokens):
        return (yield from content_records(local, tokens, phys, seq_len, min_doc_tokens, eos_token_id))


@dataclass
class InstanceDuplicates:
    """The duplicate instance windows of one hash partition: `pairs` (n, 4) int64 rows of (physical
    file, window, and the earlier physical file and window it repeats) in hash order, collisions
    (equal hashes, different bytes) and the first examples."""

    pairs: np.ndarray
    collisions: int = 0
    examples: list[dict] = field(default_factory=list)


def reduce_instances(
    part: np.ndarray, paths: list[str], seq_len: int, examples: int = 10
) -> InstanceDuplicates:
    """Duplicate windows among the INSTANCE_REC records of one hash partition (any order): in each group
    of equal hashes the first window by (physical file, window) is the original, every later one with
    the same tokens (compared byte for byte) a duplicate of it."""
    part = part[np.argsort(part["hash"], kind="stable")]
    pairs, out = [], InstanceDuplicates(np.zeros((0, 4), np.int64))
    starts, ends = equal_runs(part["hash"])
    for a, b in zip(starts.tolist(), ends.tolist()):
        group = part[a:b]
        group = group[np.lexsort((group["window"], group["phys"]))]
        hp, hw = int(group[0]["phys"]), int(group[0]["window"])
        for rec in group[1:]:
            rp, rw = int(rec["phys"]), int(rec["window"])
            if not _same(paths, hp, hw * seq_len, rp, rw * seq_len, seq_len):
                out.collisions += 1
                continue
            pairs.append((rp, rw, hp, hw))
            if len(out.examples) < examples:
                out.examples.append(
                    {"file": paths[rp], "window": rw, "same_as_file": paths[hp], "same_as_window": hw}
                )
    if pairs:
        out.pairs = np.asarray(pairs, dtype=np.int64)
    return out


def token_slice(path: str, start: int, n: int) -> np.ndarray:
    """Tokens [start, start + n) of token file `path` (a path or an fsspec URL: a ranged read)."""
    try:
        return read_slice(path, start, n)
    except OlmaxError as e:
        raise OlmaxError(f"{e}, while comparing duplicates") from None


def _same(paths: list[str], a_phys: int, a_start: int, b_phys: int, b_start: int, n: int) -> bool:
    a = token_slice(paths[a_phys], a_start, n)
    b = token_slice(paths[b_phys], b_start, n)
    return a.shape == b.shape and bool(np.array_equal(a, b))


def reduce_documents(part: np.ndarray, paths: list[str], examples: int = 10) -> DocDuplicates:
    """Duplicate documents among the DOC_REC records of one hash partition (any order): in each group of
    equal hashes the first document by (physical file, position) is the original, every other one with
    the same tokens (compared byte for byte) a duplicate; unequal bytes count as collisions. Examples:
    the first `examples` duplicates in hash order, each document by its ordinal in its file (`doc_index`;
    `merge_documents` adds its id)."""
    out = DocDuplicates()
    hashes = np.ascontiguousarray(part["hash"])
    by_hash = np.argsort(hashes)  # the order within a hash is set below, by (file, position)
    starts, ends = equal_runs(hashes[by_hash])
    for a, b in zip(starts.tolist(), ends.tolist()):
        group = part[by_hash[a:b]]
        group = group[np.lexsort((group["start"], group["phys"]))]
        head = group[0]
        hp, hs, hn = int(head["phys"]), int(head["start"]), int(head["ntok"])
        original = None
        for rec in group[1:]:
            rp, rs, rn = int(rec["phys"]), int(rec["start"]), int(rec["ntok"])
            if rn == hn and original is None:
                original = token_slice(paths[hp], hs, hn)
            if rn != hn or not np.array_equal(token_slice(paths[rp], rs, rn), original):
                out.collisions += 1
                continue
            out.duplicates += 1
            out.tokens += rn
            if len(out.examples) < examples:
                out.examples.append(
                    {
                        "file": paths[rp],
                        "doc_index": int(rec["doc"]),
                        "tokens": rn,
                        "same_as_file": paths[hp],
                        "same_as_doc_index": int(head["doc"]),
                    }
                )
    return out


def merge_documents(parts: Iterable[DocDuplicates], examples: int = 10) -> DocDuplicates:
    """The partitions' results (in partition order) as one: sums, and the first `examples` examples, their
    documents named by id (`name_documents`)."""
    out = DocDuplicates()
    for r in parts:
        out.duplicates += r.duplicates
        out.tokens += r.tokens
        out.collisions += r.collisions
        out.examples.extend(r.examples[: max(0, examples - len(out.examples))])
    out.examples = name_documents(out.examples)
    return out


def sidecar_ids(path: str) -> list[str] | None:
    """The document ids of token file `path` (a path or an fsspec URL) from its `.csv.gz` sidecar; None
    without one (documents are then named by ordinal, "#i", as olmax.data.documents does)."""
    local = storage.local_path(path)
    if local is not None:
        side = sidecar_path(local)
        return [r.id for r in read_sidecar(side)] if side.exists() else None
    folder, name = path[: path.rfind("/")], path[path.rfind("/") + 1 :]
    side_url = storage.join(folder, sidecar_path(name).name)
    if not storage.exists(side_url):
        return None
    with tempfile.TemporaryDirectory(prefix="olmax-sidecar-") as tmp:
        side = Path(tmp) / sidecar_path(name).name
        side.write_bytes(storage.read_bytes(side_url))
        return [r.id for r in read_sidecar(side)]


def name_documents(examples: list[dict]) -> list[dict]:
    """Duplicate-document examples with each document named by its id (`doc`, `same_as_doc`: the sidecar's
    id, else "#i") and its ordinal in its file beside it (`doc_index`, `same_as_doc_index`)."""
    ids: dict[str, list[str] | None] = {}
    out = []
    for e in examples:
        named = dict(e)
        for key, file_key in (("doc", "file"), ("same_as_doc", "same_as_file")):
            i = int(e[f"{key}_index"])
            path = e[file_key]
            if path not in ids:
                ids[path] = sidecar_ids(path)
            doc_ids = ids[path]
            named[key] = doc_ids[i] if doc_ids is not None and i < len(doc_ids) and doc_ids[i] else f"#{i}"
        out.append(named)
    return out


def content_layout(index: TokenIndex) -> ContentReport:
    """An empty ContentReport of the mix: its physical files (the first path of each) and windows."""
    phys = physical_ids(index.paths)
    first: dict[int, int] = {}
    for f, p in enumerate(phys.tolist()):
        first.setdefault(p, f)
    phys_paths = [index.paths[first[p]] for p in range(len(first))]
    counts = np.asarray([index.counts[first[p]] for p in range(len(first))], dtype=np.int64)
    phys_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return ContentReport(phys, phys_paths, phys_offsets)


def content_reduces(rep: ContentReport, seq_len: int, examples: int) -> dict:
    """The content map-reduce's reduces for `partition.map_reduce`: {kind: (record dtype, reduce)}."""
    return {
        "instances": (
            INSTANCE_REC,
            partial(reduce_instances, paths=rep.phys_paths, seq_len=seq_len, examples=examples),
        ),
        "docs": (DOC_REC, partial(reduce_documents, paths=rep.phys_paths, examples=examples)),
    }


def assemble_content(
    rep: ContentReport,
    totals: list[FileContent],
    instances: list[InstanceDuplicates],
    docs: list,
    examples: int,
) -> ContentReport:
    """Fill `rep` (content_layout) from the map's summaries (in file order) and the reduces' results (in
    partition order), whichever runner produced them; identical files are found here, in file order (the
    first occurrence in mix order is the original)."""
    whole: dict[tuple[int, int], int] = {}
    for p, t in enumerate(totals):
        first_p = whole.setdefault((t.digest, t.doc_tokens), p)
        if first_p != p and _same(rep.phys_paths, first_p, 0, p, 0, t.doc_tokens):
            rep.identical_files.append({"file": rep.phys_paths[p], "same_as_file": rep.phys_paths[first_p]})
        rep.doc_tokens += t.doc_tokens
        rep.docs += t.docs
    dup, orig = [], []
    for r in instances:
        if r.pairs.size:
            dup.append(rep.phys_offsets[r.pairs[:, 0]] + r.pairs[:, 1])
            orig.append(rep.phys_offsets[r.pairs[:, 2]] + r.pairs[:, 3])
        rep.duplicate_windows += len(r.pairs)
        rep.collisions += r.collisions
        rep.window_examples.extend(r.examples[: max(0, examples - len(rep.window_examples))])
    if dup:
        dup_windows, originals = np.concatenate(dup), np.concatenate(orig)
        order = np.argsort(dup_windows, kind="stable")
        rep.dup_windows, rep.dup_originals = dup_windows[order], originals[order]
    merged = merge_documents(docs, examples)
    rep.duplicate_docs, rep.duplicate_doc_tokens = merged.duplicates, merged.tokens
    rep.collisions += merged.collisions
    rep.doc_examples = merged.examples
    return rep


def _phys_tokens(index: TokenIndex, rep: ContentReport) -> list[int]:
    """Tokens of each physical file (its first mix path's size)."""
    first: dict[int, int] = {}
    for f, p in enumerate(rep.phys.tolist()):
        first.setdefault(p, f)
    return [int(index.sizes[first[p]]) // index.itemsize for p in range(len(first))]


def scan_content(
    index: TokenIndex,
    config: LoaderAuditConfig,
    *,
    instances: bool = True,
    bits: int | None = None,
    progress: bool = False,
) -> ContentReport:
    """Hash every instance (unless instances=False) and document of the mix's distinct physical
    files and find duplicates (threads here; loader_beam.py runs the same map and reduces on Beam). From
    `config`: `min_doc_tokens`, `threads`, `examples`, the stream's work dir and EOS id."""
    examples, work_dir = config.examples, config.stream.work_dir
    require_local(
        index.paths, "the content pass", " (or --no-content to audit the plan only)" if instances else ""
    )
    rep = content_layout(index)
    if bits is None:  # a partition of about 256 MB of instance records, whatever the mix's size
        bits = partition_bits(int(index.num_tokens) // max(1, index.seq_len if instances else 1), 24)
    totals, reduced = map_reduce(
        list(enumerate(rep.phys_paths)),
        partial(
            file_content,
            seq_len=index.seq_len if instances else None,
            min_doc_tokens=config.min_doc_tokens,
            eos_token_id=config.stream.eos_token_id,
        ),
        content_reduces(rep, index.seq_len, examples),
        bits=bits,
        threads=config.threads,
        work_dir=work_dir,
        progress=MapProgress(progress, _phys_tokens(index, rep), "content"),
    )
    return assemble_content(rep, totals, reduced["instances"], reduced["docs"], examples)
