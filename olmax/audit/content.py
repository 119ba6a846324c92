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

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import xxhash

from olmax.audit.hashing import spans_hashes, window_spans_hashes
from olmax.audit.partition import PartitionSpill, equal_runs
from olmax.audit.spans import documents, physical_ids, require_local
from olmax.data.index import TokenIndex
from olmax.data.tokenfile import read_slice, read_tokens
from olmax.errors import OlmaxError

INSTANCE_REC = np.dtype([("hash", "<u8"), ("phys", "<i4"), ("window", "<i8")])
DOC_REC = np.dtype([("hash", "<u8"), ("phys", "<i4"), ("doc", "<i8"), ("start", "<i8"), ("ntok", "<i8")])


@dataclass
class ContentReport:
    """What the content pass found (all positions are physical: the file's first mix path)."""

    phys: np.ndarray  # (F,) physical id of each mix file
    phys_paths: list[str]
    # canonical[phys_offsets[p] + w] = the physical window whose content window w of file p repeats
    phys_offsets: np.ndarray
    canonical: np.ndarray
    duplicate_windows: int = 0  # physical windows whose content appeared earlier elsewhere
    duplicate_docs: int = 0
    duplicate_doc_tokens: int = 0
    doc_tokens: int = 0
    docs: int = 0
    collisions: int = 0  # equal hashes whose bytes differed (expected 0)
    identical_files: list[dict] = field(default_factory=list)  # whole files equal to an earlier one
    window_examples: list[dict] = field(default_factory=list)
    doc_examples: list[dict] = field(default_factory=list)

    def content_ids(self, index: TokenIndex, instance_ids: np.ndarray) -> np.ndarray:
        """int64: one id per distinct content for each global instance id."""
        files, starts = index.locate(instance_ids)
        return self.canonical[self.phys_offsets[self.phys[files]] + starts // index.seq_len]


@dataclass
class DocDuplicates:
    """The duplicate documents of one hash partition (or, merged, of all): later copies of a document
    found earlier (by physical file, then position), their tokens, hash collisions and examples."""

    duplicates: int = 0
    tokens: int = 0
    collisions: int = 0
    examples: list[dict] = field(default_factory=list)


def document_records(
    path: str, tokens: np.ndarray, phys: int, min_doc_tokens: int
) -> tuple[np.ndarray, int, int]:
    """(DOC_REC of the documents of >= min_doc_tokens tokens, tokens in documents, documents) of token
    file `path` (a local path: its sidecar, when present, gives the boundaries)."""
    docs = documents(path, tokens)
    lengths = docs.ends - docs.starts
    keep = np.flatnonzero(lengths >= min_doc_tokens)
    d = np.empty(keep.size, dtype=DOC_REC)
    d["hash"] = spans_hashes(tokens, docs.starts[keep], docs.ends[keep])
    d["phys"], d["doc"], d["start"], d["ntok"] = phys, keep, docs.starts[keep], lengths[keep]
    return d, int(lengths.sum()), int(lengths.size)


def _map_file(
    path: str, phys: int, seq_len: int | None, min_doc_tokens: int
) -> tuple[np.ndarray, np.ndarray, int, int, int]:
    tokens = read_tokens(path)
    whole = xxhash.xxh3_128_intdigest(np.ascontiguousarray(tokens)) if len(tokens) else 0
    h = window_spans_hashes(tokens, seq_len) if seq_len else np.zeros(0, np.uint64)
    inst = np.empty(h.size, dtype=INSTANCE_REC)
    inst["hash"], inst["phys"], inst["window"] = h, phys, np.arange(h.size)
    d, ntok, ndocs = document_records(path, tokens, phys, min_doc_tokens)
    return inst, d, ntok, ndocs, whole


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
    the first `examples` duplicates in hash order."""
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
                        "doc": int(rec["doc"]),
                        "tokens": rn,
                        "same_as_file": paths[hp],
                        "same_as_doc": int(head["doc"]),
                    }
                )
    return out


def merge_documents(parts: Iterable[DocDuplicates], examples: int = 10) -> DocDuplicates:
    """The partitions' results (in partition order) as one: sums, and the first `examples` examples."""
    out = DocDuplicates()
    for r in parts:
        out.duplicates += r.duplicates
        out.tokens += r.tokens
        out.collisions += r.collisions
        out.examples.extend(r.examples[: max(0, examples - len(out.examples))])
    return out


def scan_content(
    index: TokenIndex,
    *,
    min_doc_tokens: int = 32,
    threads: int = 2,
    bits: int = 4,
    work_dir: str | None = None,
    examples: int = 10,
    instances: bool = True,
) -> ContentReport:
    """Hash every instance (unless instances=False) and document of the mix's distinct physical
    files and find duplicates."""
    require_local(
        index.paths, "the content pass", " (or --no-content to audit the plan only)" if instances else ""
    )
    phys = physical_ids(index.paths)
    first = {}
    for f, p in enumerate(phys.tolist()):
        first.setdefault(p, f)
    phys_paths = [index.paths[first[p]] for p in range(len(first))]
    counts = np.asarray([index.counts[first[p]] for p in range(len(first))], dtype=np.int64)
    phys_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    canonical = np.arange(int(phys_offsets[-1]), dtype=np.int64)
    rep = ContentReport(phys, phys_paths, phys_offsets, canonical)
    L = index.seq_len
    with (
        PartitionSpill(INSTANCE_REC, bits=bits, work_dir=work_dir) as inst_spill,
        PartitionSpill(DOC_REC, bits=bits, work_dir=work_dir) as doc_spill,
        ThreadPoolExecutor(max_workers=max(1, threads)) as pool,
    ):
        jobs = [
            pool.submit(_map_file, path, p, L if instances else None, min_doc_tokens)
            for p, path in enumerate(phys_paths)
        ]
        whole: dict[tuple[int, int], int] = {}
        for p, job in enumerate(jobs):  # in file order: the first occurrence in mix order is canonical
            inst, docs, ntok, ndocs, digest = job.result()
            first_p = whole.setdefault((digest, ntok), p)
            if first_p != p and _same(phys_paths, first_p, 0, p, 0, ntok):
                rep.identical_files.append({"file": phys_paths[p], "same_as_file": phys_paths[first_p]})
            inst_spill.add(inst)
            doc_spill.add(docs)
            rep.doc_tokens += ntok
            rep.docs += ndocs
        for part in inst_spill.partitions():
            starts, ends = equal_runs(part["hash"])
            for a, b in zip(starts.tolist(), ends.tolist()):
                group = part[a:b]
                group = group[np.lexsort((group["window"], group["phys"]))]
                head = group[0]
                for rec in group[1:]:
                    if not _same(
                        phys_paths,
                        int(head["phys"]),
                        int(head["window"]) * L,
                        int(rec["phys"]),
                        int(rec["window"]) * L,
                        L,
                    ):
                        rep.collisions += 1
                        continue
                    rep.duplicate_windows += 1
                    canonical[phys_offsets[rec["phys"]] + rec["window"]] = (
                        phys_offsets[head["phys"]] + head["window"]
                    )
                    if len(rep.window_examples) < examples:
                        rep.window_examples.append(
                            {
                                "file": phys_paths[rec["phys"]],
                                "window": int(rec["window"]),
                                "same_as_file": phys_paths[head["phys"]],
                                "same_as_window": int(head["window"]),
                            }
                        )
        docs = merge_documents(
            (reduce_documents(part, phys_paths, examples) for part in doc_spill.partitions(sort=False)),
            examples,
        )
        rep.duplicate_docs, rep.duplicate_doc_tokens = docs.duplicates, docs.tokens
        rep.collisions += docs.collisions
        rep.doc_examples = docs.examples
    return rep
