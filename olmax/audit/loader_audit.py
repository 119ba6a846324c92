"""`olmax audit loader`: replay a run's exact data plan (no training, no token reads) and check it.

Contract. The replay asks olmax's own `Loader` (same index, order and fingerprint as training) for
the instance ids of every rank's rows of every global batch in the audited window: `--steps N`
stream steps from epoch 1 step 0, or `--epochs E` whole epochs. `--resume-at K` saves the loader
state before stream step K, round-trips it through its dict form and resumes with a fresh loader
(optionally at another process count), exactly as a restart would. Checks (gated unless marked):
- instances_over_planned: an instance emitted more than once within one epoch (the plan is a
  permutation: at most once per epoch);
- instances_missing: in a fully audited epoch, fewer distinct instances than batches x G;
- rank_overlap / rank_union: an instance on two ranks in one step, or the ranks' rows not being
  exactly the global batch (double sharding);
- path_under_several_labels: one physical file listed under two labels (planned repetition lists the
  same path under the same label: olmax prepare writes it so);
- source_share:<label>: observed token share vs the mix's, within --share-tolerance plus 4 sigma;
- identical_files: two different physical files with the same bytes (a copied shard);
- duplicate_instances / duplicate_documents: identical content at different physical files or
  positions (part of a shard copied, a document in two shards), as a fraction of the mix (limits
  above 0 by default: real corpora repeat some documents, e.g. license headers, by nature);
- unplanned_repeat_rows: emitted rows whose content was already emitted from another position;
- repeated_spans (with --span-tokens S): tokens inside a later copy of an S-token span found
  elsewhere in the mix (a shard copied at an offset, pasted documents), as a fraction;
- exposure (info): per source, distinct content tokens seen 1x, 2x, ... in the audited window.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from olmax.audit.report import Check, checks_json, failed, summary_lines
from olmax.data.packing import PackedIndex
from olmax.data.stream import StreamSpec
from olmax.dedup.minhash import MinHashParams
from olmax.errors import OlmaxError


@dataclass(frozen=True)
class LoaderAuditConfig:
    """The stream audited (`StreamSpec`: mix, L, G, seed, order, ...) and how to audit it."""

    stream: StreamSpec
    steps: int | None = None  # stream steps from the start; None: whole epochs
    epochs: int | None = None  # None with steps None: 1 epoch
    process_count: int = 1
    resume_at: tuple[int, ...] = ()
    resume_process_count: int | None = None
    share_tolerance: float = 0.02
    max_dup_instance_frac: float = 0.01
    max_dup_doc_frac: float = 0.05
    min_doc_tokens: int = 32
    content: bool = True
    threads: int = 2
    examples: int = 10
    rank_check_steps: int = 512  # steps on which every rank's loader is asked (see replay)
    exposure_out: str | None = None  # write per-instance serve counts (olmax/evals/exposure.py format)
    span_tokens: int = 0  # > 0: also find repeated spans of this many tokens (dedup.py), gated below
    max_repeated_span_frac: float = 0.05
    near: MinHashParams | None = None  # near-duplicate exposure (near.py), gated by max_near_dup_frac
    max_near_dup_frac: float = 0.05


def _loaders(index, config: LoaderAuditConfig, process_count: int):
    """One loader per rank over the audited stream, reading synchronously (ids only, no token reads)."""
    spec = config.stream.replace(num_threads=0)
    return [
        spec.open_loader(index, process_index=p, process_count=process_count) for p in range(process_count)
    ]


def replay(index, config: LoaderAuditConfig) -> dict:
    """Every emitted row of the audited window: arrays stream step, epoch, rank, instance id.

    Every rank's loader is asked for its rows on `rank_check_steps` steps (all of them in short
    audits; else evenly spaced ones plus the first step after each resume) and those rows are
    checked against the global batch; on the other steps the global batch stands for the ranks'
    union (rank = position mod P, the loader's contract). Memory: 10 bytes per row.
    """
    from olmax.data.state import LoaderState

    loaders = _loaders(index, config, config.process_count)
    reference = _loaders(index, config, 1)[0]
    bpe = loaders[0].batches_per_epoch
    total = config.steps if config.steps is not None else (config.epochs or 1) * bpe
    if total <= 0:
        raise OlmaxError(f"nothing to audit: --steps/--epochs give {total} steps")
    n_check = max(1, config.rank_check_steps)
    checked_steps = set(np.linspace(0, total - 1, min(total, n_check)).round().astype(int).tolist())
    id_dtype = np.uint32 if index.num_instances < 2**32 else np.int64
    pending = sorted(set(config.resume_at))
    ks, ranks, ids, resumes = [], [], [], []
    overlap_rows = union_bad_steps = checked = 0
    k = 0
    while k < total:
        check = k in checked_steps
        if pending and pending[0] == k:
            pending.pop(0)
            epoch, step = 1 + k // bpe, k % bpe
            state = LoaderState.from_dict(loaders[0].state_at(epoch, step).to_dict())
            loaders = _loaders(index, config, config.resume_process_count or config.process_count)
            e2, s2 = loaders[0].resume_position(state)
            k2 = (e2 - 1) * bpe + s2
            resumes.append({"saved_before_step": k, "resumed_at_step": k2, "process_count": len(loaders)})
            k, check = k2, True
        epoch, step = 1 + k // bpe, k % bpe
        global_ids = reference.instance_ids(epoch, step)
        if check:
            checked += 1
            rows = [ld.instance_ids(epoch, step) for ld in loaders]
            allrows = np.concatenate(rows)
            overlap_rows += int(allrows.size - np.unique(allrows).size)
            if not np.array_equal(np.sort(allrows), np.sort(global_ids)):
                union_bad_steps += 1
            rank = np.concatenate([np.full(r.size, i, dtype=np.int16) for i, r in enumerate(rows)])
        else:
            allrows = global_ids
            rank = (np.arange(allrows.size) % len(loaders)).astype(np.int16)
        ks.append(np.full(allrows.size, k, dtype=np.int32))
        ranks.append(rank)
        ids.append(allrows.astype(id_dtype))
        k += 1
    ks_a = np.concatenate(ks)
    return {
        "k": ks_a,
        "epoch": 1 + ks_a // bpe,
        "rank": np.concatenate(ranks),
        "ids": np.concatenate(ids).astype(np.int64),
        "steps": int(np.unique(ks_a).size),
        "planned_steps": total,
        "batches_per_epoch": bpe,
        "overlap_rows": overlap_rows,
        "union_bad_steps": union_bad_steps,
        "rank_checked_steps": checked,
        "resumes": resumes,
    }


def audit_loader(config: LoaderAuditConfig) -> dict:
    """Run every check; returns the report dict (`report["ok"]` False when a gated check fails).

    Phases: replay the plan → plan checks (repeats, coverage, ranks, resume) → label checks → source
    shares → content checks (duplicates, unplanned repeats, exposure, spans) → report."""
    stream = config.stream
    index = stream.open_index()
    run = replay(index, config)
    checks: list[Check] = []
    plan = _plan_checks(index, run, config, checks)
    several, phys = _label_checks(index, checks)
    shares = _share_checks(index, run["ids"], config, checks)
    report: dict = {
        "command": "audit loader",
        "settings": asdict(config),
        "fingerprint": index.fingerprint,
        "index": {
            "files": len(index.paths),
            "physical_files": int(np.unique(phys).size),
            "instances": index.num_instances,
            "tokens": index.num_tokens,
            "batches_per_epoch": run["batches_per_epoch"],
        },
        "replay": {
            "steps": run["steps"],
            "rows": int(run["ids"].size),
            "resumes": run["resumes"],
            "full_epochs": plan["full_epochs"],
            "rank_checked_steps": run["rank_checked_steps"],
        },
        "instances_over_planned_examples": plan["over_examples"],
        "paths_under_several_labels": several,
        "sources": shares,
    }
    if config.content:
        report.update(_content_checks(index, run, config, checks))
    if config.near is not None:
        from olmax.audit.near import near_exposure

        report["near_duplicates"] = near_exposure(
            index,
            config.near,
            min_doc_tokens=config.min_doc_tokens,
            max_frac=config.max_near_dup_frac,
            threads=config.threads,
            checks=checks,
        )
    if config.exposure_out:
        write_exposure(config.exposure_out, index, run["ids"], stream, last_step=int(run["k"].max()) + 1)
        report["exposure_file"] = config.exposure_out
    report["hashing"] = (
        "instances and documents: xxh3-64 of their uint32 bytes, every equal-hash pair "
        "re-compared byte for byte before it is counted"
    )
    report["checks"] = checks_json(checks)
    report["ok"] = not failed(checks)
    report["summary"] = summary_lines(
        f"olmax audit loader: {stream.mix} (L={stream.seq_len}, "
        f"G={stream.global_batch_size}, seed={stream.seed}, {run['steps']} steps x "
        f"{config.process_count} ranks, {run['ids'].size} rows)",
        checks,
    )
    return report


def _plan_checks(index, run: dict, config: LoaderAuditConfig, checks: list[Check]) -> dict:
    """Each instance at most once per epoch, full epochs covered, ranks disjoint and complete, resumes
    where saved; returns the over-planned examples and the fully audited epochs."""
    ids, epochs, k, rank = run["ids"], run["epoch"], run["k"], run["rank"]
    G, L, N = config.stream.global_batch_size, config.stream.seq_len, index.num_instances
    key = (epochs - 1) * N + ids
    uniq, counts = np.unique(key, return_counts=True)
    over = counts > 1
    over_examples = []
    for u in uniq[over][: config.examples].tolist():
        where = np.flatnonzero(key == u)
        f, a, _ = index.instance_documents(int(u % N))[0]
        over_examples.append(
            {
                "instance": int(u % N),
                "epoch": int(u // N) + 1,
                "file": index.paths[f],
                "window": a // L,
                "emitted_at": [{"step": int(k[i]), "rank": int(rank[i])} for i in where],
            }
        )
    n_over = int((counts[over] - 1).sum())
    checks.append(
        Check(
            "instances_over_planned",
            n_over == 0,
            n_over,
            0,
            detail="rows repeating an instance within its epoch",
        )
    )
    bpe = run["batches_per_epoch"]
    full_epochs = [e for e in np.unique(epochs).tolist() if np.unique(k[epochs == e]).size == bpe]
    missing = sum(bpe * G - int(np.unique(ids[epochs == e]).size) for e in full_epochs)
    checks.append(
        Check(
            "instances_missing",
            missing == 0,
            missing,
            0,
            detail=f"over {len(full_epochs)} full epoch(s); the epoch tail of "
            f"{N - bpe * G} instances is dropped by plan",
        )
    )
    checks.append(
        Check(
            "rank_overlap",
            run["overlap_rows"] == 0,
            run["overlap_rows"],
            0,
            detail="rows whose instance another rank holds in the same step",
        )
    )
    checks.append(
        Check(
            "rank_union",
            run["union_bad_steps"] == 0,
            run["union_bad_steps"],
            0,
            detail="steps whose ranks' rows are not exactly the global batch",
        )
    )
    if run["steps"] != run["planned_steps"] or any(
        r["resumed_at_step"] != r["saved_before_step"] for r in run["resumes"]
    ):
        checks.append(Check("resume_position", False, run["resumes"], "resume where saved"))
    elif run["resumes"]:
        checks.append(Check("resume_position", True, run["resumes"], "resume where saved"))
    return {"over_examples": over_examples, "full_epochs": full_epochs}


def _label_checks(index, checks: list[Check]) -> tuple[list[dict], np.ndarray]:
    """One physical file under two labels; returns those files and every path's physical id."""
    from olmax.audit.spans import physical_ids

    phys = physical_ids(index.paths)
    several = []
    for p in np.unique(phys).tolist():
        labels = sorted({index.labels[f] for f in np.flatnonzero(phys == p).tolist()})
        if len(labels) > 1:
            several.append({"file": index.paths[int(np.flatnonzero(phys == p)[0])], "labels": labels})
    checks.append(
        Check(
            "path_under_several_labels",
            not several,
            len(several),
            0,
            detail="; ".join(f"{s['file']} as {'+'.join(s['labels'])}" for s in several[:3]),
        )
    )
    return several, phys


def _share_checks(index, ids: np.ndarray, config: LoaderAuditConfig, checks: list[Check]) -> dict:
    """Observed token share of each source vs the mix's plan; returns the per-source shares."""
    L = config.stream.seq_len
    planned = index.tokens_by_label()
    total_planned = sum(planned.values())
    if isinstance(index, PackedIndex):  # a packed row holds documents of several files: count each's tokens
        observed = np.asarray(list(index.tokens_by_label(ids).values()), dtype=np.int64)
        served = max(1, int(observed.sum()))
    else:
        observed = np.bincount(index.source_ids(ids), minlength=len(index.label_names)) * L
        served = max(1, ids.size * L)
    shares = {}
    for i, name in enumerate(index.label_names):
        p = planned[name] / total_planned
        o = float(observed[i]) / served
        slack = config.share_tolerance + 4 * math.sqrt(p * (1 - p) / max(1, ids.size))
        shares[name] = {
            "planned_tokens": planned[name],
            "planned_share": round(p, 6),
            "observed_tokens": int(observed[i]),
            "observed_share": round(o, 6),
        }
        checks.append(
            Check(f"source_share:{name}", abs(o - p) <= slack, round(o, 6), f"{p:.4f} ± {slack:.4f}")
        )
    return shares


def _content_checks(index, run: dict, config: LoaderAuditConfig, checks: list[Check]) -> dict:
    """Identical instances/documents elsewhere, unplanned repeats, identical files, exposure and (with
    `span_tokens`) repeated spans; returns the report's `content` and `exposure` sections."""
    from olmax.audit.content import scan_content

    ids, ex, L, N = run["ids"], config.examples, config.stream.seq_len, index.num_instances
    work_dir = config.stream.work_dir
    packed = isinstance(index, PackedIndex)
    # documents and whole files come from the mix's files; instances are fixed windows of them, or packed rows
    files_index = config.stream.file_index() if packed else index
    content = scan_content(
        files_index,
        min_doc_tokens=config.min_doc_tokens,
        threads=config.threads,
        work_dir=work_dir,
        examples=ex,
        instances=not packed,
    )
    if packed:
        canonical, row_collisions, dup_examples = packed_duplicates(index, ex)
        dup_inst = int((canonical != np.arange(N)).sum())
        cid, raw = canonical[ids], ids  # a packed row's position is its instance id
        collisions = row_collisions + content.collisions
    else:
        dup_inst = int(
            sum(
                int(
                    (
                        content.canonical[content.phys_offsets[p] : content.phys_offsets[p + 1]]
                        != np.arange(content.phys_offsets[p], content.phys_offsets[p + 1])
                    ).sum()
                )
                for p in content.phys[:].tolist()
            )
        )  # counted per mix line
        cid = content.content_ids(index, ids)
        files, starts = index.locate(ids)
        raw = content.phys_offsets[content.phys[files]] + starts // L
        collisions, dup_examples = content.collisions, content.window_examples
    frac = dup_inst / max(1, N)
    checks.append(
        Check(
            "duplicate_instances",
            frac <= config.max_dup_instance_frac,
            round(frac, 6),
            config.max_dup_instance_frac,
            detail=f"{dup_inst} of {N} instances repeat content found at another "
            f"{'packed row' if packed else 'file/position'}",
        )
    )
    dfrac = content.duplicate_doc_tokens / max(1, content.doc_tokens)
    checks.append(
        Check(
            "duplicate_documents",
            dfrac <= config.max_dup_doc_frac,
            round(dfrac, 6),
            config.max_dup_doc_frac,
            detail=f"{content.duplicate_docs} documents ({content.duplicate_doc_tokens} "
            f"tokens, >= {config.min_doc_tokens} tokens each) repeat another document",
        )
    )
    # Rows whose content was emitted from another physical window: beyond the most-emitted one.
    pair = np.unique(np.stack([cid, raw]), axis=1, return_counts=True)
    by_cid: dict[int, list[int]] = {}
    for c, n in zip(pair[0][0].tolist(), pair[1].tolist()):
        by_cid.setdefault(c, []).append(n)
    unplanned = int(sum(sum(v) - max(v) for v in by_cid.values() if len(v) > 1))
    checks.append(
        Check(
            "unplanned_repeat_rows",
            unplanned <= config.max_dup_instance_frac * ids.size,
            unplanned,
            f"{config.max_dup_instance_frac} of {ids.size} rows",
            detail="emitted rows repeating content emitted from another file/position",
        )
    )
    same = content.identical_files
    checks.append(
        Check(
            "identical_files",
            not same,
            len(same),
            0,
            detail="; ".join(f"{d['file']} == {d['same_as_file']}" for d in same[:3]),
        )
    )
    src = index.source_ids(ids)
    _, cfirst, cn = np.unique(cid, return_index=True, return_counts=True)
    exposure = {}
    for i, name in enumerate(index.label_names):
        sel = src[cfirst] == i
        levels, tok = np.unique(cn[sel], return_counts=True)
        exposure[name] = {f"{int(lv)}x": int(t) * L for lv, t in zip(levels, tok)}
    checks.append(
        Check(
            "hash_collisions",
            collisions == 0,
            collisions,
            0,
            gated=False,
            detail="equal xxh3 hashes whose bytes differed",
        )
    )
    section = {
        "identical_files": same,
        "duplicate_instances": dup_inst,
        "duplicate_instance_examples": dup_examples,
        "duplicate_documents": content.duplicate_docs,
        "duplicate_document_tokens": content.duplicate_doc_tokens,
        "documents": content.docs,
        "document_tokens": content.doc_tokens,
        "duplicate_document_examples": content.doc_examples,
        "unplanned_repeat_rows": unplanned,
    }
    if config.span_tokens > 0:
        section["repeated_spans"] = _span_checks(files_index, content, config, checks)
    return {"content": section, "exposure": exposure}


def packed_duplicates(index: PackedIndex, examples: int = 10) -> tuple[np.ndarray, int, list[dict]]:
    """(canonical, collisions, examples) over the packed rows: canonical[i] is the first row (by instance id)
    with row i's tokens; rows are hashed as the loader emits them and equal hashes re-compared byte for byte."""
    from olmax.audit.hashing import packed_row_hashes

    n = index.num_instances
    hashes = packed_row_hashes(index)
    order = np.argsort(hashes, kind="stable")  # equal hashes stay in instance order
    bounds = np.flatnonzero(np.diff(hashes[order]) != 0) + 1
    canonical, collisions, found = np.arange(n, dtype=np.int64), 0, []
    for group in np.split(order, bounds):
        if group.size < 2:
            continue
        rows = index.read(group.astype(np.int64))["input_ids"]
        for m, row in zip(group[1:].tolist(), rows[1:]):
            if np.array_equal(row, rows[0]):
                canonical[m] = int(group[0])
                if len(found) < examples:
                    found.append({"instance": m, "same_as_instance": int(group[0])})
            else:
                collisions += 1
    return canonical, collisions, found


def _span_checks(index, content, config: LoaderAuditConfig, checks: list[Check]) -> dict:
    """Tokens inside a later copy of a `span_tokens`-token span found elsewhere in the mix."""
    from olmax.audit.dedup import repeated_spans

    labels = [index.labels[int(np.flatnonzero(content.phys == p)[0])] for p in range(len(content.phys_paths))]
    spans = repeated_spans(
        content.phys_paths,
        labels,
        config.span_tokens,
        work_dir=config.stream.work_dir,
        examples=config.examples,
    )
    rep_tokens = int(sum(int(m.sum()) for m in spans["masks"]))
    frac = rep_tokens / max(1, sum(spans["sizes"]))
    checks.append(
        Check(
            "repeated_spans",
            frac <= config.max_repeated_span_frac,
            round(frac, 6),
            config.max_repeated_span_frac,
            detail=f"{rep_tokens} tokens inside a later copy of a >= "
            f"{config.span_tokens}-token span ({spans['across']} across sources)",
        )
    )
    return {
        "span_tokens": config.span_tokens,
        "repeated_tokens": rep_tokens,
        "within_source": spans["within"],
        "across_sources": spans["across"],
        "examples": spans["examples"],
    }


def write_exposure(path: str, index, ids: np.ndarray, stream: StreamSpec, last_step: int) -> None:
    """Per-instance serve counts of the audited window as `olmax-exposure/1` .npz (or .json), atomically:
    instance_id, count, source, seq_len, mix, step (see olmax/evals/exposure.py)."""
    from olmax.atomic import temp_path
    from olmax.jsonio import write_json

    uniq, counts = np.unique(ids, return_counts=True)
    source = np.asarray(index.label_names)[index.source_ids(uniq)]
    fields = {
        "instance_id": uniq.astype(np.int64),
        "count": counts.astype(np.int64),
        "source": source,
        "seq_len": np.int64(stream.seq_len),
        "mix": np.str_(stream.mix),
        "step": np.int64(last_step),
    }
    if path.endswith(".json"):
        write_json(path, {"format": "olmax-exposure/1", **fields}, indent=None)
    else:
        with temp_path(path) as tmp, open(tmp, "wb") as f:
            np.savez(f, **fields)
