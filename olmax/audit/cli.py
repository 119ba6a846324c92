"""`olmax audit ...`: loader plan audit, train↔eval leak audit, emitted-stream audit; parsing only."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from olmax.atomic import locked_out
from olmax.beam_cli import add_runner_options, beam_options
from olmax.data.stream_cli import add_stream_options, stream_from_args
from olmax.data.trace_cli import add_horizon_options


def _out(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="report JSON (written atomically; a path or an fsspec URL)")


def register(sub: argparse._SubParsersAction) -> None:
    audit = sub.add_parser("audit", help="audit data before launch: loader plan, repeats, train↔eval leaks")
    asub = audit.add_subparsers(dest="audit_command", metavar="SUBCOMMAND", required=True)

    lo = asub.add_parser(
        "loader",
        help="replay a run's data plan and check repeats, rank overlap, shares, duplicates",
        description="Replays the exact batches olmax's loader would emit (no training) and checks that "
        "every instance is seen as often as planned, no two ranks share a row, source shares match the "
        "mix, and no content repeats from another file/position beyond the mix's planned repetition. "
        "Exits 1 when a gated check fails.",
    )
    add_stream_options(lo)
    g = lo.add_mutually_exclusive_group()
    g.add_argument("--steps", type=int, help="audit this many global steps from the start")
    g.add_argument("--epochs", type=int, help="audit this many whole epochs (default 1)")
    lo.add_argument("--process-count", type=int, default=1)
    lo.add_argument(
        "--resume-at",
        type=int,
        nargs="*",
        default=[],
        help="save and restore the loader state before these stream steps",
    )
    lo.add_argument("--resume-process-count", type=int, help="process count after a --resume-at")
    lo.add_argument(
        "--share-tolerance",
        type=float,
        default=0.02,
        help="allowed |observed - planned| source share, on top of 4 sigma of sampling",
    )
    lo.add_argument(
        "--max-dup-instance-frac",
        type=float,
        default=0.01,
        help="allowed fraction of instances (and of emitted rows) whose content repeats "
        "another file/position",
    )
    lo.add_argument(
        "--max-dup-doc-frac",
        type=float,
        default=0.05,
        help="allowed fraction of document tokens in exact duplicate documents",
    )
    lo.add_argument("--min-doc-tokens", type=int, default=32, help="shorter documents are not compared")
    lo.add_argument("--no-content", action="store_true", help="skip the content (hash) pass")
    lo.add_argument(
        "--span-tokens",
        type=int,
        default=0,
        help="also find repeated spans of this many tokens (50: ExactSubstr) across files and "
        "positions; 0 (default) skips this slower pass",
    )
    lo.add_argument("--max-repeated-span-frac", type=float, default=0.05)
    add_near_options(lo)
    lo.add_argument(
        "--exposure-out",
        help="also write per-instance serve counts (.npz or .json, the "
        "format `olmax eval memorization --exposure` reads)",
    )
    lo.add_argument(
        "--rank-check-steps",
        type=int,
        default=512,
        help="steps on which every rank's loader is asked and checked against the global "
        "batch (all steps when the audit is shorter)",
    )
    lo.add_argument("--threads", type=int, default=2)
    _out(lo)
    add_runner_options(lo)
    lo.set_defaults(func=locked_out(_loader, "olmax audit loader"))

    lk = asub.add_parser(
        "leaks",
        help="find held-out eval items inside the training data",
        description="Retrieve, then verify: every n-word window of the training text that equals an eval "
        "item's window (exact hashed lookup) makes the (item, document) pair a candidate; each candidate is "
        "verified by aligning the item's words against the document's words around the matches (inserted, "
        "dropped and substituted words tolerated). An item is contaminated when one document aligns at least "
        "--threshold of its words; the report lists every such document (source, file, doc id, token span, "
        "score). Exits 1 when any item of a gated set is contaminated.",
    )
    add_stream_options(lk, seq_len=False, batch=False, order=False, work_dir=False)
    lk.add_argument(
        "--eval",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="an eval set: jsonl (id + text, or question/answer/passage), an HF datasets "
        "folder (a path or an fsspec URL), or a bundled set name (NAME alone, e.g. arc_easy); a bare "
        "PATH names the set by its file name up to the first dot, as every --eval does; repeat",
    )
    lk.add_argument(
        "--tokenizer", default="dolma2", help="tokenizer file (or dolma2) the mix was tokenized with"
    )
    lk.add_argument(
        "--ngram",
        type=int,
        default=8,
        help="retrieval window in words (default 8: survives one edit in ten words)",
    )
    lk.add_argument(
        "--min-item-words",
        type=int,
        default=4,
        help="items with fewer words than this are too short to decide",
    )
    lk.add_argument(
        "--threshold",
        type=float,
        default=0.75,
        help="flag when one document aligns this fraction of an item's words (default 0.75)",
    )
    lk.add_argument(
        "--short-words",
        type=int,
        default=20,
        help="items of at most this many words need an exact whole-item match (default 20)",
    )
    lk.add_argument(
        "--min-cover",
        type=float,
        default=0.25,
        help="verify an (item, document) pair when its matched windows cover this fraction "
        "of the item's words (at least one window)",
    )
    lk.add_argument(
        "--template-items",
        type=int,
        default=10,
        help="a window shared by this many eval items is a template and not used (default 10)",
    )
    lk.add_argument(
        "--max-docs-per-key",
        type=int,
        default=1000,
        help="hits kept per window: the first this many documents (bounds memory)",
    )
    lk.add_argument("--gate", nargs="*", help="sets whose contamination fails the command (default all)")
    lk.add_argument("--clean-dir", help="write each set's uncontaminated items here as jsonl")
    lk.add_argument(
        "--threads",
        type=int,
        default=2,
        help="training files probed at once (default 2; the compiled passes release the GIL)",
    )
    add_runner_options(lk)
    _out(lk)
    lk.set_defaults(func=locked_out(_leaks, "olmax audit leaks"))

    ex = asub.add_parser(
        "exposure",
        help="each contaminated eval item joined with the training steps that served it",
        description="For every contaminated item of an `olmax audit leaks` report, every document that "
        "carries it and every global step (1-based, the trainer's) whose batch holds a token of the matched "
        "span: before launch from the plan, or for a run (--run DIR: its config's stream, up to its last "
        "logged step). Each epoch's inverse order is built once beside its order file.",
    )
    add_stream_options(ex)
    ex.add_argument("--leaks", required=True, help="the `olmax audit leaks` report (JSON)")
    add_horizon_options(ex).add_argument(
        "--run", help="a run folder of `olmax train`: its stream (flags override) and last step"
    )
    _out(ex)
    ex.set_defaults(func=locked_out(_exposure, "olmax audit exposure"))

    dd = asub.add_parser(
        "dedup",
        help="exact duplicate documents and repeated spans (>= 50 tokens) in a mix",
        description="Hashes every document and every span-token window inside a document of the "
        "mix's distinct files; reports duplicates within and across sources. Exits 1 above the limits.",
    )
    add_stream_options(dd, seq_len=False, batch=False, order=False)
    dd.add_argument("--span", type=int, default=50, help="repeated-span length in tokens (ExactSubstr: 50)")
    dd.add_argument("--min-doc-tokens", type=int, default=32)
    dd.add_argument("--max-dup-doc-frac", type=float, default=0.01)
    dd.add_argument("--max-repeated-span-frac", type=float, default=0.05)
    dd.add_argument("--threads", type=int, default=2)
    add_near_options(dd)
    add_runner_options(dd)
    _out(dd)
    dd.set_defaults(func=locked_out(_dedup, "olmax audit dedup"))

    st = asub.add_parser(
        "stream",
        help="audit the token rows a loader actually emitted (any loader)",
        description="Matches every emitted row (.npy (steps, rows, L) per host) to the mix's instances "
        "by content hash and reports repeats, never-seen instances, foreign rows, cross-host overlap "
        "and source shares. Exits 1 on an unplanned repeat, a foreign row or a cross-host overlap "
        "beyond the copies the mix plans.",
    )
    add_stream_options(st, batch=False, order=False)
    st.add_argument(
        "--batches", nargs="+", required=True, metavar="FILE", help="one .npy per host, in host order"
    )
    st.add_argument("--threads", type=int, default=2)
    _out(st)
    st.set_defaults(func=locked_out(_stream, "olmax audit stream"))


def add_near_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("near-duplicates (MinHash over token-id n-grams; see docs/dedup.md)")
    g.add_argument("--near", action="store_true", help="also find near-duplicate documents")
    g.add_argument("--minhash-ngram", type=int, default=5, help="token n-gram shingle size (default 5)")
    g.add_argument("--minhash-bands", type=int, default=26, help="LSH bands (default 26)")
    g.add_argument("--minhash-rows", type=int, default=11, help="hashes per band (default 11)")
    g.add_argument(
        "--minhash-threshold", type=float, default=0.8, help="verified Jaccard of a near-duplicate (0.8)"
    )
    g.add_argument(
        "--max-near-dup-frac",
        type=float,
        default=0.05,
        help="gate: fraction of document tokens in removable near-duplicates (default 0.05)",
    )


def near_params(args: argparse.Namespace):
    """--near's MinHashParams (checked), or None without --near."""
    from olmax.dedup.minhash import MinHashParams

    if not args.near:
        return None
    params = MinHashParams(args.minhash_ngram, args.minhash_bands, args.minhash_rows, args.minhash_threshold)
    params.check()
    return params


def _finish(report: dict, out: str) -> int:
    from olmax import storage
    from olmax.jsonio import dumps, write_json

    if storage.local_path(out) is None:
        storage.write_bytes(out, (dumps(report, 2) + "\n").encode("utf-8"))
    else:
        write_json(storage.local_path(out), report)
    print("\n".join(report["summary"]))
    print(f"report: {out}")
    return 0 if report["ok"] else 1


def _loader(args: argparse.Namespace) -> int:
    from olmax.audit.loader_audit import LoaderAuditConfig, audit_loader

    stream = stream_from_args(args, required=("mix", "seq_len", "global_batch_size"))
    cfg = LoaderAuditConfig(
        stream=stream,
        steps=args.steps,
        epochs=args.epochs,
        process_count=args.process_count,
        resume_at=tuple(args.resume_at),
        resume_process_count=args.resume_process_count,
        share_tolerance=args.share_tolerance,
        max_dup_instance_frac=args.max_dup_instance_frac,
        max_dup_doc_frac=args.max_dup_doc_frac,
        min_doc_tokens=args.min_doc_tokens,
        content=not args.no_content,
        threads=args.threads,
        rank_check_steps=args.rank_check_steps,
        exposure_out=args.exposure_out,
        span_tokens=args.span_tokens,
        max_repeated_span_frac=args.max_repeated_span_frac,
        near=near_params(args),
        max_near_dup_frac=args.max_near_dup_frac,
    )
    return _finish(audit_loader(cfg, progress=True, beam_options=beam_options(args)), args.out)


def _leaks(args: argparse.Namespace) -> int:
    from olmax.audit.leaks import LeakConfig, audit_leaks

    cfg = LeakConfig(
        stream=stream_from_args(args),
        evals=tuple(args.eval),
        tokenizer=args.tokenizer,
        ngram=args.ngram,
        min_item_words=args.min_item_words,
        threshold=args.threshold,
        short_words=args.short_words,
        min_cover=args.min_cover,
        template_items=args.template_items,
        max_docs_per_key=args.max_docs_per_key,
        gate=tuple(args.gate) if args.gate is not None else None,
        clean_dir=args.clean_dir,
        threads=args.threads,
    )
    report = audit_leaks(cfg, beam_options=beam_options(args))
    rc = _finish(report, args.out)
    lines = leak_lines(report, tuple(args.eval))
    if lines:
        print("\n".join(lines))
    return rc


# the fields of a contaminated item printed on its own lines; any other field (which part of the item
# leaked and how, when the report says it) is printed as it is
ITEM_FIELDS = {"eval", "id", "kind", "item_words", "score", "n_documents", "documents", "same_as"}


def short_value(v: object, most: int = 160) -> str:
    text = v if isinstance(v, str) else json.dumps(v, default=str)
    return text if len(text) <= most else text[: most - 3] + "..."


def leak_lines(report: dict, specs: tuple[str, ...], most: int = 20) -> list[str]:
    """The contaminated items of a leak report for a person: set, id, first words of the item (read again
    from its set), kind, documents and where the first one holds it, and the leaked part when the report
    says it; the first `most` items, the rest in the JSON."""
    from olmax.audit.evalsets import load_eval

    items = report.get("contaminated") or []
    if not items:
        return []
    words: dict[tuple[str, str], str] = {}
    wanted = {c["eval"] for c in items[:most]}
    for spec in specs:
        name = spec.partition("=")[0]
        if name in wanted:
            for it in load_eval(spec)[1]:
                words[(name, str(it.report_id))] = " ".join(it.text.split()[:10])
    out = [f"contaminated items ({len(items)}):"]
    for c in items[:most]:
        first = (c.get("documents") or [{}])[0]
        where = (
            f"{first.get('source', '?')} {Path(str(first.get('file', '?'))).name} doc {first.get('doc', '?')}, file "
            f"tokens {first.get('token_start', '?')}-{first.get('token_end', '?')}"
        )
        text = words.get((c["eval"], str(c["id"])))
        out.append(
            f"  {c['eval']} {c['id']}: {text + ' ...' if text else '(text not found)'}"
            + (f"  [same as {c['same_as']['eval']} {c['same_as']['id']}]" if c.get("same_as") else "")
        )
        out.append(
            f"    {c.get('kind', '?')} match, score {c.get('score', 0):.2f}, in {c.get('n_documents', 0)} "
            f"document(s); first: {where}"
        )
        for key in sorted(set(c) - ITEM_FIELDS):
            if c[key] not in (None, "", [], {}):
                out.append(f"    {key.replace('_', ' ')}: {short_value(c[key])}")
    if len(items) > most:
        out.append(f"  ... and {len(items) - most} more in the report")
    return out


def _exposure(args: argparse.Namespace) -> int:
    from olmax.audit.exposure import audit_exposure
    from olmax.data.loader import open_loader, resolve_mix
    from olmax.jsonio import read_json, write_json

    until = args.until_step
    if args.run:
        from olmax.train.config import run_config_path
        from olmax.train.metrics import train_records

        args.config = run_config_path(args.run)
        steps = train_records(args.run)
        until = max(steps) if steps else 0
    stream = stream_from_args(args, required=("mix", "seq_len", "global_batch_size"))
    stream = stream.replace(mix=resolve_mix(stream))
    loader = open_loader(stream, process_index=0, process_count=1)
    report = audit_exposure(
        read_json(args.leaks, "an `olmax audit leaks` report"), loader, epochs=args.epochs, until_step=until
    )
    write_json(args.out, report, indent=1)
    for name, s in report["sets"].items():
        print(
            f"{name}: {s['contaminated']} contaminated item(s), {s['exposed']} served by step "
            f"{report['until_step']} ({s['exposures']} servings)"
        )
    print(f"report: {args.out}")
    return 0


def _dedup(args: argparse.Namespace) -> int:
    from olmax.audit.dedup import DedupConfig, audit_dedup

    cfg = DedupConfig(
        stream=stream_from_args(args),
        span=args.span,
        min_doc_tokens=args.min_doc_tokens,
        max_dup_doc_frac=args.max_dup_doc_frac,
        max_repeated_span_frac=args.max_repeated_span_frac,
        threads=args.threads,
        near=near_params(args),
        max_near_dup_frac=args.max_near_dup_frac,
    )
    return _finish(audit_dedup(cfg, beam_options=beam_options(args)), args.out)


def _stream(args: argparse.Namespace) -> int:
    from olmax.audit.stream import StreamConfig, audit_stream

    cfg = StreamConfig(
        stream=stream_from_args(args, required=("mix", "seq_len")),
        batches=tuple(args.batches),
        threads=args.threads,
    )
    return _finish(audit_stream(cfg), args.out)
