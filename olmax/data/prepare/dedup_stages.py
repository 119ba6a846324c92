"""`olmax data prepare --dedup exact,minhash,substring`: the removal decisions, made in a pass over every
document before any shard is written, then applied by the shard-writing pass.

Stages, always in this order (Dolma 3's), each over the documents the previous ones kept, in input
order (mix spec source order, then file, then line); documents prepare skips (empty texts) take no part:
- exact: documents with the same text (xxh3-128 of its UTF-8) as an earlier one.
- minhash: near-duplicates (olmax.dedup.minhash: word n-gram shingles, LSH, Jaccard-verified pairs,
  connected components); the first document of a cluster is kept.
- substring: byte spans of >= `substring_min_bytes` seen in an earlier document are cut out
  (olmax.dedup.substring), within partitions of consecutive documents of about
  `substring_partition_bytes` of text each (in input order, so the same partitions for any runner
  or --workers).

Resume stays exact: the decisions are written atomically to `OUT/.olmax-dedup.json` before the first
shard; a rerun after a kill loads them (the journal's settings include the dedup settings), and the
shard-writing pass drops and edits documents by them. `OUT/removed.jsonl` (one record per removed or
edited document, in input order) and the manifest's counts are written at the end with mix.txt.
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import xxhash

from olmax.atomic import write_text
from olmax.data import readers
from olmax.data.prepare.batches import read_batches, return_freed_arrays
from olmax.data.prepare.prepare_config import DedupSettings, PrepareConfig
from olmax.data.shards import DEDUP_RECORD
from olmax.dedup.minhash import cluster, signatures
from olmax.dedup.minhash_spill import SpilledTables, cluster_spilled, remove_stale
from olmax.dedup.params import MinHashParams
from olmax.dedup.shingles import NORMALIZATION, text_shingles
from olmax.dedup.substring import cut, repeated_spans
from olmax.jsonio import write_json

REMOVED_FILE = DEDUP_RECORD
DECISIONS_FILE = ".olmax-dedup.json"  # written before the first shard; a resume reads it back


@dataclass
class _Docs:
    """What the decision pass keeps per document (input order): where it is and its id."""

    source: list[int] = field(default_factory=list)
    file: list[int] = field(default_factory=list)
    loc: list[int] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    nbytes: list[int] = field(default_factory=list)


def utf8(doc: readers.Doc) -> bytes:
    try:
        return doc.text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise readers.lone_surrogate(doc, e) from None


def _documents(cfg: PrepareConfig, files: dict[str, list[str]]):
    """(source index, file index, doc) of every document prepare would tokenize, in input order
    (`read_batches`: prepare's reader, so both passes see the same documents)."""
    for si, spec in enumerate(cfg.sources):
        yield from ((si, b) for b in stage_batches(cfg, si, files[spec.label]))


def stage_batches(cfg: PrepareConfig, source: int, paths: list[str], first_file: int = 0):
    """Batches of (file index, doc) of the documents of `paths` (files `first_file`...) of a source that
    take part in the stages: those prepare tokenizes (the Beam runner reads one file at a time)."""
    spec = cfg.sources[source]
    stats = readers.ReadStats()
    text_field = spec.text_field or cfg.text_field
    for batch in read_batches(paths, cfg, text_field, (0, 0), stats, first_file=first_file):
        yield [(fi, d) for fi, d, _ in batch if (d.text.strip() if cfg.dolma_compat else d.text)]


def _shingle_batch(texts: list[str], params: MinHashParams):
    sh, off = text_shingles(texts, params.ngram)
    return sh, np.diff(off), signatures(sh, off, params)


def spill_threshold(max_memory: int) -> int:
    """The resident memory (bytes) past which the MinHash tables move to scratch: 60% of `max_memory`,
    counting the process's resident memory plus the tables once more (the in-memory clustering joins them
    into one copy); the rest is for the clustering's own arrays."""
    return int(max_memory * 0.6)


def resident_bytes() -> int:
    """This process's resident memory now (0 where /proc is not there: the tables alone then count)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def plan(cfg: PrepareConfig, files: dict[str, list[str]], work_dir: str | None = None) -> dict:
    """Run the stages over every document: {"records": [...], "counts": {...}, ...} (module docstring).
    With `cfg.max_memory`, the MinHash tables move to a scratch folder under `work_dir` (default: the
    system's temporary folder) once the resident memory and the tables pass `spill_threshold`
    (olmax.dedup.minhash_spill: the same decisions)."""
    st: DedupSettings = cfg.dedup
    docs = _Docs()
    removed: dict[int, dict] = {}
    seen: dict[int, int] = {}
    mh_docs: list[int] = []  # document numbers that reach the minhash stage
    parts: list = []  # per batch: (shingles, shingles per document, signatures), in input order
    pending: list = []
    limit = spill_threshold(cfg.max_memory) if cfg.max_memory else None
    held, spilled = 0, None
    remove_stale(work_dir)
    return_freed_arrays()

    def keep(part) -> None:
        nonlocal held, spilled, parts
        if spilled is not None:
            spilled.add(*part)
            return
        parts.append(part)
        held += sum(a.nbytes for a in part)
        if limit is not None and resident_bytes() + held > limit:
            spilled = SpilledTables(st.minhash, work_dir=work_dir)
            print(
                f"olmax: dedup: with the MinHash tables ({held / 2**20:,.0f} MiB so far) the run would pass "
                f"{limit / 2**20:,.0f} MiB (60% of --max-memory): continuing with them on scratch disk "
                f"({spilled.dir})",
                file=sys.stderr,
                flush=True,
            )
            for p in parts:
                spilled.add(*p)
            parts = []

    with ThreadPoolExecutor(max_workers=max(1, cfg.workers), thread_name_prefix="olmax-dedup") as pool:
        for si, batch in _documents(cfg, files):
            texts = []
            for fi, d in batch:
                g = len(docs.ids)
                docs.source.append(si), docs.file.append(fi), docs.loc.append(d.loc), docs.ids.append(d.id)
                data = utf8(d)
                docs.nbytes.append(len(data))
                if "exact" in st.stages:
                    h = xxhash.xxh3_128_intdigest(data)
                    first = seen.setdefault(h, g)
                    if first != g:
                        removed[g] = {"stage": "exact", "kept": first}
                        continue
                if "minhash" in st.stages:
                    mh_docs.append(g)
                    texts.append(d.text)
            if texts:
                pending.append(pool.submit(_shingle_batch, texts, st.minhash))
            while len(pending) > cfg.workers:  # bounded: the texts of a few batches in flight at most
                keep(pending.pop(0).result())
        for p in pending:
            keep(p.result())
    candidates = 0
    if spilled is not None:
        with spilled:
            cl = cluster_spilled(spilled)
        candidates = cl.candidates
    elif mh_docs:
        sh = np.concatenate([p[0] for p in parts])
        off = np.zeros(len(mh_docs) + 1, np.int64)
        np.cumsum(np.concatenate([p[1] for p in parts]), out=off[1:])
        sig = np.concatenate([p[2] for p in parts])
        cl = cluster(sh, off, sig, st.minhash)
        candidates = cl.candidates
    if mh_docs:
        for m in cl.removed.tolist():
            removed[mh_docs[m]] = {
                "stage": "minhash",
                "kept": mh_docs[int(cl.keep[m])],
                "jaccard": round(float(cl.jaccard[m]), 6),
            }
    parts = sh = off = sig = cl = None  # the minhash tables go before the substring stage's partition
    partitions = 0
    if "substring" in st.stages:
        partitions = _substring(cfg, files, docs, removed)
    return _decisions(cfg, docs, removed, candidates, partitions)


def _substring(cfg: PrepareConfig, files, docs: _Docs, removed: dict[int, dict]) -> int:
    """Add the substring stage's records to `removed`; returns the number of partitions."""
    st: DedupSettings = cfg.dedup
    where = {(s, f, loc): g for g, (s, f, loc) in enumerate(zip(docs.source, docs.file, docs.loc))}
    partitions = 0
    group: list[int] = []
    data: list[bytes] = []
    size = 0

    def flush() -> None:
        nonlocal group, data, size, partitions
        if not group:
            return
        for k, rec in substring_records(cfg, data).items():
            removed[group[k]] = rec | {
                "kept": group[rec["kept"]],
                "span_kept": [group[x] for x in rec["span_kept"]],
            }
        partitions += 1
        group, data, size = [], [], 0

    for si, batch in _documents(cfg, files):
        for fi, d in batch:
            g = where[(si, fi, d.loc)]
            if g in removed:
                continue
            group.append(g)
            data.append(utf8(d))
            size += len(data[-1])
            if size >= st.substring_partition_bytes:
                flush()
    flush()
    return partitions


def substring_records(cfg: PrepareConfig, data: list[bytes]) -> dict[int, dict]:
    """The substring stage over one partition's documents `data` (input order): per edited document
    (its number in `data`), {"stage", "kept", "spans", "span_kept", "emptied"}, keepers as numbers."""
    d, a, b, kept = repeated_spans(data, cfg.dedup.substring_min_bytes)
    found: dict[int, dict] = {}
    for k in range(d.size):
        rec = found.setdefault(
            int(d[k]), {"stage": "substring", "kept": int(kept[k]), "spans": [], "span_kept": []}
        )
        rec["spans"].append([int(a[k]), int(b[k])])
        rec["span_kept"].append(int(kept[k]))
    for k, rec in found.items():
        text = cut(data[k], rec["spans"]).decode("utf-8")
        rec["emptied"] = not (text.strip() if cfg.dolma_compat else text)
    return found


def _decisions(
    cfg: PrepareConfig, docs: _Docs, removed: dict[int, dict], candidates: int, partitions: int
) -> dict:
    def at(g: int) -> tuple:
        return (docs.source[g], docs.file[g], docs.loc[g])

    found = []
    for g, r in removed.items():
        r = r | {
            "id": docs.ids[g],
            "kept": docs.ids[r["kept"]],
            "kept_at": at(r["kept"]),
            "bytes": docs.nbytes[g],
        }
        if "span_kept" in r:
            r["span_kept_at"] = [at(x) for x in r["span_kept"]]
            r["span_kept"] = [docs.ids[x] for x in r["span_kept"]]
        found.append((at(g), r))
    seen = [[0, 0] for _ in cfg.sources]
    for si, n in zip(docs.source, docs.nbytes):
        seen[si][0] += 1
        seen[si][1] += n
    return decisions_of(cfg, found, seen, candidates, partitions)


def _pass_on(found: list[tuple[tuple, dict]]) -> dict[tuple, tuple[tuple, str]]:
    """For the keeper of each exact or minhash record, the (position, id) of the document whose output
    stands for its text: itself when it reached the output (an edited one's record says where its cut
    spans are kept), else, along the chain, the keeper of a document removed in turn, or the first
    span's keeper of one cut to nothing (keepers are always earlier documents: the chain ends)."""
    by_at = {tuple(a): r for a, r in found}
    ids: dict[tuple, str] = {}
    for a, r in found:
        ids[tuple(a)] = r["id"]
        ids[tuple(r["kept_at"])] = r["kept"]
        for x, i in zip(r.get("span_kept_at", []), r.get("span_kept", [])):
            ids[tuple(x)] = i
    out = {}
    for _, r in found:
        if r["stage"] == "substring":
            continue
        start = here = tuple(r["kept_at"])
        while (q := by_at.get(here)) is not None and (q["stage"] != "substring" or q["emptied"]):
            here = tuple(q["kept_at"] if q["stage"] != "substring" else q["span_kept_at"][0])
        out[start] = (here, ids[here])
    return out


def decisions_of(cfg, found: list[tuple[tuple, dict]], seen: list, candidates: int, partitions: int) -> dict:
    """The decisions file's content (either runner) from `found`: (input position (source, file, line),
    {"id", "stage", "kept": kept id, "kept_at": its position, "bytes": the document's UTF-8 bytes,
    "jaccard"?, "spans"?, "span_kept"?, "span_kept_at"?, "emptied"?}) per removed or edited document,
    any order; `seen`: per source, [documents, text bytes] that took part."""
    labels = [s.label for s in cfg.sources]
    found = [(tuple(at), r) for at, r in found]
    passed = _pass_on(found)
    records = []
    for at, r in sorted(found, key=lambda x: x[0]):
        rec = {"id": r["id"], "source": labels[at[0]], "stage": r["stage"], "kept": r["kept"]}
        if r["stage"] != "substring" and passed[tuple(r["kept_at"])][0] != tuple(r["kept_at"]):
            rec["kept"], rec["kept_via"] = passed[tuple(r["kept_at"])][1], r["kept"]
        if "jaccard" in r:
            rec["jaccard"] = r["jaccard"]
        if "spans" in r:
            rec["spans"] = r["spans"]
            rec["span_kept"] = r["span_kept"]
            if r["emptied"]:
                rec["emptied"] = True
        rec["at"] = list(at)
        records.append(rec)
    counts = {s: sum(1 for r in records if r["stage"] == s) for s in cfg.dedup.stages}
    cut_bytes = sum(b - a for r in records for a, b in r.get("spans", []))
    return {
        "settings": asdict(cfg.dedup),
        "documents": sum(n for n, _ in seen),
        "text_bytes": sum(b for _, b in seen),
        "counts": counts,
        "outcomes": _outcomes(cfg, found),
        "sources": _source_stats(cfg, found, seen),
        **_clusters(found, passed),
        "minhash_candidate_pairs": candidates,
        "substring_bytes_removed": cut_bytes,
        "substring_partitions": partitions,
        "records": records,
    }


def _outcomes(cfg, found) -> dict:
    """Per stage what happened to its documents: exact and minhash remove them; substring edits them,
    or empties them (cut to nothing: they leave the output too)."""
    out = {s: ({"edited": 0, "emptied": 0} if s == "substring" else {"removed": 0}) for s in cfg.dedup.stages}
    for _, r in found:
        if r["stage"] == "substring":
            out["substring"]["emptied" if r["emptied"] else "edited"] += 1
        else:
            out[r["stage"]]["removed"] += 1
    return out


def _source_stats(cfg, found, seen) -> dict:
    """Per source: documents and text bytes that took part, and per stage the documents it removed (or
    cut to nothing) and the bytes it removed (olmax.dedup.gates' stats)."""
    stats = {
        spec.label: {
            "documents": seen[si][0],
            "text_bytes": seen[si][1],
            "stages": {s: {"documents": 0, "text_bytes": 0} for s in cfg.dedup.stages},
        }
        for si, spec in enumerate(cfg.sources)
    }
    for at, r in found:
        st = stats[cfg.sources[at[0]].label]["stages"][r["stage"]]
        if r["stage"] == "substring":
            st["documents"] += int(r["emptied"])
            st["text_bytes"] += sum(b - a for a, b in r["spans"])
        else:
            st["documents"] += 1
            st["text_bytes"] += r["bytes"]
    return stats


def _clusters(found, passed, top: int = 10, shown: int = 3) -> dict:
    """The biggest clusters: a kept document and every document exact or minhash removed in its favour
    (through the chains `_pass_on` follows), largest first (then by the kept one's position)."""
    members: dict[tuple, list[tuple]] = {}
    kept_id: dict[tuple, str] = {}
    for at, r in found:
        if r["stage"] == "substring":
            continue
        k, kid = passed[tuple(r["kept_at"])]
        members.setdefault(k, []).append((at, r["id"]))
        kept_id[k] = kid
    ranked = sorted(members.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    clusters = []
    for k, ms in ranked[:top]:
        ms = sorted(ms)[:shown]
        clusters.append(
            {
                "kept": kept_id[k],
                "size": 1 + len(members[k]),
                "members": [i for _, i in ms],
                "at": [list(k)] + [list(a) for a, _ in ms],
            }
        )
    return {"largest_cluster": clusters[0]["size"] if clusters else 1, "clusters": clusters}


def first_lines(cfg: PrepareConfig, files: dict[str, list[str]], decisions: dict) -> None:
    """Add to each of `decisions`' clusters the first line of the documents it shows (kept one first),
    read back from their input files."""
    want: dict[tuple, set] = {}
    for c in decisions["clusters"]:
        for si, fi, loc in c["at"]:
            want.setdefault((si, fi), set()).add(loc)
    text: dict[tuple, str] = {}
    for (si, fi), locs in sorted(want.items()):
        path = files[cfg.sources[si].label][fi]
        for batch in stage_batches(cfg, si, [path], first_file=fi):
            for _, d in batch:
                if d.loc in locs:
                    line = next((x for x in d.text.splitlines() if x.strip()), "")
                    text[(si, fi, d.loc)] = line.strip()[:200]
    for c in decisions["clusters"]:
        c["first_lines"] = [text.get(tuple(a), "") for a in c["at"]]


def load_or_plan(cfg: PrepareConfig, out: Path, files: dict[str, list[str]], planner=None) -> dict:
    """The decisions of this run: read back after a kill, else made now (by `planner(cfg, files)`, default `plan`; the Beam runner passes its pipeline) and written atomically."""
    path = out / DECISIONS_FILE
    if path.exists():
        saved = json.loads(path.read_text())
        if saved.get("settings") == json.loads(json.dumps(asdict(cfg.dedup))):
            return saved
    t0, c0 = time.monotonic(), time.process_time()
    decisions = planner(cfg, files) if planner is not None else plan(cfg, files, work_dir=str(out))
    first_lines(cfg, files, decisions)
    write_json(path, decisions)
    print(
        f"olmax: dedup decisions for {decisions['documents']:,} documents "
        f"({decisions['text_bytes'] / 1e6:,.2f} MB of text) in {time.monotonic() - t0:.2f}s "
        f"({time.process_time() - c0:.2f}s CPU)",
        file=sys.stderr,
    )
    return decisions


def edits_of(decisions: dict, source: int) -> dict[tuple[int, int], list | None]:
    """A source's (file, line) → spans to cut, or None for a removed document (or one cut to nothing)."""
    return {
        (r["at"][1], r["at"][2]): None if r.get("emptied") else r.get("spans")
        for r in decisions["records"]
        if r["at"][0] == source
    }


def apply_edits(batches, edits: dict):
    """Prepare's batches with removed documents dropped and the substring stage's spans cut."""
    for batch in batches:
        kept = []
        for fi, doc, bad in batch:
            key = (fi, doc.loc)
            if key not in edits:
                kept.append((fi, doc, bad))
            elif edits[key] is not None:
                text = cut(doc.text.encode("utf-8"), edits[key]).decode("utf-8")
                kept.append((fi, replace(doc, text=text), bad))
        if kept:
            yield kept


def write_removed(out: Path, decisions: dict) -> None:
    lines = []
    for r in decisions["records"]:
        lines.append(json.dumps({k: v for k, v in r.items() if k != "at"}, ensure_ascii=False) + "\n")
    write_text(out / REMOVED_FILE, "".join(lines))


def manifest_entry(decisions: dict) -> dict:
    st = decisions["settings"]
    return {
        "stages": list(st["stages"]),
        "settings": st,
        "normalization": NORMALIZATION,
        "documents_seen": decisions["documents"],
        "text_bytes_seen": decisions["text_bytes"],
        "removed": decisions["counts"],
        "outcomes": decisions["outcomes"],
        "sources": decisions["sources"],
        "largest_cluster": decisions["largest_cluster"],
        "clusters": [{k: v for k, v in c.items() if k != "at"} for c in decisions["clusters"]],
        "minhash_candidate_pairs": decisions["minhash_candidate_pairs"],
        "substring_bytes_removed": decisions["substring_bytes_removed"],
        "substring_partitions": decisions["substring_partitions"],
        "substring_partitioning": "consecutive documents in input order, about "
        f"{st['substring_partition_bytes']} bytes of text each; repeats are found within a partition",
        "removed_file": REMOVED_FILE,
    }
