"""`olmax data prepare --dedup ... --runner beam`: the local runner's dedup decisions (dedup_stages.py),
made by Apache Beam pipelines, so no worker holds the corpus, the candidate pairs or the graph.

Documents are keyed by their input position (source, file, line); every choice is a minimum over
positions, so the result is the local runner's whatever the order elements meet in.

Pipeline 1 (exact and minhash):
1. per input file (a worker): its documents' positions, ids, xxh3-128 of the UTF-8, and for minhash the
   shingle sets, signatures and band keys (olmax.dedup: the local code).
2. exact: GroupByKey on the hash; the first position of a group is kept, the others removed.
3. minhash over the exact stage's survivors: GroupByKey on (band, bucket key); each bucket's members in
   input order give the local rule's pairs (`bucket_pairs`: each with the first ANCHORS before it);
   each pair is joined with both documents' shingle sets (CoGroupByKey by document, then GroupByKey by
   pair: a pair from several bands is one candidate) and kept at Jaccard >= threshold: the verified
   edges.
4. connected components by min-label propagation over the edges, one GroupByKey a round: every node
   starts as its own label; a round gives each node the minimum of its label and the labels sent to it
   by its neighbours and by the nodes that asked it (a node asks its label's node, which answers the
   next round: pointer jumping, so a chain is crossed in far fewer rounds than its length). Labels
   only decrease and stay in the component; when a round changes none, each is its component's first
   position (the kept document). `rounds` rounds are laid out in the graph, the last one's changes
   counted; the driver reruns the pipeline with twice the rounds until that count is 0. A worker holds
   one node's neighbours and askers at a time, never the graph.
5. each removed document joined with its kept one's shingle set: the record's exact Jaccard.
Pipeline 2 (substring): the driver cuts the survivors, in input order, into the local partitions of
consecutive documents (from per-file document sizes); one work item per partition re-reads its documents
and runs the local `repeated_spans`.
The driver then holds only the records (what `removed.jsonl` holds) and per-file document sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xxhash

from olmax import beam, storage
from olmax.beam import Failed
from olmax.data.prepare.dedup_stages import decisions_of, stage_batches, substring_records, utf8
from olmax.data.prepare.prepare_config import PrepareConfig
from olmax.dedup.minhash import band_keys, bucket_pairs, jaccard, signatures
from olmax.dedup.shingles import text_shingles

FIRST_ROUNDS = 4  # propagation rounds of the first try (each doubles a chain's reach, roughly)


@dataclass(frozen=True)
class DedupFile:
    source: int
    file: int
    path: str


@dataclass(frozen=True)
class Partition:
    """The substring stage's work item: its index and (source, file, path, lines) segments in order."""

    index: int
    segments: tuple[tuple[int, int, str, tuple[int, ...]], ...]


def file_documents(cfg: PrepareConfig, task: DedupFile) -> dict:
    """Map: one input file → its documents (position, id, hash, band keys, shingles) and sizes."""
    st = cfg.dedup
    minhash = "minhash" in st.stages
    docs, locs, nbytes = [], [], []
    for batch in stage_batches(cfg, task.source, [task.path], first_file=task.file):
        datas = [utf8(d) for _, d in batch]
        keys = sh = off = None
        if minhash:
            sh, off = text_shingles([d.text for _, d in batch], st.minhash.ngram)
            keys = band_keys(signatures(sh, off, st.minhash), st.minhash).view(np.int64)
        for k, ((_, d), data) in enumerate(zip(batch, datas)):
            locs.append(d.loc)
            nbytes.append(len(data))
            shingles = sh[off[k] : off[k + 1]].copy() if minhash else None
            row = tuple(int(x) for x in keys[k]) if minhash else ()
            h = xxhash.xxh3_128_digest(data)
            docs.append(((task.source, task.file, d.loc), d.id, h, row, shingles))
    return {
        "source": task.source,
        "file": task.file,
        "locs": np.asarray(locs, np.int64),
        "nbytes": np.asarray(nbytes, np.int64),
        "docs": docs,
    }


def _docs(result):
    return [] if isinstance(result, Failed) else result["docs"]


def _summary(result):
    return result if isinstance(result, Failed) else {k: v for k, v in result.items() if k != "docs"}


def _exact_group(kv):
    """One hash's documents: ("keep", the first), ("rec", a removal record naming it) for the others."""
    members = sorted(kv[1], key=lambda d: d[0])
    first = members[0]
    yield "keep", first
    for doc in members[1:]:
        yield "rec", (doc[0], {"id": doc[1], "stage": "exact", "kept": first[1], "kept_at": first[0]})


def _bucket_entries(doc):
    pos, _, _, keys, shingles = doc
    if shingles.size:  # no shingles: nothing to compare (the local `cluster` skips it too)
        for band, key in enumerate(keys):
            yield (band, key), pos


def _bucket(kv):
    members = sorted(kv[1])
    for a, b in bucket_pairs(np.arange(len(members))).tolist():
        yield members[a], members[b]


def _requests(pair):
    return [(pair[0], pair), (pair[1], pair)]


def _attach(kv):
    pos, g = kv
    docs = list(g["doc"])
    if docs:
        doc_id, shingles = docs[0]
        for pair in g["req"]:
            yield pair, (pos, doc_id, shingles)


def _pair_jaccard(kv):
    """(a, b), both documents → (a, b, exact Jaccard, id of a, id of b)."""
    (a, b), parts = kv
    by = {p: (i, s) for p, i, s in parts}
    (ia, sa), (ib, sb) = by[a], by[b]
    sim = float(jaccard(np.concatenate([sa, sb]), np.array([0, sa.size, sa.size + sb.size]), [0], [1])[0])
    return a, b, sim, ia, ib


def _with_jaccard(bm, pairs, side, name: str):
    """Each (a, b) of `pairs` with its documents' exact Jaccard and ids (a join by document)."""
    req = pairs | f"{name}: ask" >> bm.FlatMap(_requests)
    return (
        {"req": req, "doc": side}
        | f"{name}: by document" >> bm.CoGroupByKey()
        | f"{name}: attach" >> bm.FlatMap(_attach)
        | f"{name}: by pair" >> bm.GroupByKey()
        | f"{name}: jaccard" >> bm.Map(_pair_jaccard)
    )


def _both_ways(edge):
    return [(edge[0], edge[1]), (edge[1], edge[0])]


def _first_state(kv):
    """A node's state: (label, neighbours, nodes that asked for its label, whether the label changed)."""
    node, others = kv
    return node, (node, tuple(sorted(set(others))), (), True)


def _send(kv):
    """A round's messages: the node's label to its neighbours and to the nodes that asked for it, and
    a request to its label's node (whose label it gets next round: pointer jumping)."""
    node, (label, others, askers, _) = kv
    yield node, ("state", label, others)
    for other in others + askers:
        yield other, ("label", label)
    if label != node:
        yield label, ("ask", node)


def _receive(kv):
    node, items = kv
    label = others = None
    best, askers = None, []
    for item in items:
        if item[0] == "state":
            label, others = item[1], item[2]
        elif item[0] == "label":
            best = item[1] if best is None else min(best, item[1])
        else:
            askers.append(item[1])
    new = label if best is None else min(label, best)
    return node, (new, others, tuple(sorted(askers)), new != label)


def components(bm, edges, rounds: int):
    """(node, label) after `rounds` rounds of min-label propagation (one GroupByKey a round), and the
    number of labels the last round changed (0: each label is its component's first node)."""
    state = (
        edges
        | "Both ways" >> bm.FlatMap(_both_ways)
        | "Neighbours" >> bm.GroupByKey()
        | "First state" >> bm.Map(_first_state)
    )
    for r in range(rounds):
        state = (
            state
            | f"Round {r}: send" >> bm.FlatMap(_send)
            | f"Round {r}: gather" >> bm.GroupByKey()
            | f"Round {r}: receive" >> bm.Map(_receive)
        )
    labels = state | "Labels" >> bm.Map(lambda ns: (ns[0], ns[1][0]))
    changed = (
        state | "Changed" >> bm.Filter(lambda ns: ns[1][3]) | "Count changed" >> bm.combiners.Count.Globally()
    )
    return labels, changed


def _minhash_record(row):
    kept, pos, sim, kept_id, doc_id = row
    return pos, {
        "id": doc_id,
        "stage": "minhash",
        "kept": kept_id,
        "kept_at": kept,
        "jaccard": round(sim, 6),
    }


def _build_stages(bm, p, cfg: PrepareConfig, tasks, folder: str, rounds: int) -> None:
    st = cfg.dedup
    read = beam.map_tasks(
        p,
        "Read and shingle",
        tasks,
        lambda t: file_documents(cfg, t),
        lambda t: (t.source, t.file),
    )
    beam.collect(read | "Summaries" >> bm.Map(_summary), folder, "files")
    docs = read | "Documents" >> bm.FlatMap(_docs)
    survivors = docs
    if "exact" in st.stages:
        exact = (
            docs
            | "By hash" >> bm.Map(lambda d: (d[2], d))
            | "Same hash" >> bm.GroupByKey()
            | "First of each" >> bm.FlatMap(_exact_group)
        )
        beam.collect(
            exact | "Exact records" >> bm.Filter(lambda x: x[0] == "rec") | bm.Map(lambda x: x[1]),
            folder,
            "exact",
        )
        survivors = exact | "Kept" >> bm.Filter(lambda x: x[0] == "keep") | bm.Map(lambda x: x[1])
    if "minhash" not in st.stages:
        return
    side = survivors | "Shingle sets" >> bm.Map(lambda d: (d[0], (d[1], d[4])))
    pairs = (
        survivors
        | "Band keys" >> bm.FlatMap(_bucket_entries)
        | "Buckets" >> bm.GroupByKey()
        | "Bucket pairs" >> bm.FlatMap(_bucket)
    )
    verified = _with_jaccard(bm, pairs, side, "Verify")  # a pair from several bands: one result
    beam.collect(verified | "Count candidates" >> bm.combiners.Count.Globally(), folder, "candidates")
    threshold = st.minhash.threshold
    edges = (
        verified
        | "Verified" >> bm.Filter(lambda e: e[2] >= threshold)
        | "Edges" >> bm.Map(lambda e: (e[0], e[1]))
    )
    labels, changed = components(bm, edges, rounds)
    beam.collect(changed, folder, "changed")
    gone = labels | "Removed" >> bm.Filter(lambda nl: nl[1] != nl[0]) | bm.Map(lambda nl: (nl[1], nl[0]))
    records = _with_jaccard(bm, gone, side, "Kept Jaccard") | "Minhash records" >> bm.Map(_minhash_record)
    beam.collect(records, folder, "minhash")


def substring_partition(cfg: PrepareConfig, part: Partition) -> list:
    """Map: one partition → its substring records (position, record), by the local `repeated_spans`."""
    at, ids, data = [], [], []
    for si, fi, path, lines in part.segments:
        want = set(lines)
        for batch in stage_batches(cfg, si, [path], first_file=fi):
            for _, d in batch:
                if d.loc in want:
                    at.append((si, fi, d.loc))
                    ids.append(d.id)
                    data.append(utf8(d))
    found = substring_records(cfg, data)
    for g, r in found.items():
        r.update(
            id=ids[g],
            kept=ids[r["kept"]],
            kept_at=at[r["kept"]],
            span_kept_at=[at[x] for x in r["span_kept"]],
            span_kept=[ids[x] for x in r["span_kept"]],
        )
    return [(at[g], r) for g, r in found.items()]


def partitions(
    cfg: PrepareConfig, files: dict[str, list[str]], summaries: list[dict], removed: set
) -> list[Partition]:
    """The local runner's substring partitions: the surviving documents in input order, a partition
    closing once it holds `substring_partition_bytes` of text."""
    limit = cfg.dedup.substring_partition_bytes
    by_file = {(s["source"], s["file"]): s for s in summaries}
    out: list[Partition] = []
    segs: list = []
    lines: list[int] = []
    size = 0
    where = None

    def close_segment() -> None:
        nonlocal lines
        if lines:
            segs.append((*where, tuple(lines)))
            lines = []

    for si, spec in enumerate(cfg.sources):
        for fi, path in enumerate(files[spec.label]):
            close_segment()
            where = (si, fi, path)
            s = by_file[(si, fi)]
            for loc, n in zip(s["locs"].tolist(), s["nbytes"].tolist()):
                if (si, fi, loc) in removed:
                    continue
                lines.append(loc)
                size += n
                if size >= limit:
                    close_segment()
                    out.append(Partition(len(out), tuple(segs)))
                    segs, size = [], 0
    close_segment()
    if segs:
        out.append(Partition(len(out), tuple(segs)))
    return out


def plan_beam(cfg: PrepareConfig, files: dict[str, list[str]], options, tmp: str, log_dir: str) -> dict:
    """The decisions (dedup_stages' format, byte for byte the local `plan`'s) from Beam pipelines."""

    bm = beam.require_beam()
    tasks = [
        DedupFile(si, fi, path)
        for si, spec in enumerate(cfg.sources)
        for fi, path in enumerate(files[spec.label])
    ]
    rounds = FIRST_ROUNDS
    while True:
        folder = storage.join(tmp, f"dedup-{rounds}")
        beam.run(
            lambda p, rounds=rounds, folder=folder: _build_stages(bm, p, cfg, tasks, folder, rounds),
            options,
            log_dir,
            "olmax data prepare --dedup",
        )
        summaries = beam.collected(folder, "files")
        beam.raise_first_failure(summaries)
        if sum(beam.collected(folder, "changed")) == 0:
            break
        storage.remove_tree(folder)
        rounds *= 2  # not converged: the labels are not yet the components' first documents
    found = beam.collected(folder, "exact") + beam.collected(folder, "minhash")
    candidates = sum(beam.collected(folder, "candidates"))
    storage.remove_tree(folder)
    n_parts = 0
    if "substring" in cfg.dedup.stages:
        parts = partitions(cfg, files, summaries, {at for at, _ in found})
        n_parts = len(parts)
        folder = storage.join(tmp, "dedup-substring")

        def build(p):
            results = beam.map_tasks(
                p,
                "Repeated spans",
                parts,
                lambda part: substring_partition(cfg, part),
                lambda t: (t.index,),
            )
            beam.collect(results, folder, "substring")

        beam.run(build, options, log_dir, "olmax data prepare --dedup substring")
        done = beam.collected(folder, "substring")
        beam.raise_first_failure(done)
        found += [rec for part in done for rec in part]
        storage.remove_tree(folder)
    seen = [[0, 0] for _ in cfg.sources]
    need: dict[tuple, set] = {}
    for at, _ in found:
        need.setdefault((at[0], at[1]), set()).add(at[2])
    size: dict[tuple, int] = {}  # the records' documents' sizes only
    for s in summaries:
        seen[s["source"]][0] += int(s["locs"].size)
        seen[s["source"]][1] += int(s["nbytes"].sum())
        locs = need.get((s["source"], s["file"]), set())
        for loc, n in zip(s["locs"].tolist(), s["nbytes"].tolist()):
            if loc in locs:
                size[(s["source"], s["file"], loc)] = n
    found = [(tuple(at), r | {"bytes": size[tuple(at)]}) for at, r in found]
    return decisions_of(cfg, found, seen, candidates, n_parts)


def planner(options, tmp: str, log_dir: str):
    """`load_or_plan`'s planner for the Beam runner."""

    def run(cfg: PrepareConfig, files):
        return plan_beam(cfg, files, options, tmp, log_dir)

    return run
