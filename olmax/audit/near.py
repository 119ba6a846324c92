"""Near-duplicate documents in existing shards (`olmax audit dedup --near`, and the loader audit's
near-duplicate exposure): prepare's MinHash LSH and verified clusters (olmax.dedup.minhash) over
prepare's shingles (olmax.dedup.shingles: normalized word n-grams) of each document's text, decoded
from its tokens (EOS excluded) with the tokenizer the shards were prepared with. So the audit of a mix
prepared without dedup finds the clusters `data prepare --dedup minhash` removes from the same
documents: a re-wrapped or re-cased copy tokenizes differently but decodes to the same words.

Documents are the sidecar's (else EOS-delimited) of every distinct physical file, in the mix's order
of first listing (then position): the first document of a cluster is the one kept, the others are
removable. Memory: the files are read in order, where they are (a local memory map or a URL's byte
ranges, olmax.data.token_reads), each in runs of the whole documents of about CHUNK_TOKENS tokens
(olmax.data.documents.document_runs; threads + 1 runs in flight at most), and each run's shingles and signatures go to prepare's scratch tables
(olmax.dedup.minhash_spill, in the work dir) as soon as it is done; the clusters are found there. What stays
in memory grows with the documents only: about 70 bytes a document (its token count, bounds and shingle
count, and the clustering's ~40 bytes for the band being bucketed) plus its id; beside it, threads + 1 runs'
decoded text, shingles and signatures (a few tens of MB each) and one file's document index.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict

import numpy as np

from olmax import storage
from olmax.audit.checks import Check
from olmax.audit.spans import physical_ids
from olmax.data.documents import DocumentRun, document_runs, sidecar_documents
from olmax.data.stream import DEMO_MIX, DOLMA2_EOS, StreamSpec
from olmax.data.token_reads import TokenFile
from olmax.dedup.minhash import signatures
from olmax.dedup.minhash_spill import SpilledTables, cluster_spilled
from olmax.dedup.params import MinHashParams, NearSettings
from olmax.dedup.shingles import NORMALIZATION, decoded_shingles
from olmax.errors import OlmaxError
from olmax.pools import in_order

SHINGLES = f"word n-grams of the decoded text, sorted unique per document ({NORMALIZATION})"


def near_tokenizer(mix: str | None, explicit: str | None) -> str:
    """The tokenizer.json to decode a mix's shards with: `explicit` (--tokenizer), else the one the
    `manifest.json` beside the mix names (a prepare output; its sha256 checked), dolma2 for the demo mix."""
    from olmax.assets import file_sha256, tokenizer_path

    if explicit:
        return str(tokenizer_path(explicit))
    if mix == DEMO_MIX:
        return str(tokenizer_path("dolma2"))
    manifest = storage.join(
        mix[: mix.rfind("/")] if mix and storage.is_url(mix) else os.path.dirname(mix or ""), "manifest.json"
    )
    if not (mix and storage.exists(manifest)):
        raise OlmaxError(
            f"--near decodes the shards to text, but no manifest.json beside {mix} names the tokenizer "
            "they were prepared with; pass --tokenizer FILE (dolma2 for AI2's mixes)"
        )
    try:
        info = json.loads(storage.read_bytes(manifest)).get("tokenizer") or {}
    except ValueError as e:
        raise OlmaxError(f"{manifest}: invalid JSON ({e}); pass --tokenizer") from None
    name, sha = info.get("name"), info.get("sha256")
    if not name:
        raise OlmaxError(f"{manifest}: no tokenizer.name; pass --tokenizer FILE")
    path = tokenizer_path(name)
    if sha and file_sha256(path) != sha:
        raise OlmaxError(
            f"{manifest}: the shards were prepared with {name} (sha256 {sha[:12]}...), but {path} "
            "differs; pass --tokenizer with the original tokenizer.json"
        )
    return str(path)


CHUNK_TOKENS = 1 << 22  # tokens of a file decoded, shingled and signed at once by one thread


def _compared(run: DocumentRun, known, min_doc_tokens: int, eos: int):
    """A run's documents that are compared: ids, token counts and (start, end) bounds (file offsets), EOS
    excluded (`known`: the file's sidecar documents, for their ids)."""
    ends = run.ends.copy()
    if ends.size:
        tail = run.tokens[np.maximum(ends - 1 - run.base, 0)] == eos
        ends[tail & (ends > run.starts)] -= 1
    keep = np.flatnonzero(ends - run.starts >= min_doc_tokens)
    ordinals = run.ordinals[keep].tolist()
    ids = [known.id_of(i) for i in ordinals] if known is not None else [f"#{i}" for i in ordinals]
    return ids, (run.ends - run.starts)[keep], np.stack([run.starts[keep], ends[keep]], axis=1)


def _shingled(run: DocumentRun, params: MinHashParams, decode, bounds: np.ndarray):
    """Shingles (and offsets) and signatures of the documents `bounds` (file offsets) of one run."""
    sh, off = decoded_shingles(
        decode, run.tokens, bounds[:, 0] - run.base, bounds[:, 1] - run.base, params.ngram
    )
    return sh, off, signatures(sh, off, params)


def _first_lines(paths: list[str], decode, wanted: list[tuple[int, int, int]]) -> dict:
    """(file, start, end) → the first non-blank line of that document's decoded text."""
    out = {}
    for f, a, b in wanted:
        head = decode(TokenFile(paths[f]).read(a, min(b, a + 64)).tolist())
        out[(f, a, b)] = next((x.strip() for x in head.splitlines() if x.strip()), "")[:200]
    return out


def _source_stats(labels, file_of, ntok, gone) -> dict:
    """Per source: documents and tokens compared, and the near stage's removable ones (the gates' stats,
    olmax.dedup.gates; exact copies are near-duplicates at Jaccard 1, so they count here too)."""
    stats = {}
    removed = np.zeros(ntok.size, bool)
    removed[gone] = True
    src = np.asarray([labels[f] for f in file_of.tolist()], dtype=object)
    for name in dict.fromkeys(labels):
        sel = src == name
        stats[name] = {
            "documents": int(sel.sum()),
            "tokens": int(ntok[sel].sum()),
            "stages": {
                "near": {"documents": int((sel & removed).sum()), "tokens": int(ntok[sel & removed].sum())}
            },
        }
    return stats


def near_duplicates(
    paths: list[str],
    labels: list[str],
    near: NearSettings,
    *,
    min_doc_tokens: int = 32,
    max_clusters: int = 1000,
    threads: int = 2,
    stream: StreamSpec | None = None,
) -> dict:
    """The near-duplicate section of a report over distinct token files `paths` (in order; `labels`
    their sources): clusters (up to `max_clusters`, largest first), removable documents and tokens.
    Also returns, under "removable_tokens_per_file", each file's removable tokens (for exposure).
    `stream`: the stream the files are from, for its EOS id (default dolma2's) and its work dir, where the
    scratch tables go (a temporary folder of their own inside; none: the system's)."""
    from olmax.data.tokenize import load_tokenizer

    eos = stream.eos_token_id if stream is not None else DOLMA2_EOS
    work_dir = stream.work_dir if stream is not None else None
    params = near.minhash
    params.check()
    decode = load_tokenizer(near.tokenizer).decode
    counts, ntoks, ids, bounds_of = [], [], [], []
    threads = max(1, threads)
    with (
        SpilledTables(params, work_dir) as tables,
        ThreadPoolExecutor(max_workers=threads, thread_name_prefix="olmax-near") as pool,
    ):
        for path in paths:  # in order; a file's runs on the threads, threads + 1 in flight at most
            file = TokenFile(path)
            known = sidecar_documents(path, len(file))
            counts.append(0)

            def compared(run: DocumentRun, known=known) -> tuple:
                file_ids, ntok, bounds = _compared(run, known, min_doc_tokens, eos)
                counts[-1] += len(file_ids)
                ids.extend(file_ids)
                ntoks.append(ntok)
                bounds_of.append(bounds)
                return run, bounds

            found = (compared(r) for r in document_runs(file, known, eos, CHUNK_TOKENS))
            runs = (rb for rb in found if len(rb[1]))
            for sh, off, sig in in_order(
                pool, lambda rb: _shingled(rb[0], params, decode, rb[1]), runs, threads + 1
            ):
                tables.add(sh, np.diff(off), sig)
                del sh, off, sig
        cl = cluster_spilled(tables)
    ntok = np.concatenate(ntoks) if ntoks else np.zeros(0, np.int64)
    bounds = np.concatenate(bounds_of) if bounds_of else np.zeros((0, 2), np.int64)
    file_of = np.repeat(np.arange(len(counts)), counts)
    gone = cl.removed
    per_file = np.bincount(file_of[gone], weights=ntok[gone], minlength=len(counts)).astype(np.int64)
    groups: dict[int, list[int]] = {}
    for m in gone.tolist():
        groups.setdefault(int(cl.keep[m]), []).append(m)
    clusters = [
        {
            "doc_ids": [ids[k]] + [ids[m] for m in members],
            "sources": [labels[file_of[k]]] + [labels[file_of[m]] for m in members],
            "keep": ids[k],
            "jaccard_min": round(float(min(cl.jaccard[m] for m in members)), 6),
        }
        for k, members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    ]
    removable = int(ntok[gone].sum())
    ranked = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:5]
    shown = [(k, [k, *members[:3]]) for k, members in ranked]
    where = {m: (int(file_of[m]), int(bounds[m, 0]), int(bounds[m, 1])) for _, ms in shown for m in ms}
    lines = _first_lines(paths, decode, list(where.values()))
    for c, (_, ms) in zip(clusters, shown):
        c["first_lines"] = [lines[where[m]] for m in ms]
    return {
        "clusters": clusters[:max_clusters],
        "clusters_total": len(clusters),
        "largest_cluster": 1 + len(ranked[0][1]) if ranked else 1,
        "sources": _source_stats(labels, file_of, ntok, gone),
        "documents": int(ntok.size),
        "document_tokens": int(ntok.sum()),
        "removable_documents": int(gone.size),
        "removable_tokens": removable,
        "removable_token_frac": round(removable / max(1, int(ntok.sum())), 6),
        "candidate_pairs": cl.candidates,
        "minhash": asdict(params),
        "tokenizer": near.tokenizer,
        "min_doc_tokens": min_doc_tokens,
        "shingles": SHINGLES,
        "removable_tokens_per_file": per_file.tolist(),
    }


def near_exposure(
    index,
    params: NearSettings,
    *,
    min_doc_tokens: int,
    max_frac: float,
    threads: int,
    checks,
    stream: StreamSpec | None = None,
) -> dict:
    """The loader audit's near-duplicate section: the near-duplicates of the mix's distinct files, and
    the removable tokens the mix plans to serve (a file listed k times serves its removable tokens k
    times, as it does its exact repeats); appends the `near_duplicate_exposure` gate to `checks`."""

    phys = physical_ids(index.paths)
    first: dict[int, int] = {}
    for f, p in enumerate(phys.tolist()):
        first.setdefault(p, f)
    paths = [index.paths[first[p]] for p in range(len(first))]
    labels = [index.labels[first[p]] for p in range(len(first))]
    near = near_duplicates(
        paths, labels, params, min_doc_tokens=min_doc_tokens, threads=threads, stream=stream
    )
    per_file = np.asarray(near.pop("removable_tokens_per_file"), np.int64)
    planned = int(per_file[phys].sum()) if per_file.size else 0
    frac = round(planned / max(1, int(index.num_tokens)), 6)
    near["clusters"] = near["clusters"][:10]
    near.update(
        planned_removable_tokens=planned, planned_tokens=int(index.num_tokens), planned_removable_frac=frac
    )
    checks.append(
        Check(
            "near_duplicate_exposure",
            frac <= max_frac,
            frac,
            max_frac,
            detail=f"{planned} planned tokens in removable near-duplicate documents "
            f"({near['removable_documents']} documents)",
        )
    )
    return near
