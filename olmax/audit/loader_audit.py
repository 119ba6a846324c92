"""`olmax audit loader`: replay a run's exact data plan (no training, no token reads) and check it.

Contract. The replay asks olmax's own `Loader` (same index, order and fingerprint as training) for
the instance ids of every rank's rows of every global batch in the audited window: `--steps N`
stream steps from epoch 1 step 0, or `--epochs E` whole epochs. `--resume-at K` saves the loader
state before stream step K, round-trips it through its dict form and resumes with a fresh loader
(optionally at another process count), exactly as a restart would. The checks, gated unless marked, are
`CHECK_MEANINGS` below, one line each (the demo's report and the docs print them from there).
"""

from __future__ import annotations

import math
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field

import numpy as np

from olmax.audit.audit_config import LoaderAuditConfig
from olmax.audit.checks import Check, checks_json, failed, summary_lines, verdict
from olmax.audit.content import ContentReport, scan_content
from olmax.audit.dedup import repeated_spans
from olmax.audit.phases import Phases, Progress
from olmax.audit.plan_replay import PlanReplay, PlanTally, emitted_at
from olmax.audit.spans import physical_ids
from olmax.audit.window_content import ContentTally, ExposureTally
from olmax.beam import describe, pipeline_options
from olmax.data.loader import file_index, stream_index
from olmax.data.order import default_work_dir, epoch_order
from olmax.data.packing import PackedIndex
from olmax.hashing import packed_row_hashes

# Every check the loader audit reports, what it catches (one line each); `source_share:<label>` is one per source.
CHECK_MEANINGS = {
    "instances_over_planned": "an instance emitted twice within one epoch (the plan is a permutation: once per epoch)",
    "instances_missing": "in a fully audited epoch, fewer distinct instances than batches x global batch size",
    "rank_overlap": "an instance served to two ranks in the same step (double sharding)",
    "rank_union": "the ranks' rows of a step are not exactly that step's global batch",
    "resume_position": "a loader saved before step K and restored resumes at step K (also at another rank count)",
    "path_under_several_labels": "one physical file listed under two source labels (planned repeats keep one label)",
    "source_share": "a source's observed token share vs the mix's, within --share-tolerance plus 4 sigma",
    "identical_files": "two different files with the same bytes (a copied shard)",
    "duplicate_instances": "identical training windows at different files/positions, as a fraction of the mix",
    "duplicate_documents": "identical documents at different files/positions (a document in two shards)",
    "unplanned_repeat_rows": "emitted rows whose content was already emitted from another position",
    "repeated_spans": "tokens inside a later copy of a span found elsewhere (with --span-tokens; a shard copied at an offset)",
    "hash_collisions": "(info) equal content hashes whose bytes differ; the byte comparison decided",
    "exposure": "(info) per source, distinct content tokens seen 1x, 2x, ... in the audited window",
    "near_duplicates": "tokens in removable MinHash near-duplicate documents (with --near), as a fraction",
    "near_duplicate_exposure": "planned tokens the model would read from removable near-duplicates (with --near)",
}


def check_meaning(name: str) -> str:
    """What check `name` catches, in one line ('' for a name the loader audit does not report)."""
    return CHECK_MEANINGS.get(name.split(":", 1)[0], "")


def audit_loader(
    config: LoaderAuditConfig, *, progress: bool = False, beam_options: str | None = None
) -> dict:
    """Run every check; returns the report dict (`report["ok"]` False when a gated check fails).
    `beam_options` (Beam's flags): the content checks' reads and hashing run as an Apache Beam pipeline
    (loader_beam.py), the same report but its `timing`.

    Phases: index → content map (with content checks: every instance window and document of the mix
    hashed, duplicates found by hash partition) → per epoch, build (or open) its order file, then replay
    its steps, every rank's rows from its own loader, through the plan tally and the window's content and
    exposure tallies (all streamed: olmax/audit/plan_replay.py, window_content.py) → plan checks
    (repeats, coverage, ranks, resume) → label checks → source shares → content checks (duplicates,
    unplanned repeats, exposure, spans) → exposure file → report, with each phase's time and memory
    high-water mark."""

    with (
        Phases() as phases,
        ExitStack() as scratch,
    ):  # scratch: the window tallies' spills, removed at the end
        with phases.phase("index"):
            stream = config.stream
            index = stream_index(stream, progress=progress)
        scan, t0 = None, time.monotonic()
        if config.content:
            with phases.phase("content map"):
                scan = _scan_content(index, config, beam_options, progress)
        content_seconds = time.monotonic() - t0
        run, tally, sinks = _replay_plan(index, config, phases, progress, scan)
        for sink in sinks.values():
            scratch.callback(sink.spill.close)
        checks: list[Check] = []
        with phases.phase("plan checks"):
            plan = _plan_checks(index, run, tally, config, checks)
            several, phys = _label_checks(index, checks)
            shares = _share_checks(index, tally.observed, tally.rows, config, checks)
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
                "rows": tally.rows,
                "resumes": run["resumes"],
                "full_epochs": plan["full_epochs"],
                "rank_checked_steps": run["rank_checked_steps"],
            },
            "instances_over_planned_examples": plan["over_examples"],
            "paths_under_several_labels": several,
            "sources": shares,
            "checks_ran": {
                "plan_replay": f"local: every rank's loader asked for its rows of every step "
                f"({run['rank_checked_steps']} steps x {config.process_count} ranks"
                f"{', and after each resume at its process count' if run['resumes'] else ''}), "
                "streamed in blocks of steps (bounded memory)",
                "content": ("local" if beam_options is None else f"beam ({_beam(beam_options)})")
                if config.content
                else "skipped (--no-content)",
            },
        }
        if scan is not None:
            t0 = time.monotonic()
            with phases.phase("content checks"):
                report.update(_content_checks(index, scan, sinks["content"], config, checks, progress))
            report["timing"] = {
                "content_runner": f"local ({config.threads} threads)"
                if beam_options is None
                else _beam(beam_options),
                "content_seconds": round(content_seconds + time.monotonic() - t0, 3),
            }
        if config.near is not None:
            from olmax.audit.near import near_exposure

            with phases.phase("near duplicates"):
                report["near_duplicates"] = near_exposure(
                    index,
                    config.near,
                    min_doc_tokens=config.min_doc_tokens,
                    max_frac=config.max_near_dup_frac,
                    threads=config.threads,
                    checks=checks,
                    stream=config.stream,
                )
        if config.exposure_out:
            with phases.phase("exposure file"):
                sinks["exposure"].write(config.exposure_out, stream, run["last_step"] + 1, progress=progress)
            report["exposure_file"] = config.exposure_out
    report["performance"] = phases.summary()
    report["hashing"] = (
        "instances and documents: xxh3-64 of their uint32 bytes, every equal-hash pair "
        "re-compared byte for byte before it is counted"
    )
    report["checks"] = checks_json(checks)
    report["ok"] = not failed(checks)
    report["verdict"] = verdict(checks)
    report["summary"] = summary_lines(
        f"olmax audit loader: {stream.mix} (L={stream.seq_len}, "
        f"G={stream.global_batch_size}, seed={stream.seed}, {run['steps']} steps x "
        f"{config.process_count} ranks, {tally.rows} rows)",
        checks,
    ) + _performance_lines(report)
    return report


def _performance_lines(report: dict) -> list[str]:
    """Which checks ran where, then each phase's time and memory high-water mark."""
    perf = report["performance"]
    lines = ["checks ran: " + "; ".join(f"{k}: {v}" for k, v in report["checks_ran"].items())]
    for r in perf["phases"]:
        lines.append(
            f"  {r['phase']}: {r['seconds']:.1f} s, peak anonymous {r['peak_anon_mib']} MiB, "
            f"peak resident {r['peak_rss_mib']} MiB"
        )
    lines.append(
        f"  total {perf['seconds']:.1f} s; high-water: anonymous {perf['peak_anon_mib']} MiB, resident "
        f"{perf['peak_rss_mib']} MiB (process VmHWM {perf['process_vmhwm_mib']} MiB)"
    )
    return lines


def _replay_plan(index, config: LoaderAuditConfig, phases, progress: bool, scan: ContentScan | None):
    """Stream the audited window through a `PlanTally` and, with content checks and an exposure file, the
    window's `ContentTally` and `ExposureTally` (each block once, nothing kept), one phase per epoch's
    order build and one per its replay. Returns (run, tally, the window tallies by name)."""
    spec = config.stream
    work_dir = spec.work_dir or default_work_dir()
    with phases.phase("replay setup"):
        plan = PlanReplay(index, config)
        tally = PlanTally(index, plan.bpe, config.examples)
        rows = plan.total * spec.global_batch_size
        sinks: dict = {}
        if scan is not None:
            sinks["content"] = ContentTally(index, scan.locate, rows, work_dir)
        if config.exposure_out:
            sinks["exposure"] = ExposureTally(index, rows, work_dir)
    bar = Progress(progress, rows, "replay (every rank, every step)", "row", tokens_per=spec.seq_len)

    def on_epoch(epoch: int) -> None:
        # The epoch's order file is built (or found) before its first step: timed as its own phase.
        phases.begin(f"order epoch {epoch}")
        epoch_order(spec.order, index.num_instances, spec.seed, epoch, work_dir, progress=progress)
        phases.begin(f"replay epoch {epoch}")

    last_step = -1
    try:
        for block in plan.blocks(on_epoch):
            tally.add(block)
            for sink in sinks.values():
                sink.add(block.ids)
            if block.k.size:
                last_step = max(last_step, int(block.k[-1]))
            bar.update(block.ids.size)
        phases.end()
    except BaseException:
        for sink in sinks.values():
            sink.spill.close()
        raise
    finally:
        bar.close()
    run = dict(plan.stats)
    run.update(
        steps=tally.steps(),
        planned_steps=plan.total,
        batches_per_epoch=plan.bpe,
        plan=plan,
        last_step=last_step,
    )
    return run, tally, sinks


def _plan_checks(index, run: dict, tally, config: LoaderAuditConfig, checks: list[Check]) -> dict:
    """Each instance at most once per epoch, full epochs covered, ranks disjoint and complete, resumes
    where saved; returns the over-planned examples and the fully audited epochs."""

    G, L, N = config.stream.global_batch_size, config.stream.seq_len, index.num_instances
    keys = tally.over_keys
    where = emitted_at(run["plan"], keys, N) if keys.size else {}
    over_examples = []
    for u in keys.tolist():
        f, a, _ = index.instance_documents(int(u % N))[0]
        over_examples.append(
            {
                "instance": int(u % N),
                "epoch": int(u // N) + 1,
                "file": index.paths[f],
                "window": a // L,
                "emitted_at": where[u],
            }
        )
    n_over = tally.over_rows
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
    full_epochs = tally.full_epochs()
    missing = sum(bpe * G - tally.distinct[e] for e in full_epochs)
    checks.append(
        Check(
            "instances_missing",
            missing == 0,
            missing,
            0,
            detail=f"over {len(full_epochs)} full epoch(s); the epoch tail of "
            f"{N - bpe * G} instances is dropped by plan",
            # whether every instance is served is only known over a whole epoch
            needs="" if full_epochs else f"a whole epoch replayed: --epochs 1, or --steps {bpe} or more",
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
            detail="steps whose ranks' rows are not exactly the global batch"
            + (
                f" (first: {', '.join(map(str, run['bad_step_examples']))})"
                if run["bad_step_examples"]
                else ""
            ),
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


def _share_checks(
    index, observed: np.ndarray, rows: int, config: LoaderAuditConfig, checks: list[Check]
) -> dict:
    """Observed token share of each source vs the mix's plan (`observed`: per source, emitted rows of a
    window index, tokens of a packed one; `rows` emitted in all); returns the per-source shares."""
    L = config.stream.seq_len
    planned = index.tokens_by_label()
    total_planned = sum(planned.values())
    if isinstance(index, PackedIndex):  # a packed row holds documents of several files: count each's tokens
        served = max(1, int(observed.sum()))
    else:
        observed = observed * L
        served = max(1, rows * L)
    shares = {}
    for i, name in enumerate(index.label_names):
        p = planned[name] / total_planned
        o = float(observed[i]) / served
        slack = config.share_tolerance + 4 * math.sqrt(p * (1 - p) / max(1, rows))
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


@dataclass
class ContentScan:
    """The content map's result: the mix's duplicate windows and documents (`content`), the repeated spans
    when Beam found them, and, for a packed index, its rows' first copies (`canonical`: 8 bytes a packed
    row of the mix), their collisions and examples."""

    content: ContentReport
    files_index: object
    spans: dict | None = None
    canonical: np.ndarray | None = None
    row_collisions: int = 0
    row_examples: list = field(default_factory=list)
    index: object = None

    def locate(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(physical window, content id) of each instance id; a packed row is its own position."""
        if self.canonical is not None:
            return ids, self.canonical[ids]
        windows = self.content.physical_windows(self.index, ids)
        return windows, self.content.content_of(windows)


def _scan_content(index, config: LoaderAuditConfig, beam_options: str | None, progress: bool) -> ContentScan:
    """Hash every instance window and document of the mix's distinct files (locally or on Beam) and find
    the duplicates, before the replay streams the window's rows past them."""
    packed = isinstance(index, PackedIndex)
    # documents and whole files come from the mix's files; instances are fixed windows of them, or packed rows
    files_index = file_index(config.stream) if packed else index
    spans = None
    if beam_options is None:
        content = scan_content(files_index, config, instances=not packed, progress=progress)
    else:
        from olmax.audit.loader_beam import content_on_beam

        content, spans = content_on_beam(
            beam_options, files_index, config, instances=not packed, labels=_phys_labels(files_index)
        )
    scan = ContentScan(content, files_index, spans, index=index)
    if packed:
        scan.canonical, scan.row_collisions, scan.row_examples = packed_duplicates(index, config.examples)
    return scan


def _content_checks(
    index, scan: ContentScan, window, config: LoaderAuditConfig, checks: list[Check], progress: bool = False
) -> dict:
    """Identical instances/documents elsewhere, unplanned repeats (from the window's `ContentTally`),
    identical files, exposure and (with `span_tokens`) repeated spans; returns the report's `content` and
    `exposure` sections."""

    content, N = scan.content, index.num_instances
    packed = scan.canonical is not None
    if packed:
        dup_inst = int((scan.canonical != np.arange(N)).sum())
        collisions, dup_examples = scan.row_collisions + content.collisions, scan.row_examples
    else:
        dup_inst = sum(
            content.duplicates_in(int(content.phys_offsets[p]), int(content.phys_offsets[p + 1]))
            for p in content.phys.tolist()
        )  # counted per mix line
        collisions, dup_examples = content.collisions, content.window_examples
    rows = window.rows
    unplanned, exposure = window.finish(progress)
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
    checks.append(
        Check(
            "unplanned_repeat_rows",
            unplanned <= config.max_dup_instance_frac * rows,
            unplanned,
            f"{config.max_dup_instance_frac} of {rows} rows",
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
        section["repeated_spans"] = _span_checks(scan.files_index, content, config, checks, scan.spans)
    return {"content": section, "exposure": exposure}


def packed_duplicates(index: PackedIndex, examples: int = 10) -> tuple[np.ndarray, int, list[dict]]:
    """(canonical, collisions, examples) over the packed rows: canonical[i] is the first row (by instance id)
    with row i's tokens; rows are hashed as the loader emits them and equal hashes re-compared byte for byte."""

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


def _beam(options: str) -> str:
    return describe(pipeline_options(options))


def _phys_labels(index) -> list[str]:
    """Each physical file's source label (its first mix path's)."""

    phys = physical_ids(index.paths)
    return [
        index.labels[int(np.flatnonzero(phys == p)[0])]
        for p in range(int(phys.max()) + 1 if phys.size else 0)
    ]


def _span_checks(
    index, content, config: LoaderAuditConfig, checks: list[Check], spans: dict | None = None
) -> dict:
    """Tokens inside a later copy of a `span_tokens`-token span found elsewhere in the mix (`spans`:
    already found by the Beam pipeline)."""

    if spans is None:
        spans = repeated_spans(
            content.phys_paths,
            _phys_labels(index),
            config.span_tokens,
            work_dir=config.stream.work_dir,
            examples=config.examples,
            eos_token_id=config.stream.eos_token_id,
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
