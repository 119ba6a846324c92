"""Content identity of a mix: identical instances and documents across different files or positions.

Map (per distinct physical file, in parallel threads: xxh3 and numpy release the GIL): xxh3-64 of
every L-token instance window and of every document (sidecar or EOS boundaries). Reduce (per hash
partition, see partition.py): equal hashes at different (physical file, position) are duplicate
content; each reported pair is re-read and compared byte for byte, so a hash collision is never
counted. A path the mix lists twice is one physical file, hence never a duplicate here: planned
repetition is told apart by construction, and a byte-identical copy under another name is not.

The map is file_pass.py's (one pass over each file, read where it is: a local memory map or a URL's
byte ranges); `reduce_documents` / `merge_documents` (the per-partition reduce and its assembly) are also
`olmax audit dedup`'s, on either of its runners. The byte-for-byte checks read their ranges in batches
(`confirm_pairs`: every range of a batch in flight at once, ranges of one file close together in one
request), so a mix in a bucket costs a few requests per batch, not one per pair.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from olmax.audit.audit_config import LoaderAuditConfig
from olmax.audit.file_pass import DOC_REC, INSTANCE_REC, PassSettings, PassTotals, file_pass
from olmax.audit.partition import MapProgress, equal_runs, map_reduce
from olmax.audit.spans import physical_ids
from olmax.data.index import TokenIndex
from olmax.data.shards import sidecar_rows
from olmax.data.token_reads import CACHE_BLOCK_BYTES, read_ranges, same_tokens
from olmax.dedup.spill import partition_bits
from olmax.errors import OlmaxError

# tokens one batch of byte-for-byte checks may hold: each side of a pair counted with the piece a bucket's
# read rounds it out to (token_reads.CACHE_BLOCK_BYTES), so a batch stays within 64 MB of uint32 tokens
CONFIRM_BATCH_TOKENS = 1 << 24


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
    cands = []  # (later file, window, original file, window), in hash order
    starts, ends = equal_runs(part["hash"])
    for a, b in zip(starts.tolist(), ends.tolist()):
        group = part[a:b]
        group = group[np.lexsort((group["window"], group["phys"]))]
        hp, hw = int(group[0]["phys"]), int(group[0]["window"])
        cands += [(int(p), int(w), hp, hw) for p, w in zip(group["phys"][1:], group["window"][1:])]
    c = np.asarray(cands, dtype=np.int64).reshape(-1, 4)
    n = np.full(len(c), seq_len, dtype=np.int64)
    same = confirm_pairs(paths, np.stack([c[:, 2], c[:, 3] * seq_len, c[:, 0], c[:, 1] * seq_len, n], 1))
    out = InstanceDuplicates(c[same], collisions=int((~same).sum()))
    for rp, rw, hp, hw in out.pairs[:examples].tolist():
        out.examples.append(
            {"file": paths[rp], "window": rw, "same_as_file": paths[hp], "same_as_window": hw}
        )
    return out


def confirm_pairs(paths: list[str], pairs: np.ndarray) -> np.ndarray:
    """bool per row (a file, a start, b file, b start, n) of int64 `pairs`: whether the two files' tokens
    [start, start + n) are equal (and both there). Read in position order, in batches of at most
    CONFIRM_BATCH_TOKENS tokens, each batch's ranges at once (olmax.data.token_reads.read_ranges)."""
    out = np.zeros(len(pairs), dtype=bool)
    for batch in _batches(pairs, CACHE_BLOCK_BYTES // 4, CONFIRM_BATCH_TOKENS):
        rows = pairs[batch].tolist()
        reads = [(paths[a], s, n) for a, s, _, _, n in rows] + [(paths[b], s, n) for _, _, b, s, n in rows]
        try:
            got = read_ranges(reads)
        except OlmaxError as e:
            raise OlmaxError(f"{e}, while comparing duplicates") from None
        for k, (x, y) in zip(batch.tolist(), zip(got[: len(rows)], got[len(rows) :])):
            out[k] = x.shape == y.shape == (pairs[k, 4],) and bool(np.array_equal(x, y))
    return out


def _batches(pairs: np.ndarray, piece: int, budget: int):
    """Row indices of `pairs` in (a file, a start) order, cut where the tokens the batch's reads cover pass
    `budget`: each side's range rounded out to the `piece` tokens a bucket's read fetches (a range starting
    within a piece of the previous one's end adds only its extension)."""
    order = np.lexsort((pairs[:, 1], pairs[:, 0])) if len(pairs) else np.zeros(0, np.int64)
    start, cost, ends = 0, 0, {}  # ends: the last range's end per (side, file)
    for i, k in enumerate(order.tolist()):
        a, sa, b, sb, n = pairs[k].tolist()
        add = 0
        for key, s in (((0, a), sa), ((1, b), sb)):
            end = ends.get(key)
            near = end is not None and 0 <= s - end <= piece
            add += max(0, s + n - end) if near else n + piece
            ends[key] = max(s + n, end) if near else s + n
        if i > start and cost + add > budget:
            yield order[start:i]
            start, cost, ends = i, 0, {(0, a): sa + n, (1, b): sb + n}
            add = 2 * (n + piece)
        cost += add
    if start < len(order):
        yield order[start:]


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
    cands = []  # (original record, later record) of the same length, in hash order
    for a, b in zip(starts.tolist(), ends.tolist()):
        group = part[by_hash[a:b]]
        group = group[np.lexsort((group["start"], group["phys"]))]
        same_length = group["ntok"][1:] == group["ntok"][0]
        out.collisions += int((~same_length).sum())
        cands += [(group[0], rec) for rec in group[1:][same_length]]
    pairs = np.asarray(
        [(h["phys"], h["start"], r["phys"], r["start"], r["ntok"]) for h, r in cands], dtype=np.int64
    ).reshape(-1, 5)
    same = confirm_pairs(paths, pairs)
    out.collisions += int((~same).sum())
    for (head, rec), ok in zip(cands, same.tolist()):
        if not ok:
            continue
        out.duplicates += 1
        out.tokens += int(rec["ntok"])
        if len(out.examples) < examples:
            out.examples.append(
                {
                    "file": paths[int(rec["phys"])],
                    "doc_index": int(rec["doc"]),
                    "tokens": int(rec["ntok"]),
                    "same_as_file": paths[int(head["phys"])],
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
    """The document ids of token file `path` (a path or a URL) from its `.csv.gz` sidecar; None without one
    (documents are then named by ordinal, "#i", as olmax.data.documents does)."""
    rows = sidecar_rows(path)
    return None if rows is None else [r.id for r in rows]


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
    totals: list[PassTotals],
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
        if first_p != p and same_tokens(rep.phys_paths[first_p], 0, rep.phys_paths[p], 0, t.doc_tokens):
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
    rep = content_layout(index)
    if bits is None:  # a partition of about 256 MB of instance records, whatever the mix's size
        bits = partition_bits(int(index.num_tokens) // max(1, index.seq_len if instances else 1), 24)
    totals, reduced = map_reduce(
        list(enumerate(rep.phys_paths)),
        partial(
            file_pass,
            settings=PassSettings(
                seq_len=index.seq_len if instances else None,
                min_doc_tokens=config.min_doc_tokens,
                eos_token_id=config.stream.eos_token_id,
            ),
        ),
        content_reduces(rep, index.seq_len, examples),
        bits=bits,
        threads=config.threads,
        work_dir=work_dir,
        progress=MapProgress(progress, _phys_tokens(index, rep), "content"),
    )
    return assemble_content(rep, totals, reduced["instances"], reduced["docs"], examples)
